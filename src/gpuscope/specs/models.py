"""Find a model by preset name or by path to a Hugging Face config.json (or a directory holding one).

Presets are plain HF ``config.json`` files in ``specs/data/models/<name>.json``; the file may carry a
``"_gpuscope"`` object with ``aliases`` (other accepted names), ``source`` (where the config comes from) and
``notes``. Nothing is fetched from a hub.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from gpuscope.errors import UserError, nearest
from gpuscope.specs.hf_config import load_config_file, spec_from_config
from gpuscope.specs.model import ModelSpec

PRESET_DIR = Path(__file__).parent / "data" / "models"


@lru_cache(maxsize=1)
def _preset_index() -> dict[str, Path]:
    """Map every preset name and alias (lower case) to its file."""
    index: dict[str, Path] = {}
    for f in sorted(PRESET_DIR.glob("*.json")):
        index[f.stem.lower()] = f
        meta = json.loads(f.read_text()).get("_gpuscope", {})
        for alias in meta.get("aliases", []):
            index[alias.lower()] = f
    return index


def preset_names() -> list[str]:
    return sorted(f.stem for f in PRESET_DIR.glob("*.json"))


def preset_config(name: str) -> dict:
    """The HF config dict of a preset (without gpuscope's own metadata)."""
    f = _preset_index().get(name.lower())
    if f is None:
        raise UserError(f"--model: unknown preset '{name}'.{nearest(name, preset_names())} "
                        "(`gpuscope models` lists them)")
    cfg = json.loads(f.read_text())
    cfg.pop("_gpuscope", None)
    return cfg


def preset_meta(name: str) -> dict:
    f = _preset_index()[name.lower()]
    return json.loads(f.read_text()).get("_gpuscope", {})


def load_model(arg: str) -> ModelSpec:
    """--model: a path to config.json, a directory holding one, or a preset name."""
    if not arg or not str(arg).strip():
        raise UserError("--model: give a preset name or a path to a config.json.")
    path = Path(arg).expanduser()
    looks_like_path = path.exists() or "/" in arg or arg.endswith(".json")
    if looks_like_path:
        cfg = load_config_file(path)
        return spec_from_config(cfg, name=path.parent.name if path.is_file() else path.name, source=str(path))
    cfg = preset_config(arg)
    stem = _preset_index()[arg.lower()].stem
    return spec_from_config(cfg, name=stem, source=f"preset:{stem}")
