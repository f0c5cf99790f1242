"""`gpuscope hardware calibrate`: run the micro set, store it, and write the measured ceilings as a hardware TOML.

Wired into `gpuscope hardware` by ``register_calibrate(hw_typer)`` (called from gpuscope.cli.hardware).
"""

from __future__ import annotations

import typer

HOST_SPREAD_WARN = 0.15  # passes of the host fit further apart than this are reported as a moving host


def host_keys(device: str | None, session=None) -> dict:
    """This host's costs as [measured] keys of a hardware TOML (measure/micro/calibrate.host_costs and
    train_host_costs), each fit reported on stderr; a fit that is not valid is said and left out. With
    ``session`` (cli/bench_run.Session), both fits are also stored whole in its results store (store_host_fits)."""
    keep: dict = {}
    try:
        measured = _host_keys(device, keep)
        if session is not None:
            say_history(session, device, keep)
        return measured
    finally:
        if session is not None:
            store_host_fits(session, device, keep)


def say_history(s, device: str | None, keep: dict) -> None:
    """This calibration's host speed beside the earlier calibrations of this machine in the results store
    (explain/host_history.py): kept with the fits and on the session (bench's JSON), and said when it is far
    from their usual speed."""
    from gpuscope.explain.host_history import history_line, host_history
    from gpuscope.measure.device.device import Device, pick_device

    host = keep.get("host") or {}
    h = host_history(s.store.all("host"), Device(pick_device(device)).device_name(), s.store.hostname,
                     host.get("host_probe_s"))
    if h is not None:
        keep["history"] = s.host_history = h
        line = history_line(h)
        if line:
            typer.echo(line, err=True)


def _host_keys(device: str | None, keep: dict) -> dict:
    from gpuscope.measure.micro.calibrate import host_costs, train_host_costs

    costs = keep["host"] = host_costs(device)
    if costs.get("host_invalid"):
        typer.echo(f"host: not written ({costs['host_invalid']}); the catalog's host costs stay in use", err=True)
        return {}
    measured = {k: v for k, v in costs.items() if k.startswith("host_") and k not in ("host_detail", "host_invalid")}
    detail = costs.get("host_detail") or {}
    tiny = detail.get("launch_tiny_s") or costs["host_launch_s"]
    real = detail.get("real_width") or {}
    if costs.get("host_prefill_launch_s"):
        how = (f"decode, measured at Llama-3.2-1B's widths; {costs['host_prefill_launch_s'] * 1e6:.1f} us "
               f"per prefill kernel; tiny models' {tiny * 1e6:.1f} us")
    else:
        how = f"tiny models' {tiny * 1e6:.1f} us x the catalog's real-size factor"
        if real.get("invalid"):
            typer.echo(f"host (real widths): not used ({real['invalid']})", err=True)
    spread, at_probe = detail.get("launch_spread"), detail.get("launch_spread_at_probe")
    probe = (f" at a host probe of {costs['host_probe_s'] * 1e3:.2f} ms" if costs.get("host_probe_s") else "")
    typer.echo(f"host: {costs['host_launch_s'] * 1e6:.1f} us per kernel ({how}), "
               f"{costs['host_step_s'] * 1e3:.2f} ms per generated token outside the model{probe}"
               + (f"; median of {detail['valid_passes']} passes, which spread {spread:.0%}"
                  if spread is not None else "")
               + (f" as measured and {at_probe:.0%} each at its probe" if at_probe is not None else ""), err=True)
    left = at_probe if at_probe is not None else spread  # what the probes did not explain stays in the estimates
    if left is not None and left > HOST_SPREAD_WARN:
        passes = detail.get("passes", [])
        steal = [((p.get("host_load") or {}).get("steal_fraction")) for p in passes]
        said = ", ".join("?" if x is None else f"{x:.0%}" for x in steal)
        typer.echo("host: the passes disagree: this host's speed moves between minutes, and host-bound "
                   "estimates carry that spread; calibrate again when it is idle"
                   + (f" (hypervisor steal per pass: {said})" if steal else ""), err=True)
        # what each pass met: its tiny-model launch cost beside its host probe (measure/host/probe.py)
        met = [f"{p['launch_tiny_s'] * p['host_probe_s'] / (p.get('probe_unit_s') or p['host_probe_s']) * 1e6:.1f}"
               f" us / {p['host_probe_s'] * 1e3:.2f} ms" for p in passes
               if p.get("launch_tiny_s") and p.get("host_probe_s")]
        if met:
            typer.echo("host: per pass, tiny-model launch cost / host probe: " + ", ".join(met), err=True)
    # the training costs in units of the tiny models' launch: x host_launch_s in the planner, they carry the
    # same real/tiny ratio (measured on a GPU, the catalog's factor elsewhere)
    tr = keep["train"] = train_host_costs(tiny, device, train_probe_s=detail.get("train_probe_s"))
    td = tr.get("host_train_detail") or {}
    if td.get("host_probe_train_s") and detail.get("train_probe_s"):
        typer.echo(f"host (training): the fits met a training probe of {td['host_probe_train_s'] * 1e3:.2f} ms, "
                   f"the decode passes {detail['train_probe_s'] * 1e3:.2f} ms; each round taken to the passes' "
                   "speed by the probe after it", err=True)
    if tr.get("host_train_invalid"):
        typer.echo(f"host (training): not written ({tr['host_train_invalid']})", err=True)
    else:
        measured.update({k: v for k, v in tr.items() if k != "host_train_detail"})
        typer.echo(f"host (training): per kernel {tr['host_train_fwd']:.2f} forward, "
                   f"{tr['host_train_bwd']:.2f} backward, {tr['host_train_recompute']:.2f} recomputed; "
                   f"{tr['host_train_ckpt_layer']:.1f} per checkpointed layer (x the launch cost)", err=True)
    return measured


def store_host_fits(s, device: str | None, keep: dict) -> None:
    """The host fits of a calibration (``host_keys``' ``keep``) as one measurement of kind ``host`` in the
    results store: every pass with its probes, so a calibration's host figures can be traced after the run."""
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.device.provenance import provenance

    if not keep:
        return
    host = keep.get("host") or {}
    status = "error" if host.get("host_invalid") else "ok"
    s.store.put(s.run_id, "host/costs", "host", "host/costs", {"kind": "host", "device": device},
                {"status": status, **keep}, provenance(Device(pick_device(device))))


def register_calibrate(hw: typer.Typer) -> None:
    from gpuscope.cli.bench import DB_HELP, DEVICE_HELP, RESUME_HELP

    @hw.command("calibrate")
    def calibrate_cmd(
        out: str = typer.Option(None, "--out", help="Write the TOML here (default: print it)."),
        save: bool = typer.Option(False, "--save", help="Also save it where `gpuscope plan ... --calibrated` "
                                  "finds it (the data directory, one file per catalog device)."),
        quick: bool = typer.Option(False, "--quick/--thorough", help="A few shapes, or the full sweep (default)."),
        host: bool = typer.Option(True, "--host/--no-host", help="Also measure this machine's eager host costs "
                                  "(tiny models; the planner's launch-bound decode model uses them)."),
        dtype: list[str] = typer.Option(None, "--dtype", help="Matmul dtypes (default: all the device runs)."),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        resume: bool = typer.Option(False, "--resume", help=RESUME_HELP),
    ) -> None:
        """Measure this device's ceilings (matmul per dtype, copy bandwidth, host link) into a hardware TOML."""
        from pathlib import Path

        from gpuscope.cli.bench import _dtypes, check_device, require_torch
        from gpuscope.cli.bench_run import Session, guarded, run_micro
        from gpuscope.errors import UserError

        require_torch()
        device = check_device(device)
        dts = _dtypes(dtype)
        s = Session(db, "hardware calibrate", resume, as_json=False)
        holder: dict = {}

        def go():
            holder["results"] = run_micro(s, device, "quick" if quick else "sweep", dts)
            if host:  # inside the session: the fits are stored with the run's micro results
                holder["host"] = host_keys(device, s)

        guarded(s, go)
        from gpuscope.measure.micro.calibrate import calibration_toml
        from gpuscope.measure.device.device import Device, pick_device
        from gpuscope.measure.micro.bench import ceilings

        dev = Device(pick_device(device))
        measured = ceilings(holder["results"])
        measured.update(holder.get("host") or {})
        text = calibration_toml(dev.device_name(), dev.type, measured, dev.total_memory(),
                                f"Mode: {'quick' if quick else 'sweep'}.")
        if save:
            import tomllib

            from gpuscope.specs.calibration import calibrated_path

            key = tomllib.loads(text).get("base") or dev.device_name()
            path = calibrated_path(key)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            except OSError as exc:
                raise UserError(f"--save: '{path}' cannot be written ({exc.strerror}).") from None
            use = (f"`gpuscope plan ... --gpu {key} --calibrated`" if tomllib.loads(text).get("base")
                   else f"`gpuscope plan ... --gpu {path}` (this device is not in the catalog)")
            typer.echo(f"saved {path}; {use} uses it", err=True)
        if out:
            try:
                Path(out).expanduser().write_text(text)
            except OSError as exc:
                raise UserError(f"--out '{out}' cannot be written ({exc.strerror}).") from None
            typer.echo(f"wrote {out}", err=True)
        elif not save:
            typer.echo(text, nl=False)
