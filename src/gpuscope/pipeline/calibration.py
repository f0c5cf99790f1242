"""Calibration: a device's measured ceilings (the micro set) and this host's costs per kernel (the host fits) as a
hardware TOML the planner uses; bench all's own calibration beside its results database.

The host fits are reported on the session (``warn``: said even under --json) and stored whole as one measurement
of kind ``host`` (workloads/host.py), with this calibration's host speed beside the machine's earlier ones."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscope.errors import UserError

HOST_SPREAD_WARN = 0.15  # passes of the host fit further apart than this are reported as a moving host


def host_keys(device: str | None, s) -> dict:
    """This host's costs as [measured] keys of a hardware TOML (measure/host/costs.host_costs and
    train_host_costs), each fit reported on the session ``s``; a fit that is not valid is said and left out. Both
    fits are also stored whole in the session's store (store_host_fits)."""
    keep: dict = {}
    try:
        measured = _host_keys(s, device, keep)
        say_history(s, device, keep)
        return measured
    finally:
        store_host_fits(s, device, keep)


def say_history(s, device: str | None, keep: dict) -> None:
    """This calibration's host speed beside the earlier calibrations of this machine in the results store
    (explain/host_history.py): kept with the fits and on the session (bench's JSON), and said when it is far
    from their usual speed."""
    from gpuscope.explain.host_history import history_line, host_history
    from gpuscope.pipeline.micro import open_device

    host = keep.get("host") or {}
    h = host_history(s.store.all("host"), open_device(device).device_name(), s.store.hostname,
                     host.get("host_probe_s"))
    if h is not None:
        keep["history"] = s.host_history = h
        line = history_line(h)
        if line:
            s.warn(line)


def _decode_line(costs: dict, detail: dict, s) -> None:
    tiny = detail.get("launch_tiny_s") or costs["host_launch_s"]
    real = detail.get("real_width") or {}
    if costs.get("host_prefill_launch_s"):
        how = (f"decode, measured at Llama-3.2-1B's widths; {costs['host_prefill_launch_s'] * 1e6:.1f} us "
               f"per prefill kernel; tiny models' {tiny * 1e6:.1f} us")
    else:
        how = f"tiny models' {tiny * 1e6:.1f} us x the catalog's real-size factor"
        if real.get("invalid"):
            s.warn(f"host (real widths): not used ({real['invalid']})")
    spread, at_probe = detail.get("launch_spread"), detail.get("launch_spread_at_probe")
    probe = (f" at a host probe of {costs['host_probe_s'] * 1e3:.2f} ms" if costs.get("host_probe_s") else "")
    s.warn(f"host: {costs['host_launch_s'] * 1e6:.1f} us per kernel ({how}), "
           f"{costs['host_step_s'] * 1e3:.2f} ms per generated token outside the model{probe}"
           + (f"; median of {detail['valid_passes']} passes, which spread {spread:.0%}" if spread is not None else "")
           + (f" as measured and {at_probe:.0%} each at its probe" if at_probe is not None else ""))


def _spread_lines(detail: dict, s) -> None:
    spread, at_probe = detail.get("launch_spread"), detail.get("launch_spread_at_probe")
    left = at_probe if at_probe is not None else spread  # what the probes did not explain stays in the estimates
    if left is None or left <= HOST_SPREAD_WARN:
        return
    passes = detail.get("passes", [])
    steal = [((p.get("host_load") or {}).get("steal_fraction")) for p in passes]
    said = ", ".join("?" if x is None else f"{x:.0%}" for x in steal)
    s.warn("host: the passes disagree: this host's speed moves between minutes, and host-bound estimates carry "
           "that spread; calibrate again when it is idle" + (f" (hypervisor steal per pass: {said})" if steal else ""))
    # what each pass met: its tiny-model launch cost beside its host probe (measure/host/probe.py)
    met = [f"{p['launch_tiny_s'] * p['host_probe_s'] / (p.get('probe_unit_s') or p['host_probe_s']) * 1e6:.1f}"
           f" us / {p['host_probe_s'] * 1e3:.2f} ms" for p in passes if p.get("launch_tiny_s") and p.get("host_probe_s")]
    if met:
        s.warn("host: per pass, tiny-model launch cost / host probe: " + ", ".join(met))


def _train_keys(s, device, tiny: float, detail: dict, keep: dict) -> dict:
    """The training costs in units of the tiny models' launch: x host_launch_s in the planner, they carry the same
    real/tiny ratio (measured on a GPU, the catalog's factor elsewhere)."""
    from gpuscope.measure.host.costs import train_host_costs

    tr = keep["train"] = train_host_costs(tiny, device, train_probe_s=detail.get("train_probe_s"))
    td = tr.get("host_train_detail") or {}
    if td.get("host_probe_train_s") and detail.get("train_probe_s"):
        s.warn(f"host (training): the fits met a training probe of {td['host_probe_train_s'] * 1e3:.2f} ms, the "
               f"decode passes {detail['train_probe_s'] * 1e3:.2f} ms; each round taken to the passes' speed by the "
               "probe after it")
    if tr.get("host_train_invalid"):
        s.warn(f"host (training): not written ({tr['host_train_invalid']})")
        return {}
    s.warn(f"host (training): per kernel {tr['host_train_fwd']:.2f} forward, {tr['host_train_bwd']:.2f} backward, "
           f"{tr['host_train_recompute']:.2f} recomputed; {tr['host_train_ckpt_layer']:.1f} per checkpointed layer "
           "(x the launch cost)")
    return {k: v for k, v in tr.items() if k != "host_train_detail"}


def _host_keys(s, device: str | None, keep: dict) -> dict:
    from gpuscope.measure.host.costs import host_costs

    costs = keep["host"] = host_costs(device)
    if costs.get("host_invalid"):
        s.warn(f"host: not written ({costs['host_invalid']}); the catalog's host costs stay in use")
        return {}
    measured = {k: v for k, v in costs.items() if k.startswith("host_") and k not in ("host_detail", "host_invalid")}
    detail = costs.get("host_detail") or {}
    _decode_line(costs, detail, s)
    _spread_lines(detail, s)
    measured.update(_train_keys(s, device, detail.get("launch_tiny_s") or costs["host_launch_s"], detail, keep))
    return measured


def store_host_fits(s, device: str | None, keep: dict) -> None:
    """The host fits of a calibration (``host_keys``' ``keep``) as one measurement of kind ``host``: every pass
    with its probes, so a calibration's host figures can be traced after the run."""
    from gpuscope.measure.device.provenance import provenance
    from gpuscope.pipeline.micro import open_device
    from gpuscope.workloads.host import HostCase

    if not keep:
        return
    host = keep.get("host") or {}
    case = HostCase(device=device)
    s.store.put(s.run_id, case.key, "host", case.name, case.to_dict(),
                {"status": "error" if host.get("host_invalid") else "ok", **keep}, provenance(open_device(device)))


def calibration_text(device: str | None, results: list[dict], measured_host: dict, note: str) -> str:
    """The hardware TOML of a device's micro results (and host keys); a device the TOML cannot be made for (no
    ceiling measured) is a UserError."""
    from gpuscope.measure.micro.bench import ceilings
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.pipeline.micro import open_device

    dev = open_device(device)
    measured = ceilings(results)
    measured.update(measured_host or {})
    return calibration_toml(dev.device_name(), dev.type, measured, dev.total_memory(), note)


def run_calibration(s, device: str | None, results: list[dict], host: bool, mode: str) -> str | None:
    """bench all's own calibration: its micro ceilings (and, with ``host``, this host's costs) as a hardware TOML
    in ``calibrations/<device>-<run id>.toml`` beside the results database; its path, or None (said) where none
    can be made."""
    from gpuscope.pipeline.micro import open_device

    dev = open_device(device)
    try:
        text = calibration_text(device, results, host_keys(device, s) if host else {},
                                f"Mode: {mode}; bench all, run {s.run_id}.")
    except UserError as e:
        s.note(f"no calibration from this run ({e}); the workloads are planned on the catalog")
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", dev.device_name().lower()).strip("-") or dev.type
    path = Path(s.store.path).expanduser().resolve().parent / "calibrations" / f"{slug}-{s.run_id}.toml"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"the run's calibration cannot be written to '{path}' ({exc.strerror}).") from None
    s.calibration = str(path)
    s.note(f"workloads planned on this run's calibration: {path}")
    return str(path)
