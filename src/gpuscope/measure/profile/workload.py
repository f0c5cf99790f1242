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


def _say(state: dict, phase: str, text: str, i: int | None = None, n: int | None = None) -> None:
    """``phase`` (load, warmup, bare, profile: an out-of-memory record names it), ``text`` to the progress callback."""
    state["phase"] = phase
    if state.get("on_progress"):
        state["on_progress"](text, i, n)


def _budgeted_runs(tr, ids, mask, case: dict, dev: Device, state: dict, engine: str):
    """On a CPU (or wherever a phase budget is set; HF engines): the bare generate timed per token and ended at the
    budget, then the profiled one of as many tokens (measure/profile/token_clock.py). (profile session, GC pauses
    and host load of the bare run, its seconds, the tokens record); ``session.bare_s`` is the bare time of the
    tokens the profile covers."""
    from gpuscope.measure.profile.token_clock import PROFILE_BUDGET_X, TokenClock, hf_generate, tokens_record

    budget, n = state["budget"], case["gen"]
    bare_clock = TokenClock("bare generate, token", n, budget, state.get("on_progress"))
    state["phase"] = "bare"
    with GCPauses() as gcp, HostLoad() as host:  # the collector's pauses, the host's load
        bare = _timed(dev, lambda: hf_generate(tr.model, ids, mask, n, engine, bare_clock))
    ran = len(bare_clock.marks)
    prof_clock = TokenClock("profiled generate, token", ran, budget and PROFILE_BUDGET_X * budget,
                            state.get("on_progress"), decode_only=True)
    state["phase"] = "profile"
    with profile_run(dev.name) as p:
        hf_generate(tr.model, ids, mask, ran, engine, prof_clock)
        covered = len(prof_clock.marks)  # fewer than ran where the guard ended it: the bare run at that token
        p.bare_s = bare if covered == ran else bare_clock.seconds_at(covered)
        p.step()
    return p, gcp, host, bare, tokens_record(n, covered, budget, bare_clock)


def _profile_infer(case: dict, cfg: dict, dev: Device, state: dict):
    """The infer case: routing counted and generate warmed up, one generate timed bare, then one profiled (on a
    CPU each to a phase budget: _budgeted_runs). Returns (trial, profile session, GC pauses, host load, bare
    seconds, routing, tokens record or None)."""
    from gpuscope.measure.llm.infer import deferred_stop_log, generate
    from gpuscope.measure.llm.moe_routing import prefill_routing
    from gpuscope.measure.tune.batch import InferTrial

    _say(state, "load", "building the model")
    tr = InferTrial(cfg, dev, dtype=case.get("dtype", "bf16"), prompt=case["prompt"], gen=case["gen"],
                    attn=case.get("attn", "sdpa"), fuse_proj=bool(case.get("fuse_proj")))
    ids = torch.randint(0, tr.vocab, (case["batch"], case["prompt"]), device=dev.torch_device)
    mask = torch.ones_like(ids)
    _say(state, "warmup", "warm-up generate")
    engine = case.get("engine", "hf-eager")
    deferred = deferred_stop_log(case, engine, dev)  # --defer-stop: generate reads its stop flag a token late
    clocked = engine in ("hf-eager", "hf-graph") and deferred is None and (dev.type == "cpu" or state["budget"])

    def gen(n=case["gen"]):
        return generate(tr.model, ids, mask, n, engine, deferred=deferred)

    with torch.no_grad():
        routing = prefill_routing(tr.model, ids, mask)  # MoE rows per expert, in an untimed eager prefill
        # warm-up: at full length on accelerators (graph capture, compiled shapes, the allocator's pool); on a CPU
        # two tokens run the same kernels at a fraction of the time (a 1B model's full generate is a minute there)
        gen(min(2, case["gen"]) if dev.type == "cpu" else case["gen"])
        if clocked:
            p, gcp, host, bare, tokens = _budgeted_runs(tr, ids, mask, case, dev, state, engine)
            return tr, p, gcp, host, bare, routing, tokens
        _say(state, "bare", "bare generate")
        with GCPauses() as gcp, HostLoad() as host:  # the collector's pauses, the host's load
            bare = _timed(dev, gen)
        _say(state, "profile", "profiled generate")
        with profile_run(dev.name, bare_s=bare) as p:
            gen()
            p.step()
    return tr, p, gcp, host, bare, routing, None


def _steps(tr, ids, n: int, phase: str, state: dict, p=None, budget: float | None = None) -> int:
    """Up to ``n`` training steps (a step mark after each where ``p``), said as progress; ended at ``budget``
    seconds after MIN_REPEATS steps. The count that ran."""
    from gpuscope.measure.runner.progress import MIN_REPEATS

    t0 = time.perf_counter()
    for i in range(n):
        if budget is not None and i >= MIN_REPEATS and time.perf_counter() - t0 > budget:
            return i
        _say(state, phase, "profiled step" if p is not None else "bare step", i + 1, n)
        tr.step(ids)
        if p is not None:
            p.step()
    return n


def _profile_train(case: dict, cfg: dict, dev: Device, state: dict):
    """The train case: one warm-up step (its forward's MoE routing counted), ``steps`` steps timed bare, then as
    many profiled with a step mark after each (fewer where a phase budget ended the bare steps, measure/runner/
    progress.py: doctor sets one on a CPU). Returns (trial, profile session, GC pauses, host load, bare seconds,
    routing, the steps record)."""
    from gpuscope.measure.llm.moe_routing import RoutingCounter
    from gpuscope.measure.tune.batch import TrainTrial

    _say(state, "load", "building the model")
    tr = TrainTrial(cfg, dev, precision=case.get("precision", "amp-bf16"), seq=case["seq"])
    if case.get("recompute", "none") == "full":
        from gpuscope.measure.models.train_step import enable_recompute

        enable_recompute(tr.model)
    ids = torch.randint(0, tr.vocab, (case["micro_batch"], case["seq"]), device=dev.torch_device)
    _say(state, "warmup", "warm-up step")
    with RoutingCounter(tr.model) as counter:  # eager training: the warm-up step's own forward
        tr.step(ids)
    routing = counter.summary()
    asked = int(case.get("steps", 3))
    with GCPauses() as gcp, HostLoad() as host:
        dev.synchronize()
        t = time.perf_counter()
        ran = _steps(tr, ids, asked, "bare", state, budget=state["budget"])
        dev.synchronize()
        bare = time.perf_counter() - t
    with profile_run(dev.name, bare_s=bare) as p:
        _steps(tr, ids, ran, "profile", state, p)
    steps = {"asked": asked, "ran": ran, "stopped_why": None if ran == asked else
             f"the bare steps stopped at the phase budget after {ran} of {asked}; the profile covers {ran}"}
    return tr, p, gcp, host, bare, routing, steps


def profile_workload(case: dict, device: str | None = None, on_progress=None, budget_s: float | None = None) -> dict:
    """Profile one of gpuscope's workloads (an infer or train case, see gpuscope.workloads) after its warm-up.

    infer: one ``generate`` of exactly ``gen`` tokens after a full-length warm-up; ``step_s_median`` is its time.
    train: ``steps`` optimizer steps (default 3) after one warm-up step, a step mark after each.
    Either is also run once bare (no profiler) just before, so ``bare_s`` and the profiler's overhead are measured.
    Where a phase budget is set (``budget_s`` seconds, else the environment's: measure/runner/progress.BUDGET_ENV;
    doctor gives one on a CPU, cli/doctor.py), the bare run stops at it
    and the profiled one covers as much (``tokens`` / ``train_steps``: asked, ran, why). ``on_progress(phase, i,
    n)``: called at each phase, token and step (doctor's progress line on a terminal).
    An out-of-memory error is a result: ``status: oom`` with the allocator's numbers at the failure."""
    from gpuscope.measure.models.hf_model import case_config

    dev = Device(pick_device(device or case.get("device")))
    cfg = case_config(case)
    from gpuscope.measure.runner import progress

    state = {"phase": "load", "on_progress": on_progress, "budget": budget_s or progress.budget_s()}
    try:
        run = _profile_infer if case["kind"] == "infer" else _profile_train
        tr, p, gcp, host, bare, routing, ran = run(case, cfg, dev, state)
        _say(state, "profile", "reading the profile")
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
            s["weight_bytes"] = sum(t.numel() * t.element_size() for t in tr.model.parameters())
        if ran is not None:
            s["tokens" if case["kind"] == "infer" else "train_steps"] = ran
    except Exception as e:
        if not is_oom(e):
            raise
        s = {"schema": SCHEMA, "status": "oom", "phase": state["phase"], "device": dev.name, "device_type": dev.type,
             "device_name": dev.device_name(), "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
             "memory": allocator(dev, {})}
    s["case"] = _ran_case(case, s)
    gc.collect()
    dev.empty_cache()
    return s


def _ran_case(case: dict, s: dict) -> dict:
    """The case as it ran: ``gen`` / ``steps`` the tokens and steps that ran where a budget ended them (what the
    estimate compares), the asked count kept as ``gen_asked`` / ``steps_asked``."""
    for key, rec in (("gen", s.get("tokens")), ("steps", s.get("train_steps"))):
        if rec and rec["ran"] != rec["asked"]:
            case = dict(case, **{key: rec["ran"], f"{key}_asked": rec["asked"]})
    return case
