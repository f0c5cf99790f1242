"""This machine's eager host costs, the parameters of the planner's engine model (estimate/engines.EngineModel for
decode, estimate/engines.TrainHost for training steps), fitted on models whose GPU work is negligible
(measure/host/overhead.py) with the host probe taken between the fits' rounds (measure/host/probe.py).
``gpuscope hardware calibrate --host`` writes them into the calibration TOML's ``[measured]`` table.

Host speed. The host's speed moves on a shared VM (two H200 calibrations four minutes apart read 22.4 and
17.5 us a kernel: research/results/2026-11-30-h200-g), so ``host_costs`` runs its fits ``passes`` times with the
host probe after every round, and takes every pass to the passes' median probe (its docstring has the rule).
The training fits run a minute after the decode passes that measured ``launch_s``, and the host's speed moves
between minutes: dividing a slow minute's training times by a fast minute's launch cost read 5.51 launches a
backward kernel where a steadier calibration read 3.54 (research/results/2026-11-30-h200-g, section 9). So the
training probe runs after every round of the training fits (host/probe.RoundProbe) and each round is taken to a
host whose training probe reads TRAIN_PROBE_UNIT_S (training work follows the training probe, r = 0.85, the
forward probe at 0.44), then to what the training probe read while the decode passes ran (host_costs'
host_detail.train_probe_s). Only then are the fits divided by ``launch_s``, so both describe one host speed,
written as ``host_probe_train_s``. (Going through the forward probe instead, the ratio of the two probes after a
training round read 2.5 in one calibration and 3.2 in the next on the same host:
research/results/2026-11-30-h200-h.)

Torch is imported only when a fit runs.
"""

from __future__ import annotations

import statistics


# On a CPU the fits' tiny models run ~5x slower than beside a GPU (the host runs their kernels too) and the passes
# share its cores with nothing else to wait on: two passes of fewer rounds (CPU_PASSES, CPU_FAMILY_ITERS) and fewer
# training steps (CPU_TRAIN_STEPS) keep `hardware calibrate --quick --host` on a 2-core host within a minute or two
# loaded; the passes' spread is still reported beside the costs (pipeline/calibration.py), which is their noise.
CPU_PASSES, CPU_FAMILY_ITERS, CPU_TRAIN_STEPS = 2, 18, 6


def host_costs(device: str | None = None, real_width: bool | None = None, passes: int | None = None) -> dict:
    """This machine's eager host costs for the planner's engine model (estimate/engines.EngineModel), measured on
    tiny Llama models whose GPU work is negligible (measure/host/overhead.py): the host time of one decoder layer
    divided by the kernels the planner counts in it gives host_launch_s; the per-forward intercept less its
    kernels gives host_forward_s; generate's per-token extra gives host_step_s, and its once-per-call work (TTFT
    less the prompt's forward and host_step_s) host_setup_s. host_launch_s and
    host_prefill_launch_s come from layers at Llama-3.2-1B's widths where the device is not the CPU (real-size
    kernels cost the host more), else host_launch_s is the tiny models' per-kernel time x
    estimate.engines.REAL_SIZE_LAUNCH_FACTOR (as the catalog's). ``real_width`` forces the real-width fit on or
    off (default: on unless the device is the CPU).

    The host's speed moves on a shared VM (module docstring), so the fits run ``passes`` times (3; CPU_PASSES on a
    CPU). In a pass the host
    probe runs after every round and takes that round to a host whose probe reads PROBE_UNIT_S (host/probe.RoundProbe;
    a pass without it is taken by its own median probe instead), and each cost is the median over the valid passes of
    that cost at the
    passes' median probe (``host_probe_s``): the costs at the passes' median host speed, written beside that
    speed. A round that met a slow second no longer moves a pass, nor a pass the median; and the probe written
    describes the same moment as the costs (a median of raw costs beside a median of probes paired numbers from
    different passes: one H200 calibration whose passes spread 72% wrote a 3.1 ms probe beside a 17.6 us launch
    cost that faster passes read at ~2.0 ms, research/results/2026-11-30-h200-g). The detail keeps every pass,
    ``launch_spread`` ((max - min) / median of host_launch_s over the passes, as each met its host) and
    ``launch_spread_at_probe`` (the same at the median probe), and ``train_probe_s``, the training probe's median
    over the passes' rounds (train_host_costs takes the training fits to it)."""
    from gpuscope.measure.device.device import Device, pick_device

    dev = Device(pick_device(device))
    use_real = dev.type != "cpu" if real_width is None else real_width
    passes = passes if passes is not None else (CPU_PASSES if dev.type == "cpu" else 3)
    runs = [_host_pass(dev, use_real) for _ in range(max(1, passes))]
    ok = [r for r in runs if not r.get("host_invalid")]
    if not ok:
        return {"host_detail": {"passes": [r["host_detail"] for r in runs]}, "host_invalid": runs[-1]["host_invalid"]}
    keys = {k for r in ok for k in r if k.startswith("host_") and k not in ("host_detail", "host_probe_s")}
    keys = {k for k in keys if all(k in r for r in ok)}  # every valid pass measured it (real-width fits may fail)
    probes = [r.get("host_probe_s") for r in ok]
    ref = statistics.median(probes) if all(probes) else None
    # each pass taken to the median probe's speed: from the speed its rounds were scaled to, else its own probe's
    units = [r["host_detail"].get("probe_unit_s") or p for r, p in zip(ok, probes)]
    ups = [ref / u for u in units] if ref else [1.0] * len(ok)

    def at_ref(values: list) -> float:
        return statistics.median(v * u for v, u in zip(values, ups))

    out = {k: at_ref([r[k] for r in ok]) for k in keys}
    if ref:
        out["host_probe_s"] = ref
    # as each pass met its host (its rounds' unit back to its own median probe), and all at the median probe
    launch = [r["host_launch_s"] * (p / u if (p and u) else 1.0) for r, p, u in zip(ok, probes, units)]
    scaled = [r["host_launch_s"] * u for r, u in zip(ok, ups)]
    tiny = at_ref([r["host_detail"]["launch_tiny_s"] for r in ok])
    trains = [r["host_detail"].get("train_probe_s") for r in ok]
    detail = {"passes": [r["host_detail"] for r in runs], "valid_passes": len(ok), "launch_tiny_s": tiny,
              # the training probe while the passes ran: the speed train_host_costs expresses its costs at
              "train_probe_s": statistics.median(trains) if all(trains) else None,
              "launch_spread": (max(launch) - min(launch)) / statistics.median(launch),
              "launch_spread_at_probe": (max(scaled) - min(scaled)) / statistics.median(scaled),
              "real_size_launch_factor": out["host_launch_s"] / tiny,
              "real_width": runs[-1]["host_detail"].get("real_width")}
    return out | {"host_detail": detail}


# The host speed a calibration pass's rounds are taken to before its fits (any constant: host_costs takes every pass
# to the passes' median probe after), and the same for the training fits' rounds (against the training probe).
PROBE_UNIT_S = 1e-3
TRAIN_PROBE_UNIT_S = 5e-3


def _host_pass(dev, use_real: bool) -> dict:
    """One pass of host_costs' fits: tiny models, then (``use_real``) Llama-3.2-1B-wide layers."""
    from gpuscope.estimate import ops as opsmod
    from gpuscope.estimate.engines import REAL_SIZE_LAUNCH_FACTOR
    from gpuscope.measure.host.overhead import measure_family
    from gpuscope.measure.models.tiny import TINY
    from gpuscope.specs.hf_config import spec_from_config

    from gpuscope.measure.host.load import HostLoad
    from gpuscope.measure.host.probe import RoundProbe, release

    # the host's speed after every round of the fits, each round taken to a host whose probe reads PROBE_UNIT_S
    # (host_probe.RoundProbe), and what else the host did meanwhile. The training probe runs after every round too:
    # what it reads while these passes run is the speed the training costs are expressed at (train_host_costs).
    probe, train_probe = RoundProbe(dev, to=PROBE_UNIT_S), RoundProbe(dev, "train")

    def probes() -> float | None:
        train_probe()
        return probe()

    with HostLoad() as load:
        r = measure_family("llama", dev, layers=(2, 4, 8), iters=CPU_FAMILY_ITERS if dev.type == "cpu" else 30,
                           chunk=6, probe=probes)
        real = _real_width_launch(dev, probes) if use_real else None
    release()
    r = dict(r, host_load=load.summary(), host_probe_s=probe.median(), host_probe_rounds_s=probe.samples,
             probe_unit_s=PROBE_UNIT_S, train_probe_s=train_probe.median(),
             train_probe_rounds_s=train_probe.samples)
    spec1 = spec_from_config(dict(TINY["llama"], num_hidden_layers=1))
    spec2 = spec_from_config(dict(TINY["llama"], num_hidden_layers=2))
    k1 = sum(o.kernels * o.count for o in opsmod.forward_ops(spec1, 1, 1, 16, 2.0, 2.0, 2.0, head_tokens=1))
    k2 = sum(o.kernels * o.count for o in opsmod.forward_ops(spec2, 1, 1, 16, 2.0, 2.0, 2.0, head_tokens=1))
    per_layer_kernels = k2 - k1
    other_kernels = k1 - per_layer_kernels
    fwd = r["decode_forward_s"]
    # A valid fit grows with the layer count (each layer adds its kernels' host time). On the H200 host a
    # calibrate run once gave a flat/negative slope and a 42 ms intercept (the tiny forwards' times did not grow
    # with depth): such a fit describes no engine, so no host keys are written from it.
    if r["layer_s"] <= 0 or any(b < a for a, b in zip(fwd, fwd[1:])):
        return {"host_detail": r, "host_invalid": "decode-forward host times do not grow with the layer count "
                f"({', '.join(f'{t * 1e3:.2f}' for t in fwd)} ms for {r['layers']} layers)"}
    tiny = r["layer_s"] / per_layer_kernels
    out = {"host_forward_s": max(0.0, r["forward_s"] - other_kernels * tiny),
           "host_step_s": max(0.0, r["generate_step_s"]), "host_probe_s": r["host_probe_s"]}
    if r.get("generate_setup_s") is not None:
        out["host_setup_s"] = max(0.0, r["generate_setup_s"])
    # real-size kernels cost the host more than the tiny models' (estimate/engines.py). Where the device runs
    # apart from the host, time Llama-3.2-1B-wide layers (measure/host/overhead.measure_real_width): decode and
    # prefill per kernel. Else, or if that fit is not valid, the tiny figure x the catalog's REAL_SIZE_LAUNCH_FACTOR.
    if real and not real.get("invalid"):
        r = dict(r, launch_tiny_s=tiny, real_width=real, real_size_launch_factor=real["decode_launch_s"] / tiny)
        out |= {"host_launch_s": real["decode_launch_s"], "host_prefill_launch_s": real["prefill_launch_s"]}
    else:
        r = dict(r, launch_tiny_s=tiny, real_size_launch_factor=REAL_SIZE_LAUNCH_FACTOR, real_width=real)
        out["host_launch_s"] = tiny * REAL_SIZE_LAUNCH_FACTOR
    return out | {"host_detail": r}


def _real_width_launch(dev, probe=None) -> dict:
    """Per-kernel host time of Llama-3.2-1B-wide decode and prefill layers (measure_real_width's per-layer slopes
    over the kernels the planner counts in one such layer); ``invalid`` when a fit does not grow with depth."""
    from gpuscope.estimate import ops as opsmod
    from gpuscope.measure.host.overhead import REAL_WIDTH, measure_real_width
    from gpuscope.specs.hf_config import spec_from_config

    r = measure_real_width(dev, probe=probe)
    P = r["prompt"]

    def per_layer(new: int, past: int) -> float:
        k = [sum(o.kernels * o.count for o in opsmod.forward_ops(
            spec_from_config(dict(REAL_WIDTH, num_hidden_layers=n)), 1, new, past, 2.0, 2.0, 2.0, head_tokens=1))
            for n in (1, 2)]
        return k[1] - k[0]

    for key in ("decode_forward_s", "prefill_forward_s"):
        if any(b <= a for a, b in zip(r[key], r[key][1:])):
            return dict(r, invalid=f"{key.split('_')[0]} forward times do not grow with the layer count "
                        f"({', '.join(f'{t * 1e3:.2f}' for t in r[key])} ms for {r['layers']} layers)")
    return dict(r, decode_launch_s=r["decode_layer_s"] / per_layer(1, P),
                prefill_launch_s=r["prefill_layer_s"] / per_layer(P, 0))


def _tiny_training_kernels() -> tuple[float, int]:
    """(kernels in one layer, kernels outside the layers) that the planner counts in the tiny Llama's training
    forward at measure_train_family's micro-batch 2 x seq 64, amp-bf16 (16-bit activations, fp32 residual stream)."""
    from gpuscope.estimate.train import layer_kernels, train_forward_ops
    from gpuscope.measure.models.tiny import TINY
    from gpuscope.specs.hf_config import spec_from_config

    spec = spec_from_config(dict(TINY["llama"], num_hidden_layers=2))
    in_layers, k_other = layer_kernels(train_forward_ops(spec, 2, 64, 2.0, 4.0), spec.num_layers)
    return in_layers / spec.num_layers, k_other


def _recompute_split(none: dict, full: dict) -> tuple[float, float]:
    """Full recompute's extra per-layer seconds as (checkpoint, re-forward): what the checkpoint adds to a layer's
    forward is its own bookkeeping, per layer; what it adds to the backward is the re-forward, per kernel
    (engines.TrainHost). A noisy split (either part not positive) keeps the whole extra as re-forward."""
    ckpt = full["forward_layer_s"] - none["forward_layer_s"]
    refwd = full["backward_layer_s"] - none["backward_layer_s"]
    if ckpt <= 0 or refwd <= 0:
        ckpt, refwd = 0.0, ckpt + refwd
    return ckpt, refwd


def train_host_costs(launch_s: float, device: str | None = None, steps: int | None = None,
                     train_probe_s: float | None = None) -> dict:
    """This machine's eager training host costs (estimate/engines.TrainHost), in units of ``launch_s`` (the decode
    calibration's tiny-model launch cost, host_costs' host_detail.launch_tiny_s; the planner multiplies them by
    host_launch_s, which carries the real-size factor): tiny Llama models of 2/4/8 layers trained with amp-bf16,
    without and with full recompute, each phase timed between synchronizes
    (measure/host/overhead.measure_train_family). The per-layer slopes divided by the kernels the planner counts
    in a layer of the training forward give the per-kernel costs; full recompute's extra forward slope is the
    checkpoint's per-layer cost and its extra backward slope the re-forward's per-kernel one; the intercepts,
    whole, give the per-call ones (engines.TrainHost says why). Invalid (nothing written) when a slope is not
    positive: the host's noise swamped the fit. The fits are taken to the decode passes' host speed first
    (``train_probe_s``, see the module docstring); without it, to the fits' own median training probe."""
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.host.overhead import measure_train_family
    from gpuscope.measure.host.probe import RoundProbe, release

    dev = Device(pick_device(device))
    steps = steps if steps is not None else (CPU_TRAIN_STEPS if dev.type == "cpu" else 10)
    train_probe = RoundProbe(dev, "train", to=TRAIN_PROBE_UNIT_S)  # returns the factor to the training unit
    none = measure_train_family("llama", dev, precision="amp-bf16", recompute="none", steps=steps,
                                probe=train_probe)
    full = measure_train_family("llama", dev, precision="amp-bf16", recompute="full", steps=steps,
                                probe=train_probe)
    release()
    train_here = train_probe.median()
    at_passes = train_probe_s or train_here
    # the fits' seconds (at a TRAIN_PROBE_UNIT_S training probe) x this = seconds at the decode passes' speed
    to_passes = at_passes / TRAIN_PROBE_UNIT_S if (at_passes and train_here) else 1.0
    unit = launch_s / to_passes
    k_layer, k_other = _tiny_training_kernels()
    ckpt, refwd = _recompute_split(none, full)
    slopes = {"fwd": none["forward_layer_s"], "bwd": none["backward_layer_s"], "recompute": refwd}
    detail = {"none": none, "full": full, "kernels_per_layer": k_layer, "other_kernels": k_other,
              "host_probe_train_s": train_here, "train_probe_at_passes_s": train_probe_s, "launch_s": launch_s,
              "launch_unit_s": unit, "probe_unit_s": TRAIN_PROBE_UNIT_S if train_here else None,
              "train_probe_rounds_s": train_probe.samples}
    if min(slopes.values()) <= 0 or none["optimizer_tensor_s"] <= 0:
        return {"host_train_invalid": "a training-phase fit did not grow with the layer or tensor count "
                f"(per layer: {', '.join(f'{k} {v * 1e3:.3f} ms' for k, v in slopes.items())})",
                "host_train_detail": detail}
    per_kernel = {k: v / k_layer / unit for k, v in slopes.items()}
    return {"host_train_fwd": per_kernel["fwd"], "host_train_bwd": per_kernel["bwd"],
            "host_train_recompute": per_kernel["recompute"], "host_train_ckpt_layer": ckpt / unit,
            # the intercepts whole: the planner no longer adds a model's own kernels outside its layers to them
            "host_train_other_kernels": 0.0,
            "host_train_fwd_fixed": max(0.0, none["forward_fixed_s"] / unit),
            "host_train_bwd_fixed": max(0.0, none["backward_fixed_s"] / unit),
            "host_opt_fixed": max(0.0, none["optimizer_fixed_s"] / unit),
            "host_opt_tensor": none["optimizer_tensor_s"] / unit,
            "host_probe_train_s": at_passes if train_here else None, "host_train_detail": detail}
