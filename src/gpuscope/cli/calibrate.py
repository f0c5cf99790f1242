"""`gpuscope hardware calibrate`: run the micro set, store it, and write the measured ceilings (and this host's
costs) as a hardware TOML (pipeline/calibration.py). Wired into `gpuscope hardware` by ``register_calibrate``."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuscope.cli import bench_cpu, options
from gpuscope.errors import UserError


def _save(text: str, device_name: str) -> None:
    """Save the TOML where `gpuscope plan ... --calibrated` finds it (one file per catalog device)."""
    import tomllib

    from gpuscope.specs.calibration import calibrated_path

    base = tomllib.loads(text).get("base")
    path = calibrated_path(base or device_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"--save: '{path}' cannot be written ({exc.strerror}).") from None
    use = (f"`gpuscope plan ... --gpu {base} --calibrated`" if base
           else f"`gpuscope plan ... --gpu {path}` (this device is not in the catalog)")
    typer.echo(f"saved {path}; {use} uses it", err=True)


def calibrate_cmd(
    out: str = typer.Option(None, "--out", help="Write the TOML here (default: print it)."),
    save: bool = typer.Option(False, "--save", help="Also save it where `gpuscope plan ... --calibrated` finds it "
                              "(the data directory, one file per catalog device)."),
    quick: bool = typer.Option(False, "--quick/--thorough", help="A few shapes, or the full sweep (default)."),
    host: bool = typer.Option(True, "--host/--no-host", help="Also measure this machine's eager host costs (tiny "
                              "models; the planner's launch-bound decode model uses them)."),
    dtype: list[str] = typer.Option(None, "--dtype", help="Matmul dtypes (default: all the device runs)."),
    device: str = options.device(), db: str = options.db(), resume: bool = options.resume(),
) -> None:
    """Measure this device's ceilings (matmul per dtype, copy bandwidth, host link) into a hardware TOML."""
    from gpuscope.cli.bench import _dtypes
    from gpuscope.cli.bench_run import Session, exit_on_failures, guarded
    from gpuscope.pipeline.calibration import calibration_text, host_keys
    from gpuscope.pipeline.micro import open_device, run_micro

    options.require_torch()
    device = options.device_exists(device)
    options.writable(out)  # before minutes of measuring, not after
    dts = _dtypes(dtype)
    if dts is None and bench_cpu.on_cpu(device):  # a CPU's runs take fp32 or bf16 (cli/bench_cpu.py); fp16 and
        from gpuscope.pipeline.host_ceilings import CPU_DTYPES  # fp8 matmuls run 10-100x slower there

        dts = list(CPU_DTYPES)
        typer.echo(f"hardware calibrate on a CPU: --dtype {','.join(dts)} (the dtypes a CPU run takes; pass "
                   "--dtype to choose)", err=True)
    mode = "quick" if quick else "sweep"
    s = Session(db, "hardware calibrate", resume, as_json=False)
    holder: dict = {}

    def go():
        holder["results"] = run_micro(s, device, mode, dts)
        if host:  # inside the session: the fits are stored with the run's micro results
            holder["host"] = host_keys(device, s)

    run = guarded(s, go, exit_on_fail=False)  # the TOML is written from what did finish
    text = calibration_text(device, holder["results"], holder.get("host") or {}, f"Mode: {mode}.")
    if save:
        _save(text, open_device(device).device_name())
    if out:
        try:
            Path(out).expanduser().write_text(text)
        except OSError as exc:
            raise UserError(f"--out '{out}' cannot be written ({exc.strerror}).") from None
        typer.echo(f"wrote {out}", err=True)
    elif not save:
        typer.echo(text, nl=False)
    exit_on_failures(run)


def register_calibrate(hw: typer.Typer) -> None:
    hw.command("calibrate")(calibrate_cmd)
