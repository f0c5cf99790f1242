"""Where `gpuscope hardware calibrate --save` keeps a machine's measured ceilings, and how `plan --calibrated`
finds them: one hardware TOML per catalog key in the user's data directory
($GPUSCOPE_HOME, else $XDG_DATA_HOME/gpuscope, else ~/.local/share/gpuscope), under calibrated/<key>.toml."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuscope.errors import UserError
from gpuscope.specs.hardware import HardwareSpec, load_hardware


def data_dir() -> Path:
    if os.environ.get("GPUSCOPE_HOME"):
        return Path(os.environ["GPUSCOPE_HOME"]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "gpuscope"


def calibrated_path(key: str) -> Path:
    slug = re.sub(r"[^a-z0-9_.-]+", "_", key.lower()).strip("_") or "device"
    return data_dir() / "calibrated" / f"{slug}.toml"


def load_calibrated(gpu: str) -> HardwareSpec:
    """The saved calibration for the catalog device `gpu` names (or for a TOML's base entry)."""
    spec = load_hardware(gpu)
    base = spec.key
    path = calibrated_path(base)
    if not path.is_file():
        raise UserError(f"--calibrated: no calibration saved for {base} (expected {path}); run `gpuscope hardware "
                        "calibrate --save` on that machine, or pass a calibrated TOML with --gpu.")
    return load_hardware(str(path))
