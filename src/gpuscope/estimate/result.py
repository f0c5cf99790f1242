"""The Estimate value object: what every plan returns, rendered to JSON per shared/CONTRACT.md."""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA = "gpuscope.estimate/1"


@dataclass
class Estimate:
    kind: str  # "infer" or "train"
    model: str
    hardware: str
    inputs: dict
    fits: bool
    peak_bytes_per_gpu: float
    breakdown_bytes: dict[str, float]
    device_total_bytes: float
    runtime_overhead_bytes: dict[str, float]
    phases_bytes: dict[str, float]  # the allocator's peak in each phase; the peak is their maximum
    time: dict[str, float]
    throughput: dict[str, float]
    mfu: float | None = None
    hfu: float | None = None
    flops: dict[str, float] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    limits: dict[str, int | None] = field(default_factory=dict)  # max batch / context that fit
    verdict: str = ""
    suggestions: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    ops: list[dict] = field(default_factory=list)  # per-operation breakdown (on request)
    calibrated: bool = False
    lora: dict = field(default_factory=dict)  # LoRA / QLoRA plans: trainable_params, r, alpha, targets, ...

    @property
    def required_bytes(self) -> float:
        return self.peak_bytes_per_gpu + sum(self.runtime_overhead_bytes.values())

    def to_json(self) -> dict:
        d = {
            "schema": SCHEMA,
            "kind": self.kind,
            "model": self.model,
            "hardware": self.hardware,
            "calibrated": self.calibrated,
            "inputs": self.inputs,
            "fits": self.fits,
            "verdict": self.verdict,
            "suggestions": self.suggestions,
            "memory": {
                "peak_bytes_per_gpu": round(self.peak_bytes_per_gpu),
                "breakdown_bytes": {k: round(v) for k, v in self.breakdown_bytes.items()},
                "phases_bytes": {k: round(v) for k, v in self.phases_bytes.items()},
                "runtime_overhead_bytes": {k: round(v) for k, v in self.runtime_overhead_bytes.items()},
                "required_bytes_per_gpu": round(self.required_bytes),
                "device_total_bytes": round(self.device_total_bytes),
            },
            "time": self.time,
            "throughput": self.throughput,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "flops": self.flops,
            "params": self.params,
            "limits": self.limits,
            "assumptions": self.assumptions,
        }
        if self.lora:
            d["lora"] = self.lora
        if self.ops:
            d["ops"] = self.ops
        return d
