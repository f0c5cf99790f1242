"""ModelSpec: the architecture facts every estimate needs, normalised across model families.

A ModelSpec is built from a Hugging Face ``config.json`` (see ``hf_config.py``) or a preset. Every size is an int;
every flag is explicit, so the estimate layer never has to know which family a model came from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts feed-forward (Mixtral, Qwen2-MoE, DeepSeek-V2/V3)."""

    num_experts: int  # routed experts per MoE layer
    experts_per_token: int  # top-k
    expert_intermediate_size: int
    num_shared_experts: int = 0  # DeepSeek: n_shared_experts, each of expert_intermediate_size
    shared_intermediate_size: int = 0  # total width of the shared expert(s) MLP (0 = none)
    shared_expert_gate: bool = False  # Qwen2-MoE: sigmoid gate Linear(h, 1) on the shared expert
    router_bias_params: int = 0  # DeepSeek-V3: e_score_correction_bias (num_experts) when it is a parameter


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3), arXiv 2405.04434 section 2.1."""

    q_lora_rank: int | None  # None: q is a plain projection (V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # HF model_type
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (dense layers of an MoE model too)
    vocab_size: int
    max_position_embeddings: int = 4096
    tie_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU/GeGLU: gate, up, down (3 matrices); else up, down (2)
    norm: str = "rmsnorm"  # "rmsnorm" (weight) or "layernorm" (weight + bias)
    norms_per_layer: int = 2
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma3)
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    learned_positions: bool = False  # GPT-2 wpe
    parallel_residual: bool = False  # GPT-NeoX, GPT-J: attention and MLP read the same input
    sliding_window: int | None = None
    sliding_window_layers: int = 0  # how many layers use the window (0 when sliding_window is None)
    eager_attention: bool = False  # transformers has no SDPA path (Gemma-2's logit soft-capping): s^2 scores in memory
    mla_latent_cache: bool = False  # MLA served as vLLM/SGLang/FlashMLA do: cache the latent, absorb W_UK/W_UV
    moe: MoESpec | None = None
    moe_layers: tuple[int, ...] = ()  # indices of layers whose MLP is MoE
    mla: MLASpec | None = None
    activation: str = "silu"
    source: str = ""  # where the spec came from (preset name or file path)
    notes: tuple[str, ...] = field(default=())

    # ---- derived facts -------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of all query heads (num_heads * head_dim); differs from hidden_size when head_dim is overridden."""
        if self.mla:
            return self.num_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection for GQA/MQA models."""
        return self.num_kv_heads * self.head_dim

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - len(self.moe_layers)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and len(self.moe_layers) > 0

    def kv_cache_elems_per_token(self) -> int:
        """Elements of KV cache one token adds over all layers.

        GQA/MHA: 2 (K and V) x kv_heads x head_dim per layer. MLA as HF transformers runs it caches the
        decompressed per-head K (nope+rope) and V, not the latent (DeepSeek's own kernels cache the
        kv_lora_rank + rope latent); we follow what transformers allocates, since that is what users measure.
        """
        if self.mla:
            m = self.mla
            if self.mla_latent_cache:  # one shared latent + decoupled rope key per token (DeepSeek-V2 sec. 2.1)
                return (m.kv_lora_rank + m.qk_rope_head_dim) * self.num_layers
            per_layer = self.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            return per_layer * self.num_layers
        return 2 * self.num_kv_heads * self.head_dim * self.num_layers

    def to_dict(self) -> dict:
        return asdict(self)
