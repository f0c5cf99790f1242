"""Profile one of gpuscope's own workloads (``gpuscope doctor infer|train``): the case's model built as the bench
builds it, warmed up, timed once bare, then profiled (measure/profile/profiler.profile_run); an MoE model's routing
counted in the untimed warm-up. A user's script is measure/profile/script.py."""

from __future__ import annotations

import gc
import time

import torch

from gpuscope.measure.device.device import Device, is_oom, pick_device
from gpuscope.measure.host.gc_pauses import GCPauses
from gpuscope.measure.host.load import HostLoad
from gpuscope.measure.profile.profiler import profile_run
from gpuscope.measure.profile.summary import SCHEMA, allocator


def _timed(dev: Device, fn) -> float:
    """Seconds ``fn`` takes without the profiler (synchronised before and after): the bare time of the block the
    profiler then records, so its overhead is measured rather than estimated."""
    dev.synchronize()
    t = time.perf_counter()
    fn()
    dev.synchronize()
    return time.perf_counter() - t


def _profile_infer(case: dict, cfg: dict, dev: Device, state: dict):
    """The infer case: routing counted and generate warmed up, one generate timed bare, then one profiled.
    Returns (trial, profile session, GC pauses, host load, bare seconds, routing)."""
    from gpuscope.measure.llm.infer import deferred_stop_log, generate
    from gpuscope.measure.llm.moe_routing import prefill_routing
    from gpuscope.measure.tune.batch import InferTrial

    tr = InferTrial(cfg, dev, dtype=case.get("dtype", "bf16"), prompt=case["prompt"], gen=case["gen"],
                    attn=case.get("attn", "sdpa"), fuse_proj=bool(case.get("fuse_proj")))
    ids = torch.randint(0, tr.vocab, (case["batch"], case["prompt"]), device=dev.torch_device)
    mask = torch.ones_like(ids)
    state["phase"] = "warmup"
    engine = case.get("engine", "hf-eager")
    deferred = deferred_stop_log(case, engine, dev)  # --defer-stop: generate reads its stop flag a token late

    def gen(n=case["gen"]):
        return generate(tr.model, ids, mask, n, engine, deferred=deferred)

    with torch.no_grad():
        routing = prefill_routing(tr.model, ids, mask)  # MoE rows per expert, in an untimed eager prefill
        # warm-up: at full length on accelerators (graph capture, compiled shapes, the allocator's pool); on a CPU
        # two tokens run the same kernels at a fraction of the time (a 1B model's full generate is a minute there)
        gen(min(2, case["gen"]) if dev.type == "cpu" else case["gen"])
        with GCPauses() as gcp, HostLoad() as host:  # the collector's pauses, the host's load
            bare = _timed(dev, gen)
        state["phase"] = "profile"
        with profile_run(dev.name, bare_s=bare) as p:
            gen()
            p.step()
    return tr, p, gcp, host, bare, routing


def _profile_train(case: dict, cfg: dict, dev: Device, state: dict):
    """The train case: one warm-up step (its forward's MoE routing counted), ``steps`` steps timed bare, then the
    same profiled with a step mark after each. Returns (trial, profile session, GC pauses, host load, bare seconds,
    routing)."""
    from gpuscope.measure.llm.moe_routing import RoutingCounter
    from gpuscope.measure.tune.batch import TrainTrial

    tr = TrainTrial(cfg, dev, precision=case.get("precision", "amp-bf16"), seq=case["seq"])
    if case.get("recompute", "none") == "full":
        from gpuscope.measure.models.train_step import enable_recompute

        enable_recompute(tr.model)
    ids = torch.randint(0, tr.vocab, (case["micro_batch"], case["seq"]), device=dev.torch_device)
    state["phase"] = "warmup"
    with RoutingCounter(tr.model) as counter:  # eager training: the warm-up step's own forward
        tr.step(ids)
    routing = counter.summary()
    n_steps = int(case.get("steps", 3))
    with GCPauses() as gcp, HostLoad() as host:
        bare = _timed(dev, lambda: [tr.step(ids) for _ in range(n_steps)])
    state["phase"] = "profile"
    with profile_run(dev.name, bare_s=bare) as p:
        for _ in range(n_steps):
            tr.step(ids)
            p.step()
    return tr, p, gcp, host, bare, routing


def profile_workload(case: dict, device: str | None = None) -> dict:
    """Profile one of gpuscope's workloads (an infer or train case, see gpuscope.workloads) after its warm-up.

    infer: one ``generate`` of exactly ``gen`` tokens after a full-length warm-up; ``step_s_median`` is its time.
    train: ``steps`` optimizer steps (default 3) after one warm-up step, a step mark after each.
    Either is also run once bare (no profiler) just before, so ``bare_s`` and the profiler's overhead are measured.
    An out-of-memory error is a result: ``status: oom`` with the allocator's numbers at the failure."""
    from gpuscope.measure.models.hf_model import case_config

    dev = Device(pick_device(device or case.get("device")))
    cfg = case_config(case)
    state = {"phase": "load"}
    try:
        run = _profile_infer if case["kind"] == "infer" else _profile_train
        tr, p, gcp, host, bare, routing = run(case, cfg, dev, state)
        s = p.summary
        s["status"] = "ok"
        s["gc"] = dict(gcp.summary(), bare_s=bare, tracked_objects=len(gc.get_objects()))
        s["host_load"] = host.summary()  # during the bare run (measure/host/load.py)
        if routing:  # the same inputs and weights as the profiled run: the same routing
            s["moe_routing"] = routing
        if case["kind"] == "infer":  # what the profiled model really ran (attention function, fusion)
            s["attn_impl"] = tr.model.config._attn_implementation
            if tr.fused is not None:
                s["fused_proj"] = tr.fused
    except Exception as e:
        if not is_oom(e):
            raise
        s = {"schema": SCHEMA, "status": "oom", "phase": state["phase"], "device": dev.name, "device_type": dev.type,
             "device_name": dev.device_name(), "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
             "memory": allocator(dev, {})}
    s["case"] = case
    gc.collect()
    dev.empty_cache()
    return s
