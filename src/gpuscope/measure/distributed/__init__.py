"""Distributed workloads under torchrun: the launcher and its worker contract, DDP/FSDP2 training, and gradient
compression hooks."""
