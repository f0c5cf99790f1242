"""The collectives benchmark (nccl-tests conventions), run as a torchrun worker."""
