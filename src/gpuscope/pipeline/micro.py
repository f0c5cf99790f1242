"""The micro loop: every microbenchmark of a run on one device, stored as it finishes (or, resumed, reused)."""

from __future__ import annotations

from gpuscope.errors import UserError
from gpuscope.workloads.micro import MicroCase, run


def open_device(device: str | None):
    """The measure Device for ``device`` (torch imported here); an unknown or absent device is a UserError."""
    from gpuscope.measure.device.device import Device, pick_device

    try:
        return Device(pick_device(device))
    except RuntimeError as e:
        raise UserError(f"--device: {e}.") from None


def run_micro(s, device: str | None, mode: str, dtypes, benches=("matmul", "memory", "transfer"),
              **matmul) -> list[dict]:
    """Run (or, with resume, reuse) every micro item; returns the result dicts (stored ones included)."""
    from gpuscope.measure.device.provenance import provenance
    from gpuscope.measure.micro.bench import Runner, micro_configs

    dev = open_device(device)
    configs = micro_configs(dev, mode, dtypes, benches, **matmul)
    prov = provenance(dev)
    runner = Runner(dev)
    results = []
    with s.reporter.progress(f"micro ({mode}) on {dev.name}", len(configs)) as prog:
        for c in configs:
            case = MicroCase.from_dict(c)
            key, name = case.key, case.name
            prog.item(name)
            if key in s.done:
                results.append(s.skipped(key, name)["result"])
                prog.advance()
                continue
            r = run(case, runner)
            mid = s.store.put(s.run_id, key, "micro", name, c, r, prov)
            results.append(r)
            s.add({"id": mid, "key": key, "name": name, "skipped": False, "status": r["status"], "result": r})
            prog.advance()
    return results
