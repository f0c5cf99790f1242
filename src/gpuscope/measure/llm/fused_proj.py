"""``--fuse-proj``: one GEMM for q, k and v, and one for the MLP's gate and up projections (Llama, Mistral, Qwen2).

Why: at batch 1 every projection is a matrix-vector product that costs the time to read its weight plus a fixed cost
per kernel (launch gap, split-K reduction, tail). On the H200 (research/results/2026-11-29-h200-c/README.md, doctor
kernel table of Llama-3.1-8B gs-compile decode) the seven GEMVs of a layer took 137.6 us for 436 MB (3.2 TB/s, 76% of
the
measured copy rate): gate and up 32.3 us each (3.6 TB/s), down 29.9 us (3.9 TB/s), q and o 12.3 us (2.7 TB/s), k and
v 5.25 us (1.6 TB/s), plus five split-K reductions of 1.6 us. The small ones run far below the copy rate; joined
into one weight (q|k|v: 48 MB; gate|up: 235 MB) they read at the rate of the large ones. gpt-fast and vLLM load
Llama the same way (``wqkv``, ``gate_up_proj``).

How (module surgery after the model is built or loaded; the arithmetic is unchanged):
- MLP: ``gate_proj`` and ``up_proj`` are replaced by one ``gate_up_proj`` whose weight is ``cat([W_gate, W_up])``;
  forward = ``down(act(g) * u)`` with ``g, u = gate_up(x).split(...)`` — the same products, in one kernel;
- attention: ``q_proj``/``k_proj``/``v_proj`` become one ``qkv_proj`` (weights and biases concatenated, Qwen2 has
  biases) and the module's class is swapped for a subclass whose forward is HF's own forward for these families
  (transformers 5.x: Llama's, plus the ``sliding_window`` argument Mistral and Qwen2 pass, which flash-attention
  kernels read; the SDPA and eager paths take the window from the mask) with the three
  projections taken from the one output. The cache argument is read under both names transformers has used
  (``cache`` from 5.2x, ``past_key_values`` before).
Supported classes are listed in ``ATTENTION`` and ``MLP``; anything else is left as it is and reported, so a
measurement never claims a fusion it did not make. CPU tests check logits and greedy tokens against the unfused
model.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

ATTENTION = {"LlamaAttention": None, "MistralAttention": "config", "Qwen2Attention": "module"}  # sliding_window
MLP = ("LlamaMLP", "MistralMLP", "Qwen2MLP")


def _concat_linear(parts: list[nn.Linear]) -> nn.Linear:
    if any(p.weight.device.type == "meta" for p in parts):
        raise ValueError("fuse_proj: weights on the meta device (offloaded by accelerate) cannot be fused")
    w = torch.cat([p.weight.detach() for p in parts], dim=0)
    bias = parts[0].bias is not None
    out = nn.Linear(w.shape[1], w.shape[0], bias=bias, device="meta")
    out.weight = nn.Parameter(w, requires_grad=False)
    if bias:
        out.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]), requires_grad=False)
    return out


class FusedGatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with gate and up in one weight."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.inter = mlp.gate_proj.out_features
        self.gate_up_proj = _concat_linear([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        self.act_fn = mlp.act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u = self.gate_up_proj(x).split(self.inter, dim=-1)
        return self.down_proj(self.act_fn(g) * u)


def _fused_attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
    """HF's Llama/Mistral/Qwen2 attention forward (transformers 5.x), q/k/v from one projection."""
    cache = kwargs.pop("cache", None)
    legacy = kwargs.pop("past_key_values", None)
    cache = cache if cache is not None else legacy
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q, k, v = self.qkv_proj(hidden_states).split(self._gs_qkv_sizes, dim=-1)
    q = q.view(hidden_shape).transpose(1, 2)
    k = k.view(hidden_shape).transpose(1, 2)
    v = v.view(hidden_shape).transpose(1, 2)
    cos, sin = position_embeddings
    q, k = self._gs_rope(q, k, cos, sin)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx, **({"kwargs": kwargs} if self._gs_update_kwargs else {}))
    interface = self._gs_functions.get_interface(self.config._attn_implementation, self._gs_eager)
    extra = {}
    if self._gs_sliding == "config":
        extra["sliding_window"] = getattr(self.config, "sliding_window", None)
    elif self._gs_sliding == "module":
        extra["sliding_window"] = self.sliding_window
    out, weights = interface(self, q, k, v, attention_mask, dropout=0.0 if not self.training else
                             self.attention_dropout, scaling=self.scaling, **extra, **kwargs)
    out = out.reshape(*input_shape, -1).contiguous()
    return self.o_proj(out), weights


_SUBCLASSES: dict[type, type] = {}


def _fused_class(cls: type) -> type:
    if cls not in _SUBCLASSES:
        mod = sys.modules[cls.__module__]  # the helpers HF's own forward calls, from the model's module
        _SUBCLASSES[cls] = type("Fused" + cls.__name__, (cls,), {
            "forward": _fused_attention_forward, "_gs_rope": staticmethod(mod.apply_rotary_pos_emb),
            "_gs_functions": mod.ALL_ATTENTION_FUNCTIONS, "_gs_eager": staticmethod(mod.eager_attention_forward)})
    return _SUBCLASSES[cls]


def _update_takes_kwargs(cls: type) -> bool:
    """Whether this transformers version's forward hands its kwargs to ``cache.update`` (5.2x does)."""
    import inspect

    try:
        return "kwargs=kwargs" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


def fuse_attention(attn: nn.Module) -> None:
    cls = type(attn)
    attn.qkv_proj = _concat_linear([attn.q_proj, attn.k_proj, attn.v_proj])
    attn._gs_qkv_sizes = (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features)
    attn._gs_sliding = ATTENTION[cls.__name__]
    attn._gs_update_kwargs = _update_takes_kwargs(cls)
    del attn.q_proj, attn.k_proj, attn.v_proj
    attn.__class__ = _fused_class(cls)


def fuse_projections(model: nn.Module) -> dict:
    """Fuse every supported attention and MLP module of ``model`` in place; returns what was done
    ({"attention": n, "mlp": n, "skipped": [class names left as they were]}). Inference only (the fused weights
    do not require grad)."""
    done = {"attention": 0, "mlp": 0}
    skipped: set[str] = set()
    # Names, not modules: a list of the modules would keep every replaced weight alive until the end (a transient
    # second copy of q/k/v and gate/up, 7.5 GB for an 8B model); by name each old weight is freed as it is replaced.
    for name in [n for n, _ in model.named_modules()]:
        try:
            module = model.get_submodule(name)
        except AttributeError:  # inside a module already replaced (gate_proj of a fused MLP)
            continue
        cname = type(module).__name__
        if cname in ATTENTION and all(hasattr(module, p) for p in ("q_proj", "k_proj", "v_proj")):
            if any(hasattr(module, n) for n in ("q_norm", "k_norm")):
                skipped.add(cname)
                continue
            fuse_attention(module)
            done["attention"] += 1
        elif cname in MLP:
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, FusedGatedMLP(module))
            done["mlp"] += 1
        elif cname.endswith(("Attention", "MLP")) and not cname.startswith("Fused") and cname != "FusedGatedMLP":
            skipped.add(cname)
        del module
    done["skipped"] = sorted(skipped)
    return done
