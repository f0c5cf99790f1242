"""Diffusion pipeline components as modules: a diffusers folder's ``model_index.json`` names each component's library
and class, its ``<component>/config.json`` the sizes. Random weights (the default) or a local checkpoint's own
(``weights``: ``from_pretrained`` with ``local_files_only``); nothing is downloaded, no remote code.

Random weights, fast: the module is built with its parameters on the meta device (accelerate's
``init_empty_weights(include_buffers=False)``: no per-module init, no host copy; buffers such as CLIP's position ids
or SD3's sin-cos position table are built for real), then each parameter is materialised on the device in the run's
dtype and filled with N(0, 1/fan_in) (matrices and convolutions: activations stay O(1) through deep stacks in fp16),
norm scales 1 and biases 0. Tied parameters stay tied (one tensor per original parameter).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

DENOISERS = ("unet", "transformer")
TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3", "image_encoder")
VAE = "vae"


def read_index(folder: Path) -> dict[str, tuple[str, str]]:
    """{component: (library, class)} of a folder's model_index.json (entries that name a module)."""
    idx = json.loads((folder / "model_index.json").read_text())
    return {k: (v[0], v[1]) for k, v in idx.items()
            if not k.startswith("_") and isinstance(v, list) and len(v) == 2 and v[0] and v[1]}


def component_config(folder: Path, name: str) -> dict:
    return json.loads((folder / name / "config.json").read_text())


def module_class(library: str, cls: str):
    import importlib

    mod = importlib.import_module(library)
    if not hasattr(mod, cls):
        raise ValueError(f"{library} has no class {cls}")
    return getattr(mod, cls)


def transformers_config(cls, cfg: dict):
    from transformers import AutoConfig

    kw = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("architectures", "torch_dtype", "dtype",
                                                                             "transformers_version")}
    model_type = kw.pop("model_type", None)
    if model_type is None:
        return cls.config_class(**kw)
    return AutoConfig.for_model(model_type, **kw)


def empty(library: str, cls, cfg: dict, device: torch.device | None = None):
    """The module with meta parameters and real buffers. Without accelerate (the `bench` extra installs it): built on
    ``device`` with PyTorch's default init instead (slower; materialise_ replaces the parameters all the same)."""
    try:
        from accelerate import init_empty_weights

        ctx = init_empty_weights(include_buffers=False)
    except ImportError:
        ctx = torch.device(device or "cpu")
    with ctx:
        if library == "diffusers":
            return cls.from_config({k: v for k, v in cfg.items() if not k.startswith("_")})
        model = cls(transformers_config(cls, cfg))
    model.tie_weights()  # inside the context each assignment made a new meta parameter: T5's embeddings untied
    return model


def keep_fp32(model: torch.nn.Module, dtype: torch.dtype) -> tuple[str, ...]:
    """The module names ``from_pretrained`` keeps in fp32 when loading in fp16 (``_keep_in_fp32_modules``: T5's
    ``wo`` projections, which overflow in fp16)."""
    keep = getattr(model, "_keep_in_fp32_modules", None) or ()
    return tuple(keep) if dtype == torch.float16 else ()


@torch.no_grad()
def materialise_(model: torch.nn.Module, device: torch.device, dtype: torch.dtype, seed: int = 0) -> None:
    """Every meta parameter becomes a tensor on ``device`` in ``dtype`` (fp32 where from_pretrained keeps it so):
    matrices and kernels ~ N(0, 1/fan_in), 1-D weights (norm scales) 1, biases 0; buffers move to ``device``,
    floating ones cast to ``dtype``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    keep = keep_fp32(model, dtype)
    made: dict[int, torch.nn.Parameter] = {}
    for mod_name, mod in model.named_modules():
        fp32 = bool(keep) and any(k in mod_name.split(".") for k in keep)
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in made:
                t = torch.empty(p.shape, device=device, dtype=torch.float32 if fp32 else dtype)
                if p.ndim >= 2:
                    t.normal_(0.0, 1.0 / math.sqrt(max(1, p[0].numel())), generator=gen)
                else:
                    t.fill_(1.0 if name.endswith("weight") or name in ("scale", "gamma", "g") else 0.0)
                made[id(p)] = torch.nn.Parameter(t, requires_grad=False)
            mod._parameters[name] = made[id(p)]
        for name, buf in list(mod._buffers.items()):
            if buf is not None:
                mod._buffers[name] = buf.to(device=device, dtype=dtype if buf.is_floating_point() else None)


def quiet() -> None:
    """diffusers' and transformers' notices (a cast of random weights, token ids of a tiny vocabulary) off."""
    from diffusers.utils import logging as d_logging
    from transformers.utils import logging as t_logging

    d_logging.set_verbosity_error()
    t_logging.set_verbosity_error()


def build(folder: Path, name: str, device: torch.device, dtype: torch.dtype, weights: bool = False):
    """One component (``name`` as in model_index.json) in eval mode on ``device`` in ``dtype``."""
    quiet()
    library, cls_name = read_index(folder)[name]
    cls = module_class(library, cls_name)
    if weights:  # a local checkpoint: the library's own loader, nothing downloaded
        kw = {"subfolder": name, "local_files_only": True}
        model = cls.from_pretrained(str(folder), **kw, **({"torch_dtype": dtype} if library == "diffusers"
                                                            else {"dtype": dtype}))
        model.to(device)
    else:
        model = empty(library, cls, component_config(folder, name), device)
        materialise_(model, device, dtype)
    model.eval()
    model.requires_grad_(False)
    return model


def param_bytes(model: torch.nn.Module) -> int:
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def attention_processors(model: torch.nn.Module) -> dict[str, int]:
    """{processor class: count} of a diffusers model's attention layers (AttnProcessor2_0, JointAttnProcessor2_0,
    ...: scaled_dot_product_attention; AttnProcessor: the score matrix materialised); {} for other modules."""
    procs = getattr(model, "attn_processors", None)
    if not isinstance(procs, dict):
        return {}
    out: dict[str, int] = {}
    for p in procs.values():
        out[type(p).__name__] = out.get(type(p).__name__, 0) + 1
    return out


def set_math_attention(model: torch.nn.Module) -> bool:
    """Switch a UNet's attention to diffusers' AttnProcessor (scores materialised, no SDPA); False where the model
    has no such processor (transformer blocks keep their own SDPA processors)."""
    from diffusers.models.attention_processor import AttnProcessor

    if not hasattr(model, "set_attn_processor") or not attention_processors(model):
        return False
    names = set(attention_processors(model))
    if not names <= {"AttnProcessor2_0", "AttnProcessor"}:
        return False
    model.set_attn_processor(AttnProcessor())
    return True
