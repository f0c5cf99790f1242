"""peft's prepare_model_for_kbit_training measured on QLoRA (issue 20): the mechanism that reproduces Unsloth's
"Hugging Face + FA2" max-context rows (research/tests/test_lora_published_rows.py) against the planner's
``kbit_prep`` (estimate/lora_memory.py: fp32 embeddings, norms and lm_head, an fp32 residual stream, autocast's bf16
copy of lm_head saved through the head).

Each case is `bench train`'s own training case (gpuscope.measure.llm.train.run_train: random-weight Llama-3.1-8B,
bitsandbytes NF4 with double quantization, peft r32 on all linear layers, amp-bf16, gradient checkpointing, torch
AdamW, mb1) run in its own process; with ``prep`` the process wraps ``peft.get_peft_model`` so that
``peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)`` runs on the quantised base first
(checkpointing is already on, as bench switches it on), and records the dtypes it left (embedding, lm_head, a norm,
a decoder layer's input as a forward pre-hook sees it).
Cases, in this order: prep and no prep at 8192 tokens (the difference at one length), prep at 16384 (with the
first, the per-token part). One warm-up step, the instrumented step (memory per phase), one timed step.

usage (repo root, GPU machine, peft and bitsandbytes importable from src/):
  PYTHONPATH=src python3 research/scripts/gpu_kbit_prep.py          -> $OUT/gpu_kbit_prep/gpu_kbit_prep.tgz
  PYTHONPATH=src python3 research/scripts/gpu_kbit_prep.py --tiny   (CPU check: a tiny Llama, seq 64 and 128)
Budget: GS_KBIT_PREP_BUDGET (default 150 s): each case gets what is left less 5 s (at most 50 s); a case with under
15 s left is skipped and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

CASES = [("prep_s8192", True, 8192), ("noprep_s8192", False, 8192), ("prep_s16384", True, 16384)]
TINY_SEQS = {8192: 64, 16384: 128}


def _case(seq: int, tiny: bool) -> dict:
    case = {"kind": "train", "micro_batch": 1, "seq": seq, "precision": "amp-bf16", "optimizer": "adamw",
            "recompute": "full", "steps": 1, "warmup": 1, "lora_r": 32, "qlora": True}
    if tiny:
        from gpuscope.workloads.sets import TINY_LLAMA
        case.update(config=dict(TINY_LLAMA), model="tiny_llama", device="cpu", seq=TINY_SEQS[seq])
    else:
        case["model"] = "llama-3.1-8b"
    return case


def _one(case: dict, prep: bool) -> dict:
    """Run one case in this process, peft's get_peft_model wrapped when ``prep``."""
    import peft
    import torch

    seen: dict = {"prep": prep}
    original = peft.get_peft_model

    def wrapped(model, cfg, *a, **k):
        if prep:
            peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        seen["embed_dtype"] = str(model.get_input_embeddings().weight.dtype)
        seen["lm_head_dtype"] = str(model.get_output_embeddings().weight.dtype)
        seen["norm_dtype"] = str(model.model.norm.weight.dtype)
        seen["fp32_param_bytes"] = sum(p.numel() * 4 for p in model.parameters() if p.dtype == torch.float32)

        def pre(_mod, args, kwargs):
            x = args[0] if args else kwargs.get("hidden_states")
            seen.setdefault("layer1_input_dtype", str(x.dtype))
        model.model.layers[1].register_forward_pre_hook(pre, with_kwargs=True)
        return original(model, cfg, *a, **k)

    peft.get_peft_model = wrapped
    from gpuscope.measure.llm.train import run_train

    res = run_train(case)
    res["kbit_prep"] = seen
    return res


def main() -> int:
    if "--one" in sys.argv:
        i = sys.argv.index("--one")
        case, prep, out = json.loads(sys.argv[i + 1]), sys.argv[i + 2] == "1", sys.argv[i + 3]
        Path(out).write_text(json.dumps({"case": case, "result": _one(case, prep)}, default=str))
        return 0
    tiny = "--tiny" in sys.argv
    budget = float(os.environ.get("GS_KBIT_PREP_BUDGET", "150")) if not tiny else 600.0
    t0 = time.time()
    out_dir = Path(os.environ.get("OUT", "/tmp/out")) / "gpu_kbit_prep"
    work = Path("/tmp/gs_kbit_prep")
    work.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    steps, records = [], []
    for name, prep, seq in CASES:
        left = budget - (time.time() - t0) - 5
        if left < 15:
            steps.append(f"{name} skipped: {left:.0f} s left of {budget:.0f}")
            continue
        limit = min(50.0 if not tiny else 240.0, left)
        path = work / f"{name}.json"
        t = time.time()
        cmd = [sys.executable, __file__, "--one", json.dumps(_case(seq, tiny)), "1" if prep else "0", str(path)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            rc, err = p.returncode, p.stderr[-3000:]
        except subprocess.TimeoutExpired:
            rc, err = 124, "timeout"
        (work / f"{name}.err").write_text(err)
        steps.append(f"{name} rc={rc} {time.time() - t:.1f}s")
        if rc == 0 and path.exists():
            records.append({"name": name, **json.loads(path.read_text())})
        _pack(work, out_dir, records, steps, t0)  # after each case: a call stopped later keeps it
    _pack(work, out_dir, records, steps, t0)
    print("\n".join(steps))
    return 0


def _pack(work: Path, out_dir: Path, records: list, steps: list, t0: float) -> None:
    (work / "kbit_prep.json").write_text(json.dumps(records, indent=1, default=str))
    (work / "steps.txt").write_text("\n".join(steps + [f"total {time.time() - t0:.0f} s"]) + "\n")
    with tarfile.open(out_dir / "gpu_kbit_prep.tgz", "w:gz") as tar:
        tar.add(work, arcname="gpu_kbit_prep")


if __name__ == "__main__":
    sys.exit(main())
