"""Hugging Face causal LMs for the measurement workloads: the config of a case, a random-weight model built on the
device (no downloads, no per-module init), a local checkpoint through ``from_pretrained`` (optionally spread by
accelerate's device_map), the model's bytes, its past-cache argument and output, and greedy fixed-length
generation settings. Shared by the inference, training, tuning, distributed and host-overhead workloads.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from gpuscope.measure.device.device import Device
from gpuscope.specs.axes import InferDtype

# a measured inference dtype (specs/axes.InferDtype; also the compute dtype of a measured training precision)
DTYPES = {InferDtype.BF16.value: torch.bfloat16, InferDtype.FP16.value: torch.float16,
          InferDtype.FP32.value: torch.float32}


# Config keys that only describe a checkpoint (or would ask for remote code / quantized loading).
_DROP_KEYS = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "auto_map", "quantization_config",
              "_gpuscope", "architectures"}


def case_config(case: dict) -> dict:
    """The HF config dict of a case: inline ``config`` dict, a path, or a preset name under ``model``."""
    if isinstance(case.get("config"), dict):
        return dict(case["config"])
    m = case.get("model")
    if isinstance(m, dict):
        return dict(m)
    if not m:
        raise ValueError("case has neither 'config' nor 'model'")
    path = Path(str(m)).expanduser()
    if path.exists() or "/" in str(m) or str(m).endswith(".json"):
        if path.is_dir():
            path = path / "config.json"
        return json.loads(path.read_text())
    from gpuscope.specs.models import preset_config

    return preset_config(str(m))


def hf_config(cfg: dict):
    """``transformers.AutoConfig.for_model`` from a config dict, dropping checkpoint-only keys."""
    from transformers import AutoConfig

    kw = {k: v for k, v in cfg.items() if k not in _DROP_KEYS and not k.startswith("_")}
    model_type = kw.pop("model_type", None)
    if not model_type:
        raise ValueError("config has no 'model_type'")
    return AutoConfig.for_model(model_type, **kw)


def _no_init():
    """transformers' context that skips per-module weight init (its location moved between versions)."""
    for modpath in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            mod = __import__(modpath, fromlist=["no_init_weights"])
            fn = getattr(mod, "no_init_weights", None)
            if fn is not None:
                return fn()
        except ImportError:
            continue
    return contextlib.nullcontext()


@torch.no_grad()
def init_random_(model: torch.nn.Module, std: float = 0.02) -> None:
    """Fresh random parameters in place: matrices ~ N(0, std), biases ~ N(0, std), other vectors (norm scales)
    ~ N(1, std). Never zeros, never uninitialised memory."""
    for name, p in model.named_parameters():
        if p.ndim >= 2 or name.endswith("bias"):
            p.normal_(0.0, std)
        else:
            p.normal_(1.0, std)


def build_model(cfg: dict, dev: Device, dtype: torch.dtype, attn: str = "sdpa", use_cache: bool = True):
    """Random-weight causal LM built directly on ``dev`` in ``dtype`` (no CPU copy, no HF per-module init)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from gpuscope.measure.models.gqa_attention import implementation

    hf_logging.set_verbosity_error()
    config = hf_config(cfg)
    config.use_cache = use_cache
    attn = implementation(attn)  # gs-gqa: gpuscope's registered GQA-folding SDPA
    try:
        with torch.device(dev.torch_device), _no_init():
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    except ValueError as e:  # e.g. Gemma-2 has no sdpa path (logit soft-capping): fall back to eager, and say so
        if attn == "eager" or "attention implementation" not in str(e):
            raise
        with torch.device(dev.torch_device), _no_init():
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")
    model.tie_weights()  # init_weights (which ties) was skipped by no_init_weights
    init_random_(model)
    return model, config


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def load_pretrained(case: dict, dev: Device, dtype: torch.dtype, attn: str = "sdpa"):
    """A local checkpoint directory (``case["model"]``: config.json + weights) through ``from_pretrained``, as a user
    runs it: on ``dev``, or with ``case["device_map"]`` ("auto": accelerate spreads the layers over the GPUs, then
    CPU memory, then disk; ``case["max_memory"]`` caps each, e.g. {"0": "20GiB", "cpu": "64GiB"}), which is how
    the article ran a 32B model on one 16 GB card with CPU offload. Nothing is downloaded (local_files_only)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    path = Path(str(case["model"])).expanduser()
    from gpuscope.measure.models.gqa_attention import implementation

    kw: dict = {"dtype": dtype, "attn_implementation": implementation(attn), "local_files_only": True}
    dm = case.get("device_map")
    if dm:
        kw["device_map"] = dm
        if case.get("max_memory"):
            kw["max_memory"] = {(int(k) if str(k).isdigit() else k): v for k, v in case["max_memory"].items()}
    model = AutoModelForCausalLM.from_pretrained(str(path), **kw)
    if not dm:
        model.to(dev.torch_device)
    return model, model.config


def placement_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Parameter bytes per device the model's weights sit on ("cuda:0", "cpu", "meta" = offloaded to disk)."""
    out: dict[str, int] = {}
    for p in model.parameters():
        out[str(p.device)] = out.get(str(p.device), 0) + p.numel() * p.element_size()
    return out


def model_bytes(model: torch.nn.Module) -> dict:
    params = list(model.parameters())  # tied parameters are listed once
    buffers = list(model.buffers())
    pb = sum(p.numel() * p.element_size() for p in params)
    bb = sum(b.numel() * b.element_size() for b in buffers)
    return {
        "attn_impl": getattr(model.config, "_attn_implementation", None),
        # MoE models: which experts path transformers dispatched to (grouped_mm by default in 5.x, else eager)
        "experts_impl": getattr(model.config, "_experts_implementation", None),
        "model_class": type(model).__name__,
        "param_count": sum(p.numel() for p in params),
        "param_dtype": str(params[0].dtype).replace("torch.", "") if params else None,
        "weights_bytes": pb + bb,
        "param_bytes": pb,
        "buffer_bytes": bb,
    }


def vocab_size(config) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.vocab_size)


def cache_bytes(cache) -> int | None:
    """Bytes held by the keys and values of a transformers cache (DynamicCache or legacy tuples)."""
    try:
        tensors = []
        if hasattr(cache, "layers"):
            for layer in cache.layers:
                tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
        elif hasattr(cache, "key_cache"):
            tensors = list(cache.key_cache) + list(cache.value_cache)
        else:
            for layer in cache:
                tensors += list(layer)
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    except Exception:
        return None


def cache_kwarg(model) -> str:
    """Name of the forward argument for the past cache: ``past_key_values`` (transformers <= 5.2x) or ``cache``."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "past_key_values" if "past_key_values" in params or "cache" not in params else "cache"


def out_cache(out):
    for name in ("past_key_values", "cache"):
        c = getattr(out, name, None)
        if c is not None:
            return c
    raise RuntimeError("the model output carries no cache (use_cache=True was ignored)")


def silence_generation(model) -> None:
    """Greedy, no EOS (so exactly max_new_tokens come out), a pad id (no warning)."""
    gc_ = model.generation_config
    gc_.eos_token_id = None
    gc_.pad_token_id = 0
    gc_.do_sample = False
    gc_.num_beams = 1
    for k in ("temperature", "top_p", "top_k"):
        if hasattr(gc_, k):
            setattr(gc_, k, None)
    model.config.eos_token_id = None
    model.config.pad_token_id = 0
