"""A doctor finding (the value object every rule returns), the rules' thresholds and their shared readers.
explain/findings.py says why each threshold is what it is; explain/rules_*.py hold the rules by family.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

GIB = 2**30
MIB = 2**20

THRESHOLDS = {
    "launch_idle_fraction": 0.5,
    "launch_min_kernels": 100,
    "launch_max_kernel_mean_s": 50e-6,
    "dataloader_fraction": 0.10,
    "sync_refill_fraction": 0.05,
    "sync_min_calls": 2,
    "matmul_align": 8,
    "matmul_misaligned_share": 0.05,
    "matmul_misaligned_slowdown": 1.5,  # typical cost of an unaligned 16-bit GEMM vs its padded shape (rough)
    "comm_fraction": 0.05,
    "comm_overlap_min": 0.5,
    "frag_fraction": 0.25,
    "frag_min_bytes": 256 * MIB,
    "throttle_fraction": 0.10,
    "headroom_used_max": 0.5,
    "headroom_target": 0.9,
    "plan_ratio": 1.3,
    "moe_imbalance": 1.2,
    "serial_host_share": 0.10,
    "gc_share": 0.05,
    "steal_share": 0.05,
    "cudnn_build_share": 0.5,
    "offload_fault_share": 0.05,
}

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass
class Finding:
    code: str
    title: str
    severity: str  # high | medium | low | info
    evidence: dict
    fix: str
    estimated_effect: str
    speedup: float | None = None  # estimated step-time factor if fixed (>= 1), where one can be given
    memory_saved_bytes: float | None = None
    docs: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def num(d: dict | None, *keys):
    """The number at ``d[k0][k1]...``, or None where a key is missing or the value is not a number."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def severity(speedup: float) -> str:
    """high / medium / low for the step-time factor a fix is estimated to give."""
    return "high" if speedup >= 1.5 else "medium" if speedup >= 1.15 else "low"
