"""Weights and KV cache as serving engines store them: bytes per weight of each format, scales included.

Bytes per weight of a quantized linear layer with K inputs and N outputs (the layouts the kernels read):
- ``bf16`` / ``fp16``: 2 bytes.
- ``fp8``: E4M3 weights with one fp32 scale per tensor (vLLM ``Fp8LinearMethod``, ModelOpt/TensorRT-LLM FP8
  checkpoints): 1 + 4/(K N) bytes, and fp8 GEMMs (activations quantized per tensor too: W8A8).
- ``int8``: one byte and an fp16 scale per output channel (W8A16, LLM.int8-style): 1 + 2/K.
- ``int4-awq``: AutoAWQ's GEMM layout, group 128: ``qweight`` int32 [K, N/8] (4 bits a weight), ``qzeros`` int32
  [K/128, N/8] (4 bits per group and column), ``scales`` fp16 [K/128, N]: 0.5 + (0.5 + 2)/128 bytes = 4.156 bits.
- ``int4-gptq``: AutoGPTQ/GPTQModel, group 128: ``qweight`` int32 [K/8, N], ``qzeros`` int32 [K/128, N/8],
  ``scales`` fp16 [K/128, N], ``g_idx`` int32 [K]: 0.5 + 2.5/128 + 4/N bytes.
- ``nf4``: bitsandbytes 4-bit NormalFloat with double quantization (Dettmers et al. 2023, QLoRA, section 3
  "Double Quantization"): 4 bits a weight, one absmax per 64 weights quantized to 8 bits, and one fp32 second-level
  constant per 256 of those blocks: 4 + 8/64 + 32/(64 x 256) = 4.127 bits.
- GGUF (llama.cpp ``ggml-common.h`` block structs; bits = block bytes x 8 / weights per block):
  ``q8_0`` 32 weights in 2 + 32 bytes = 8.5 bits; ``q4_0`` 2 + 16 = 4.5; ``q4_k`` super-block of 256 in
  2 + 2 + 12 + 128 = 144 bytes = 4.5; ``q5_k`` 176 bytes = 5.5; ``q6_k`` 128 + 64 + 16 + 2 = 210 bytes = 6.5625;
  ``q3_k`` 110 bytes = 3.4375; ``q2_k`` 84 bytes = 2.625. The ``_m``/``_s`` mixes put some tensors at a higher type
  (llama.cpp's quantizer, ``llama_tensor_get_type``: Q4_K_M puts half of attn_v and ffn_down in Q6_K), so their
  file averages are measured: llama.cpp ``tools/quantize/README.md``, "Bits per Weight" table for Llama 2 7B:
  Q3_K_M 3.91, Q4_K_M 4.84, Q5_K_M 5.68 (13B: 3.89 / 4.83 / 5.67; 70B: 3.85 / 4.80 / 5.65). Those averages
  include the embedding and the output head, which GGUF quantizes too.
Engines keep embeddings, norms and the LM head in 16 bit for every other format (vLLM, TensorRT-LLM defaults).

The KV cache: bf16/fp16 2 bytes per element; ``fp8`` (E4M3/E5M2, vLLM ``kv_cache_dtype=fp8`` with per-tensor
scales, TensorRT-LLM FP8 KV) 1 byte; ``int8`` 1 byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate.params import count_params
from gpuscope.specs.model import ModelSpec

GROUP = 128  # AWQ / GPTQ default group size


@dataclass(frozen=True)
class WeightFormat:
    """How one weight format stores a linear layer and what its GEMMs run in."""

    name: str
    bits: float  # per weight, scales and zeros included (K, N large; see bytes_per_weight)
    compute: str  # the dtype of the GEMMs (weight-only formats dequantize to bf16)
    quantizes_embeddings: bool = False  # GGUF stores embeddings and the head quantized too
    source: str = ""

    def bytes_per_weight(self, k: int, n: int) -> float:
        """Bytes of one weight of a K x N linear layer, with the per-tensor / per-column terms at this size."""
        base = self.bits / 8.0
        if self.name == "fp8":
            return base + 4.0 / (k * n)
        if self.name == "int8":
            return 1.0 + 2.0 / k
        if self.name == "int4-gptq":
            return base + 4.0 / n
        return base


FORMATS = {f.name: f for f in (
    WeightFormat("bf16", 16.0, "bf16", source="2 bytes"),
    WeightFormat("fp16", 16.0, "fp16", source="2 bytes"),
    WeightFormat("fp32", 32.0, "fp32", source="4 bytes"),
    WeightFormat("fp8", 8.0, "fp8", source="E4M3, per-tensor fp32 scale (vLLM Fp8LinearMethod, ModelOpt FP8)"),
    WeightFormat("int8", 8.0, "bf16", source="int8, fp16 scale per output channel"),
    WeightFormat("int4-awq", 4.0 + 8.0 * 2.5 / GROUP, "bf16", source="AutoAWQ GEMM layout, group 128"),
    WeightFormat("int4-gptq", 4.0 + 8.0 * 2.5 / GROUP, "bf16", source="GPTQ, group 128, g_idx"),
    WeightFormat("nf4", 4.0 + 8.0 / 64 + 32.0 / (64 * 256), "bf16", source="bitsandbytes NF4 + double quant"),
    WeightFormat("q8_0", 8.5, "bf16", True, "GGUF Q8_0: 34 bytes / 32 weights"),
    WeightFormat("q4_0", 4.5, "bf16", True, "GGUF Q4_0: 18 bytes / 32 weights"),
    WeightFormat("q4_k_m", 4.84, "bf16", True, "GGUF Q4_K_M: llama.cpp quantize README, Llama 2 7B file average"),
    WeightFormat("q5_k_m", 5.68, "bf16", True, "GGUF Q5_K_M: llama.cpp quantize README, Llama 2 7B file average"),
    WeightFormat("q3_k_m", 3.91, "bf16", True, "GGUF Q3_K_M: llama.cpp quantize README, Llama 2 7B file average"),
    WeightFormat("q6_k", 6.5625, "bf16", True, "GGUF Q6_K: 210 bytes / 256 weights"),
)}
ALIASES = {"awq": "int4-awq", "gptq": "int4-gptq", "int4": "int4-awq", "bnb-nf4": "nf4"}
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "int8": 1.0}


def weight_format(name: str) -> WeightFormat:
    key = ALIASES.get((name or "").lower(), (name or "").lower())
    if key not in FORMATS:
        raise UserError(f"--dtype '{name}' is not one of {', '.join(FORMATS)}.")
    return FORMATS[key]


def kv_bytes_per_elem(kv_dtype: str) -> float:
    if kv_dtype not in KV_BYTES:
        raise UserError(f"--kv-dtype '{kv_dtype}' is not one of {', '.join(KV_BYTES)}.")
    return KV_BYTES[kv_dtype]


def default_kv_dtype(fmt: WeightFormat) -> str:
    """The KV cache dtype an engine picks by default: the activation dtype (16 bit; fp32 for fp32 weights)."""
    return "fp32" if fmt.name == "fp32" else ("fp16" if fmt.name == "fp16" else "bf16")


def weight_bytes(m: ModelSpec, fmt: WeightFormat, tp: int = 1) -> float:
    """Weights one tensor-parallel rank holds: the linear layers at the format's bytes (at the model's hidden size
    for K and N), embeddings and head sharded over TP (vocab-parallel), norms replicated."""
    pc = count_params(m)
    linear = (pc.attention + pc.mlp) * fmt.bytes_per_weight(m.hidden_size, m.hidden_size)
    act = 4.0 if fmt.name == "fp32" else 2.0
    emb_b = fmt.bits / 8.0 if fmt.quantizes_embeddings else act
    return (linear + (pc.embedding + pc.lm_head) * emb_b) / tp + pc.norms * act


def linear_bytes_per_weight(m: ModelSpec, fmt: WeightFormat) -> float:
    """What a step moves per linear weight (the roofline's weight bytes). Fused dequantizing kernels (fp8 GEMMs,
    Marlin/ExLlama for AWQ/GPTQ, GGUF's mmq) read the stored bytes. bitsandbytes' ``matmul_4bit`` does so only for a
    single row (its gemv_4bit); a batch of rows goes through ``dequantize_4bit`` (writes the bf16 weight) and a bf16
    GEMM (reads it): stored bytes + 2 + 2 a weight, so a batched NF4 step moves more than a bf16 one."""
    stored = fmt.bytes_per_weight(m.hidden_size, m.hidden_size)
    return stored + 4.0 if fmt.name == "nf4" else stored
