"""The train-dist worker's case: validation with defaults, and its command line (no torch imported here: the
precisions and recompute modes are the measured values of gpuscope.specs.axes)."""

from __future__ import annotations

import argparse
import json
import sys

from gpuscope.measure.choices import PRECISIONS, RECOMPUTES, STRATEGIES, check_choice


def check_case(case: dict) -> dict:
    """Validated copy with defaults; ValueError names the key and what is allowed."""
    c = dict(case)
    c.setdefault("kind", "train-dist")
    c.setdefault("strategy", "ddp")
    c.setdefault("precision", "amp-bf16")
    c.setdefault("recompute", "none")
    check_choice("strategy", c["strategy"], STRATEGIES)
    check_choice("precision", c["precision"], PRECISIONS)
    if c["strategy"] == "fsdp" and c["precision"] == "amp-fp16":
        raise ValueError("precision: 'amp-fp16' is not supported with fsdp here (use amp-bf16, bf16 or fp32)")
    check_choice("recompute", c["recompute"], RECOMPUTES)
    for k in ("micro_batch", "seq"):
        if int(c.get(k) or 0) <= 0:
            raise ValueError(f"{k}: must be a positive integer, not {c.get(k)}")
    if c.get("foreach") not in (None, True, False):
        raise ValueError(f"foreach: must be true or false, not {c['foreach']!r}")
    if c.get("foreach") and c.get("fused") is True:
        raise ValueError("foreach: true cannot be combined with fused: true (torch runs one of the two)")
    if not c.get("model") and not c.get("config"):
        raise ValueError("case has neither 'model' nor 'config'")
    return c


def parse_case(argv: list[str] | None) -> tuple[dict, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m gpuscope.measure.distributed.train",
                                description="DDP / FSDP2 training worker; launch with torchrun.")
    p.add_argument("--case", help="case JSON, @file.json or - (overrides the flags)")
    p.add_argument("--model")
    p.add_argument("--config", help="inline HF config JSON or a path")
    p.add_argument("--strategy", default="ddp", choices=STRATEGIES)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--precision", default="amp-bf16", choices=PRECISIONS)
    p.add_argument("--recompute", default="none", choices=RECOMPUTES)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--gradient-as-bucket-view", action="store_true")
    p.add_argument("--no-reshard-after-forward", action="store_true")
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--timeout-s", type=float, default=1800.0)
    p.add_argument("--out", help="also append the JSON line to this file")
    a = p.parse_args(argv)
    if a.case:
        case = read_case(a.case)
    else:
        case = {"kind": "train-dist", "strategy": a.strategy, "micro_batch": a.micro_batch, "seq": a.seq,
                "precision": a.precision, "recompute": a.recompute, "steps": a.steps, "warmup": a.warmup,
                "seed": a.seed, "bucket_cap_mb": a.bucket_cap_mb, "gradient_as_bucket_view": a.gradient_as_bucket_view,
                "reshard_after_forward": not a.no_reshard_after_forward, "baseline": a.baseline,
                "timeout_s": a.timeout_s}
        add_model_and_device(case, a)
    return case, a


def add_model_and_device(case: dict, a: argparse.Namespace) -> dict:
    """The keys every torchrun worker's command line shares: --model, --config (inline JSON is parsed, a path stays
    a path: case_config reads it) and --device."""
    if a.model:
        case["model"] = a.model
    if a.config:
        case["config"] = read_case(a.config) if a.config.lstrip().startswith("{") else a.config
    if a.device:
        case["device"] = a.device
    return case


def read_case(arg: str):
    if arg == "-":
        return json.loads(sys.stdin.read())
    if arg.startswith("@"):
        with open(arg[1:]) as f:
            return json.load(f)
    if arg.lstrip().startswith("{"):
        return json.loads(arg)
    with open(arg) as f:  # a config path given to --config stays a path (case_config reads it)
        return json.load(f)
