"""Bytes per element of each dtype, and what quantized weights really occupy.

Quantized formats keep their scales beside the weights. We model the common layouts:
- int8: per-output-channel scale (LLM.int8 / bitsandbytes, SmoothQuant), one fp16 scale per row: 1 + 2/K bytes.
- int4: group-wise (GPTQ / AWQ default group size 128) with an fp16 scale and a packed 4-bit zero point per group:
  0.5 + (2 + 0.5)/128 bytes per weight (about 4.16 bits).
- fp8: per-tensor scale (E4M3, as in transformer-engine / vLLM fp8): 1 byte per weight.
Embeddings, norms and the LM head stay in the 16-bit activation dtype in all these schemes.
"""

from __future__ import annotations

from gpuscope.errors import UserError

BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
WEIGHT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4")
INT4_GROUP = 128


def nbytes(dtype: str) -> float:
    try:
        return BYTES[dtype]
    except KeyError:
        raise UserError(f"dtype must be one of {', '.join(BYTES)}, got '{dtype}'.") from None


def check_dtype(dtype: str, field: str, allowed=WEIGHT_DTYPES) -> str:
    d = (dtype or "").lower()
    if d not in allowed:
        raise UserError(f"{field} must be one of {', '.join(allowed)}, got '{dtype}'.")
    return d


def quantized_weight_bytes_per_param(dtype: str, in_features: int = 4096) -> float:
    """Average bytes per weight of a quantized linear layer, scales included."""
    if dtype == "int8":
        return 1.0 + 2.0 / in_features
    if dtype == "int4":
        return 0.5 + 2.5 / INT4_GROUP
    return nbytes(dtype)


def compute_dtype(weight_dtype: str) -> str:
    """The dtype activations and matmuls run in: weight-only int8/int4 dequantize to bf16; fp8 runs fp8 GEMMs."""
    return {"int8": "bf16", "int4": "bf16", "fp32": "fp32", "fp16": "fp16", "fp8": "fp8"}.get(weight_dtype, "bf16")
