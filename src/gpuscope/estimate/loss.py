"""The loss head's traffic as the training planners price it (train.py, lora_train.py): transformers'
ForCausalLMLoss over the full vocabulary in fp32 (upcast, log_softmax, nll_loss), T x V logits.

Bytes a logit:
- forward, LOSS_FWD_B = 20: the upcast of the 16-bit logits (read 2, write 4) and log_softmax (reads its fp32 input,
  more than once over a 128k row, and writes its output); nll_loss reads one entry a row.
- backward, LOSS_BWD_B = 22, from the kernels it launches: nll_loss's backward fills a zero fp32 gradient (write 4)
  and scatters into it, log_softmax's backward reads that gradient and its saved output and writes dX (12), the
  upcast's backward casts dX to 16 bit (read 4, write 2). Not twice the forward, as the planner's other elementwise
  ops are priced: nothing of the forward runs again.
Measured on the H200, Llama-3.1-8B at 2048 x 128,256 logits (research/results/2026-12-02-h200-b/call2/gpu_qlora2/
trace/trace_qlora.json, device times of the kernels in order): forward 745 us (upcast) + 1,021 (log_softmax) + 18
(nll_loss) = 1.78 ms; backward 224 (zero fill) + 10 (nll_loss) + 1,070 (log_softmax) + 358 (cast) = 1.66 ms. Planned
at the eager elementwise bandwidth (roofline.ELEMENTWISE_BW_FRACTION of the catalog H200's): 2.02 and 2.22 ms (the
backward was 4.04 ms at 2x the forward). At 8192 tokens (Llama-3.2-1B, research/results/2026-11-29-h200/
profile.json) log_softmax took 3.98 ms forward and 4.23 ms backward: the backward's time is the forward's, not twice.
"""

from __future__ import annotations

from gpuscope.estimate.ops import Op

LOSS_FWD_B = 20.0
LOSS_BWD_B = 4.0 + 12.0 + 6.0
LOSS_OP = "loss_log_softmax"


def loss_op(tokens: int, vocab: int) -> Op:
    """The forward's loss over ``tokens`` x ``vocab`` logits (six kernels: upcast, log_softmax, nll_loss, ...)."""
    return Op(LOSS_OP, "elementwise", 0.0, LOSS_FWD_B * tokens * vocab, 6)


def loss_backward_op(o: Op) -> Op:
    """The backward of ``loss_op``'s op: LOSS_BWD_B a logit, four kernels (fill, nll_loss, log_softmax, cast)."""
    return Op(o.name + "_bwd", o.kind, 0.0, o.bytes * LOSS_BWD_B / LOSS_FWD_B, 4, o.count)
