"""Pure helpers of the collectives benchmark (no torch): byte sizes, sweeps, tolerances, element counts in
nccl-tests' convention, and the GPU pair topology from ``nvidia-smi topo -m``."""

from __future__ import annotations

import re
import shutil
import subprocess

# Relative tolerance per reduction step of the dtype: a few units in the last place (fp32 2^-23, bf16 2^-8,
# fp16 2^-11), times the number of ranks summed (each step of a ring rounds once).
_ULP = {"fp32": 2.0 ** -23, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)


def parse_size(text: str | int) -> int:
    """'8', '64K', '1M', '8G', '8GiB', '512B' -> bytes (binary multiples: K = 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"size '{text}' is not a number of bytes such as 8, 64K, 1M, 8G.")
    mult = 1024 ** "_kmgt".index(m.group(2).lower() or "_")
    return int(float(m.group(1)) * mult)


def size_sweep(min_bytes: int, max_bytes: int) -> list[int]:
    """min, 2 min, 4 min, ... up to max (inclusive when max is on the doubling ladder)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"sizes need 1 <= min ({min_bytes}) <= max ({max_bytes}).")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def fmt_bytes(n: int) -> str:
    for unit, p in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 2 ** p and n % 2 ** (p - 10) == 0:
            v = n / 2 ** p
            return f"{v:g} {unit}"
    return f"{n} B"


def tolerance(dtype: str, world: int) -> float:
    """Relative (and absolute, on N(0,1) inputs) tolerance of a sum over ``world`` ranks in ``dtype``."""
    return 4 * _ULP[dtype] * max(1, world) + (1e-6 if dtype == "fp32" else 0.0)


def element_counts(op: str, nbytes: int, elem: int, world: int) -> tuple[int, int] | None:
    """(input elements, output elements) per rank for a size S of nccl-tests' convention, rounded down to whole
    elements (a multiple of ``world`` for the chunked ops), or None when S is too small."""
    count = nbytes // elem
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count -= count % world
    if count < (world if op in ("all_gather", "reduce_scatter", "all_to_all") else 1):
        return None
    if op == "all_gather":
        return count // world, count
    if op == "reduce_scatter":
        return count, count // world
    return count, count


# --- nvidia-smi topo -m -------------------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo_matrix(text: str) -> dict:
    """Parse ``nvidia-smi topo -m``: {"GPU0-GPU1": "NV18", ...} for each GPU pair (i < j), plus "nic" pairs when
    the matrix has NIC columns ({"GPU0-NIC0": "PIX"}). Empty dict when no GPU matrix is found."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header = None
    out: dict = {}
    for ln in lines:
        cells = [c.strip() for c in re.split(r"\t+|\s{2,}", ln.strip()) if c.strip()]
        if not cells:
            if header is not None and out:
                break
            continue
        if header is None:
            if cells[0].startswith("GPU") and len(cells) > 1 and cells[1].startswith(("GPU", "NIC")):
                header = cells
            elif cells[0].startswith("GPU0") and len(cells) > 1:
                header = cells
            continue
        row = cells[0]
        if not re.fullmatch(r"(GPU|NIC)\d+", row):
            if row.lower().startswith("legend"):
                break
            continue
        cols = [h for h in header if re.fullmatch(r"(GPU|NIC)\d+", h)]
        for col, val in zip(cols, cells[1:]):
            if col == row or val == "X":
                continue
            a, b = sorted((row, col), key=lambda s: (s[:3] != "GPU", s[:3], int(s[3:])))
            if a.startswith("GPU"):
                out.setdefault(f"{a}-{b}", val)
    return out


def gpu_topology() -> dict | str:
    """The GPU pair matrix from ``nvidia-smi topo -m``, or "unavailable" (no nvidia-smi, no GPU, an error)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "unavailable"
    try:
        r = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "unavailable"
    pairs = parse_topo_matrix(r.stdout) if r.returncode == 0 else {}
    return pairs or "unavailable"
