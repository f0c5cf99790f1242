"""Model-state memory per GPU under data parallelism with ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054).

Mixed-precision Adam keeps K = 12 bytes of optimizer state per parameter (fp32 master weights, momentum and
variance) beside 2-byte parameters and 2-byte gradients: 2P + 2P + KP = 16P bytes (ZeRO section 3.1).
Stages partition over N data-parallel ranks (ZeRO Figure 1):
  stage 0: (2 + 2 + K) P;  stage 1 (P_os): (2 + 2) P + K P / N;  stage 2 (P_os+g): 2P + (2 + K) P / N;
  stage 3 (P_os+g+p): (2 + 2 + K) P / N.
FSDP full shard is stage 3. The per-precision byte counts generalise the 2/2/12 split (train.py's precisions).
"""

from __future__ import annotations


def model_state_bytes(params: float, dp: int, stage: int, param_b: float = 2.0, grad_b: float = 2.0,
                      state_b: float = 12.0) -> dict[str, float]:
    if stage not in (0, 1, 2, 3):
        raise ValueError("ZeRO stage must be 0, 1, 2 or 3")
    p = params * param_b / (dp if stage >= 3 else 1)
    g = params * grad_b / (dp if stage >= 2 else 1)
    o = params * state_b / (dp if stage >= 1 else 1)
    return {"parameters": p, "gradients": g, "optimizer_states": o, "total": p + g + o}
