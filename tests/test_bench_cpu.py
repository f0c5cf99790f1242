"""`gpuscope bench`, `results` and `hardware calibrate` on CPU: tiny sizes, a temporary database, real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscope.workloads.sets import TINY_LLAMA  # noqa: E402
from gpuscope.specs.hardware import load_hardware  # noqa: E402
from gpuscope.store.db import Store  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=timeout)


def calibrate_cli(*args: str):
    """`gpuscope hardware calibrate` through the real `hardware` group, with register_calibrate added to it."""
    from typer.testing import CliRunner

    import gpuscope.cli as cli
    from gpuscope.cli.calibrate import register_calibrate

    cli._register()
    hw = next(g.typer_instance for g in cli.app.registered_groups if g.name == "hardware")
    if not any(c.name == "calibrate" for c in hw.registered_commands):
        register_calibrate(hw)
    return CliRunner().invoke(cli.app, ["hardware", "calibrate", *args])


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    db, out = d / "r.sqlite", d / "cpu.toml"
    # --no-host: the tests on this fixture read the matmul and copy ceilings; the host costs have their own tests
    # (test_calibrate_host_cli_writes_decode_and_training_host_keys), and measuring them here again took most of
    # this fixture's 1050 s on a loaded 2-core host
    r = calibrate_cli("--quick", "--no-host", "--device", "cpu", "--dtype", "fp32,bf16", "--db", str(db),
                      "--out", str(out))
    assert r.exit_code == 0, r.output
    return db, out


def _check_micro(d: dict, db: str) -> None:
    by = {m["name"]: m for m in d["measurements"] if m["name"].startswith("micro/")}
    assert set(by) == {*(f"micro/matmul/{t}/quick" for t in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")),
                       "micro/memory/copy/quick", "micro/memory/read/quick", "micro/memory/write/quick",
                       *(f"micro/transfer/{o}/quick" for o in ("h2d-pinned", "h2d-pageable", "d2h-pinned",
                                                                "d2h-pageable"))}
    mm = by["micro/matmul/fp32/quick"]["result"]
    assert mm["status"] == "ok" and mm["tflops"] > 0 and mm["tflops"] == max(s["tflops"] for s in mm["shapes"])
    for s in mm["shapes"]:
        assert s["time_s_min"] <= s["time_s"] <= s["time_s_max"] and s["iters"] >= 3
        assert s["tflops"] == pytest.approx(2 * s["m"] * s["n"] * s["k"] / s["time_s"] / 1e12)
    assert mm["nvml"]["unavailable"]  # no NVIDIA device: a clear reason, not an error
    assert by["micro/matmul/int8/quick"]["result"]["unit"] == "TOPS"
    assert by["micro/matmul/tf32/quick"]["status"] == "unsupported"  # a CUDA mode
    cp = by["micro/memory/copy/quick"]["result"]
    assert cp["gbs"] == pytest.approx(cp["bytes_moved"] / cp["time_s"] / 1e9) and cp["bytes_moved"] == 2 * cp["buffer_bytes"]
    assert by["micro/transfer/h2d-pinned/quick"]["status"] == "unsupported"  # the device is the host
    with Store.open(db) as st:
        rows = st.all("micro")
        assert len(rows) == 13
        prov = rows[0]["provenance"]
        assert prov["benchmark_version"] and prov["torch"] and "argv" in prov and "git_sha" in prov


def test_calibrate_writes_a_toml_the_planner_uses(calibrated):
    db, out = calibrated
    data = tomllib.loads(out.read_text())
    hw = load_hardware(str(out))
    assert hw.is_calibrated
    with Store.open(db) as st:
        stored = {r["result"]["dtype"]: r["result"]["tflops"] for r in st.all("micro")
                  if r["result"].get("bench") == "matmul" and r["status"] == "ok"}
        copy = next(r["result"]["gbs"] for r in st.all("micro") if r["name"] == "micro/memory/copy/quick")
    assert set(stored) == {"fp32", "bf16"}
    for d, v in stored.items():
        assert data["measured"]["matmul_tflops"][d] == v
        assert hw.achievable_tflops(d) == v
    assert hw.achievable_bw_gbs() == copy


def test_calibration_toml_for_a_catalog_device(tmp_path):
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.specs.hardware import catalog_key_for_device as catalog_key_for

    assert catalog_key_for("NVIDIA H200") == "nvidia_h200_sxm"
    assert catalog_key_for("NVIDIA H100 80GB HBM3") == "nvidia_h100_sxm"
    assert catalog_key_for("NVIDIA A100-SXM4-80GB") == "nvidia_a100_80gb_sxm"
    assert catalog_key_for("x86_64") is None
    m = {"matmul_tflops": {"bf16": 731.25, "fp8": 1401.5, "int8": 1200.0}, "memory_bw_gbs": 4131.0, "h2d_gbs": 53.2}
    p = tmp_path / "h200.toml"
    p.write_text(calibration_toml("NVIDIA H200", "cuda", m))
    assert 'base = "nvidia_h200_sxm"' in p.read_text()
    hw = load_hardware(str(p))
    assert hw.achievable_tflops("bf16") == 731.25 and hw.achievable_tflops("fp8") == 1401.5
    assert hw.achievable_tflops("int8") == 1200.0 and hw.achievable_bw_gbs() == 4131.0
    assert hw.peak("bf16") == load_hardware("h200").peak("bf16")  # datasheet peaks kept: MFU stays honest


@pytest.mark.slow
def test_bench_all_quick_with_estimates_resume_and_export(tmp_path, calibrated, capsys):
    _, toml = calibrated
    db = str(tmp_path / "r.sqlite")
    t0 = time.perf_counter()
    r = run("bench", "all", "--quick", "--device", "cpu", "--gpu", str(toml), "--db", db, "--json")
    dt = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[bench all --quick on CPU: {dt:.1f} s]", end=" ")
    assert r.returncode == 0, r.stderr  # its wall time is printed above (a figure, not a limit: a loaded host)
    d = json.loads(r.stdout)
    _check_micro(d, db)
    work = [m for m in d["measurements"] if not m["name"].startswith("micro/")]
    assert {m["name"].split("/")[0] for m in work} == {"infer", "train"} and len(work) == 4
    for m in work:
        assert m["status"] == "ok", m["result"]
        est = m["estimate"]
        assert est["hardware"] == "cpu" and est["calibrated"], est
        rows = {x["metric"]: x for x in est["rows"]}
        t = rows["prefill_s"] if "prefill_s" in rows else rows["step_s"]
        assert t["estimated"] > 0 and t["error"] == pytest.approx((t["estimated"] - t["measured"]) / t["measured"])
        assert rows["peak_bytes"]["measured"] is None and rows["peak_bytes"]["error"] is None  # CPU: no allocator stats

    # resumed: nothing measured twice; with --calibrate (the default on a GPU) the workloads are planned on this
    # run's own ceilings, written as a TOML beside the database (here from the resumed micro results). One run
    # checks both (each `bench all` process costs seconds of imports on a 2-core host).
    rc = run("bench", "all", "--quick", "--device", "cpu", "--db", db, "--resume", "--calibrate", "--no-host", "--json")
    assert rc.returncode == 0, rc.stderr
    dc = json.loads(rc.stdout)
    assert all(m["skipped"] for m in dc["measurements"]) and len(dc["measurements"]) == len(d["measurements"])
    with Store.open(db) as st:
        assert len(st.all()) == len(d["measurements"])  # nothing measured twice
    cal = Path(dc["calibration"])
    assert cal.parent == tmp_path / "calibrations" and cal.exists() and cal.stem.endswith(dc["run_id"])
    assert load_hardware(str(cal)).measured["memory_bw_gbs"] > 0
    for m in dc["measurements"]:
        if not m["name"].startswith("micro/"):
            assert m["estimate"]["hardware"] == cal.stem and m["estimate"]["calibrated"], m["estimate"]
    assert "calibration" not in d  # --gpu given: planned on it

    # the results commands in this process (the entry point's exit code and streams; no torch needed)
    lines = _main_out(capsys, "results", "export", "--csv", "--db", db).splitlines()
    assert lines[0].startswith("id,run_id,key,kind,name,status") and len(lines) == 1 + len(d["measurements"])
    out = tmp_path / "all.json"
    _main_out(capsys, "results", "export", "--json", "--out", str(out), "--db", db)
    assert len(json.loads(out.read_text())["measurements"]) == len(d["measurements"])
    assert "train/tiny-llama" in _main_out(capsys, "results", "list", "--db", db, "--kind", "train")
    mid = work[0]["id"]
    assert json.loads(_main_out(capsys, "results", "show", str(mid), "--db", db))["id"] == mid


def _main_out(capsys, *args: str) -> str:
    """stdout of `gpuscope ARGS` run through the entry point in this process; it must exit 0."""
    from gpuscope.cli import main

    capsys.readouterr()
    main(list(args))  # returns on exit 0 (sys.exit only for another code)
    return capsys.readouterr().out


def test_bench_infer_from_a_config_path_prints_the_estimate(tmp_path, calibrated):
    _, toml = calibrated
    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(TINY_LLAMA))
    db = str(tmp_path / "r.sqlite")
    # 31 decode steps: fewer fall within the run-to-run noise of a loaded 2-core CI machine (a clean-clone run at
    # --gen 4 read an E2E median below the TTFT median, so no TPOT and no decode row to print)
    r = run("bench", "infer", "--model", str(cfg.parent), "--batch", "2", "--prompt", "16", "--gen", "32",
            "--dtype", "fp32", "--repeats", "3", "--device", "cpu", "--gpu", str(toml), "--db", db)
    assert r.returncode == 0, r.stderr
    assert "decode_s_per_token" in r.stderr and "%" in r.stderr
    with Store.open(db) as st:
        (row,) = st.all("infer")
        assert row["status"] == "ok" and row["result"]["generated_tokens"] == 32


@pytest.mark.slow
def test_bench_infer_loads_a_local_checkpoint_with_from_pretrained(tmp_path):
    """--weights: the checkpoint's own weights through from_pretrained (no download), on the device or spread by
    accelerate (--device-map auto, --max-memory caps): the article's CPU-offload inference path."""
    import torch

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import build_model, load_pretrained

    ckpt = tmp_path / "ckpt"
    model, _ = build_model(dict(TINY_LLAMA), Device("cpu"), torch.float32)
    model.save_pretrained(ckpt)
    loaded, _ = load_pretrained({"model": str(ckpt)}, Device("cpu"), torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    db = str(tmp_path / "r.sqlite")
    r = run("bench", "infer", "--model", str(ckpt), "--weights", "--device-map", "auto", "--max-memory", "cpu=1GiB",
            "--batch", "1", "--prompt", "16", "--gen", "4", "--dtype", "fp32", "--repeats", "1", "--device", "cpu",
            "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["measurements"][0]["result"]
    assert res["status"] == "ok" and res["weights"] == "pretrained" and res["device_map"] == "auto"
    assert res["placement_bytes"] == {"cpu": res["param_bytes"]} and res["generated_tokens"] == 4


@pytest.mark.parametrize("args,word", [
    (("bench", "infer", "--model", "gpt2", "--weights"), "checkpoint directory"),
    (("bench", "infer", "--model", "gpt2", "--device-map", "auto"), "need --weights"),
    (("bench", "infer", "--model", "gpt2", "--fuse-proj", "--device-map", "auto"), "--fuse-proj"),
    (("bench", "infer", "--model", "no-such-model-xyz"), "no-such-model-xyz"),
    (("bench", "infer", "--model", "gpt2", "--batch", "0"), "--batch"),
    (("bench", "train", "--model", "gpt2", "--precision", "fp64"), "--precision"),
    (("bench", "micro", "--dtype", "fp64"), "--dtype"),
    (("bench", "micro", "--device", "tpu"), "--device"),
    (("bench", "micro", "--shapes", "2048x2048"), "MxNxK"),
    (("bench", "micro", "--shapes", "0x8x8"), "MxNxK"),
    (("bench", "micro", "--iters", "0"), "--iters"),
    (("bench", "micro", "--warmup", "-1"), "--warmup"),
    (("results", "export", "--csv", "--json"), "exactly one"),
])
def test_user_errors_exit_2(args, word, tmp_path):
    r = run(*args, "--db", str(tmp_path / "r.sqlite"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert word in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_micro_at_given_shapes_with_mamf_iterations(tmp_path):
    """--shapes times the matmul only, at exactly those shapes, with at least --iters timed iterations each (the
    public MAMF table's convention is 100 after 50); the stored name says the shapes were chosen."""
    r = run("bench", "micro", "--device", "cpu", "--dtype", "fp32", "--shapes", "96x64x128, 64x32x48", "--iters", "7",
            "--warmup", "2", "--db", str(tmp_path / "r.sqlite"), "--json")
    assert r.returncode == 0, r.stderr
    (m,) = json.loads(r.stdout)["measurements"]
    assert m["name"] == "micro/matmul/fp32/quick-shapes"
    rows = m["result"]["shapes"]
    assert [(x["m"], x["n"], x["k"]) for x in rows] == [(96, 64, 128), (64, 32, 48)]
    assert all(x["iters"] >= 7 for x in rows)


def test_thorough_sweep_holds_the_published_best_shapes():
    from types import SimpleNamespace

    from gpuscope.measure.micro.matmul import PUBLISHED_BEST, matmul_shapes

    sweep = matmul_shapes("sweep", SimpleNamespace(type="cuda"))
    assert set(PUBLISHED_BEST) <= set(sweep) and len(sweep) == len(set(sweep))
    assert (2048, 2048, 13312) in sweep  # H100 SXM's 794.5 TFLOP/s shape


def test_corrupt_db_exit_2_and_untouched(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"definitely not sqlite\n" * 100)
    before = bad.read_bytes()
    for args in (("bench", "micro", "--device", "cpu", "--dtype", "fp32"), ("results", "list")):
        r = run(*args, "--db", str(bad))
        assert r.returncode == 2 and "not an SQLite file" in r.stderr and "Traceback" not in r.stderr
    assert bad.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sqlite"]


def test_no_torch_is_one_sentence(monkeypatch):
    import importlib.util

    from gpuscope.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a))
    with pytest.raises(SystemExit) as e:
        main(["bench", "micro"])
    assert e.value.code == 2


def test_cli_modules_do_not_import_torch():
    code = ("import sys, gpuscope.cli as c; c._register(); import gpuscope.cli.calibrate, gpuscope.store.db, "
            "gpuscope.measure.device.nvml, gpuscope.measure.micro.calibrate; print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


# --- NVML sampler ----------------------------------------------------------------------------------------------
class _FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self):
        self.energy_mj = 1_000_000
        self.n = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, u):
        return ("gpu", u)

    def nvmlDeviceGetPowerUsage(self, h):
        return 500_000  # mW

    def nvmlDeviceGetClockInfo(self, h, which):
        return 1980 if which == 0 else 2619

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("U", (), {"gpu": 99, "memory": 40})()

    def nvmlDeviceGetTemperature(self, h, which):
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self.n += 1
        return 0x4 if self.n % 2 else 0x1  # sw_power_cap (throttled), then gpu_idle (not)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy_mj += 50_000
        return self.energy_mj


def test_nvml_sampler_with_a_fake_nvml(monkeypatch):
    from gpuscope.measure.device.nvml import NvmlSampler

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    with NvmlSampler(interval_s=0.01) as s:
        time.sleep(0.08)
    r = s.result()
    assert r["unavailable"] is None and r["throttled"] is True
    sm = r["summary"]
    assert sm["n_samples"] >= 3 and sm["power_w_median"] == 500.0 and sm["sm_clock_mhz_median"] == 1980
    assert sm["energy_source"] == "total_energy_counter" and sm["energy_j"] == 50.0
    assert 0 < sm["throttled_fraction"] < 1 and "sw_power_cap" in sm["throttle_reasons_seen"]
    assert any(x["throttled"] for x in r["samples"]) and not all(x["throttled"] for x in r["samples"])


def test_nvml_sampler_without_nvml(monkeypatch):
    from gpuscope.measure.device.nvml import NvmlSampler

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with NvmlSampler() as s:
        pass
    r = s.result()
    assert "pynvml" in r["unavailable"] and r["samples"] == [] and r["throttled"] is None


def test_host_costs_on_this_machine():
    import statistics

    from gpuscope.measure.host.costs import CPU_FAMILY_ITERS, CPU_PASSES, host_costs

    c = host_costs("cpu")
    assert 0 < c["host_launch_s"] < 1e-3 and c["host_forward_s"] >= 0 and c["host_step_s"] >= 0
    # generate's once-per-call work and the host probe are measured too (the catalog's setup_s was never)
    assert 0 <= c["host_setup_s"] < 0.05 and 0 < c["host_probe_s"] < 0.05
    assert len(c["host_detail"]["passes"]) == CPU_PASSES  # a CPU's passes (fewer than a GPU host's three)
    p = c["host_detail"]["passes"][0]
    # rounds of 6 decode steps each, every depth's decode steps, generate and prefill; the probe runs after each
    rounds = -(-CPU_FAMILY_ITERS // 6)
    assert len(p["prefill_forward_s"]) == 3 and p["rounds"] == rounds and len(p["host_probe_rounds_s"]) == rounds
    assert p["host_probe_s"] == pytest.approx(statistics.median(p["host_probe_rounds_s"]))
    assert c["host_detail"]["launch_spread_at_probe"] >= 0
    # the training probe after every round too: the speed the training costs are taken to
    assert len(p["train_probe_rounds_s"]) == rounds and c["host_detail"]["train_probe_s"] > 0


def test_host_costs_carry_the_catalogs_real_size_factor(monkeypatch):
    """host_launch_s = the tiny models' per-kernel slope x REAL_SIZE_LAUNCH_FACTOR (the catalog's 17.2 us is the
    first session's tiny 15.7 us x that factor); the forward intercept and the detail keep the tiny figure."""
    import gpuscope.measure.host.overhead as ho
    from gpuscope.estimate import ops as opsmod
    from gpuscope.estimate.engines import ENGINES, REAL_SIZE_LAUNCH_FACTOR
    from gpuscope.measure.host.costs import host_costs
    from gpuscope.specs.hf_config import spec_from_config

    def kernels(n):
        spec = spec_from_config(dict(ho.TINY["llama"], num_hidden_layers=n))
        return sum(o.kernels * o.count for o in opsmod.forward_ops(spec, 1, 1, 16, 2.0, 2.0, 2.0, head_tokens=1))

    per_layer = kernels(2) - kernels(1)
    other = kernels(1) - per_layer
    tiny = 15.7e-6
    monkeypatch.setattr(ho, "measure_family", lambda *a, **k: {
        "family": "llama", "layers": [2, 4, 8], "decode_forward_s": [1e-3, 2e-3, 4e-3],
        "forward_s": 0.68e-3, "layer_s": tiny * per_layer, "generate_step_s": 0.4e-3})
    c = host_costs("cpu")
    assert c["host_launch_s"] == pytest.approx(tiny * REAL_SIZE_LAUNCH_FACTOR)
    assert c["host_launch_s"] == pytest.approx(ENGINES["eager"].launch_s)  # the catalog's derivation, reproduced
    assert c["host_forward_s"] == pytest.approx(0.68e-3 - other * tiny)
    assert c["host_detail"]["launch_tiny_s"] == pytest.approx(tiny)


def _real_width_kernels(new: int, past: int) -> int:
    """Kernels the planner counts in one Llama-3.2-1B-wide layer of a forward over ``new`` tokens."""
    from gpuscope.estimate import ops as opsmod
    from gpuscope.measure.host.overhead import REAL_WIDTH
    from gpuscope.specs.hf_config import spec_from_config

    k = [sum(o.kernels * o.count for o in opsmod.forward_ops(spec_from_config(dict(REAL_WIDTH, num_hidden_layers=n)),
                                                              1, new, past, 2.0, 2.0, 2.0, head_tokens=1))
         for n in (1, 2)]
    return k[1] - k[0]


def test_host_costs_from_real_widths(monkeypatch):
    """Where the device runs apart from the host, host_launch_s and host_prefill_launch_s are the per-layer slopes
    of Llama-3.2-1B-wide decode and prefill forwards over the kernels the planner counts in such a layer (41 for
    a decode layer); the tiny models keep the forward intercept, and the detail the measured real/tiny ratio."""
    import gpuscope.measure.host.overhead as ho
    from gpuscope.measure.host.costs import host_costs

    assert _real_width_kernels(1, 128) == 41
    k_dec, k_pre = _real_width_kernels(1, 128), _real_width_kernels(128, 0)
    monkeypatch.setattr(ho, "measure_family", lambda *a, **k: {
        "family": "llama", "layers": [2, 4, 8], "decode_forward_s": [1e-3, 2e-3, 4e-3],
        "forward_s": 0.68e-3, "layer_s": 0.643e-3, "generate_step_s": 0.4e-3})

    def fake_real(dev, layers=(2, 4, 8), prompt=128, **kw):
        dec = [1e-3 + n * k_dec * 17.5e-6 for n in layers]
        pre = [2e-3 + n * k_pre * 19.3e-6 for n in layers]
        return {"layers": list(layers), "prompt": prompt, "decode_forward_s": dec, "prefill_forward_s": pre,
                "decode_layer_s": k_dec * 17.5e-6, "prefill_layer_s": k_pre * 19.3e-6}

    monkeypatch.setattr(ho, "measure_real_width", fake_real)
    c = host_costs("cpu", real_width=True)
    assert c["host_launch_s"] == pytest.approx(17.5e-6) and c["host_prefill_launch_s"] == pytest.approx(19.3e-6)
    tiny = 0.643e-3 / _tiny_layer_kernels()
    assert c["host_detail"]["real_size_launch_factor"] == pytest.approx(17.5e-6 / tiny)
    # a real-width fit that does not grow with depth is not used: the tiny figure x the catalog's factor instead
    monkeypatch.setattr(ho, "measure_real_width", lambda dev, **kw: dict(
        fake_real(dev), decode_forward_s=[5e-3, 4e-3, 6e-3]))
    c = host_costs("cpu", real_width=True)
    assert "host_prefill_launch_s" not in c and "do not grow" in c["host_detail"]["real_width"]["invalid"]


def test_host_costs_take_the_median_of_their_passes(monkeypatch):
    """Three passes of the tiny fit, one of them invalid (no growth with depth): each cost is the median of the
    valid ones, and launch_spread says how far apart they were."""
    import gpuscope.measure.host.overhead as ho
    from gpuscope.estimate.engines import REAL_SIZE_LAUNCH_FACTOR
    from gpuscope.measure.host.costs import host_costs

    k = _tiny_layer_kernels()
    slopes = iter([15e-6 * k, -1e-5, 21e-6 * k])
    monkeypatch.setattr(ho, "measure_family", lambda *a, **kw: (lambda ls: {
        "family": "llama", "layers": [2, 4, 8], "forward_s": 0.7e-3, "layer_s": ls, "generate_step_s": 0.4e-3,
        "decode_forward_s": [1e-3, 2e-3, 4e-3] if ls > 0 else [3e-3, 2e-3, 4e-3]})(next(slopes)))
    c = host_costs("cpu", passes=3)
    d = c["host_detail"]
    assert d["valid_passes"] == 2 and len(d["passes"]) == 3
    assert c["host_launch_s"] == pytest.approx(18e-6 * REAL_SIZE_LAUNCH_FACTOR)  # median of two = their mean
    assert d["launch_spread"] == pytest.approx(6 / 18)


def _tiny_layer_kernels() -> int:
    import gpuscope.measure.host.overhead as ho
    from gpuscope.estimate import ops as opsmod
    from gpuscope.specs.hf_config import spec_from_config

    k = [sum(o.kernels * o.count for o in opsmod.forward_ops(spec_from_config(dict(ho.TINY["llama"],
                                                                                    num_hidden_layers=n)),
                                                              1, 1, 16, 2.0, 2.0, 2.0, head_tokens=1)) for n in (1, 2)]
    return k[1] - k[0]


def test_measure_real_width_runs_and_grows_with_depth(monkeypatch):
    """The real-width fit itself on CPU, at narrower widths so it takes a second: one decode and one prefill time
    per depth, each growing with the layer count (on CPU the device's own work grows too)."""
    import gpuscope.measure.host.overhead as ho
    from gpuscope.measure.device.device import Device

    monkeypatch.setattr(ho, "REAL_WIDTH", dict(ho.REAL_WIDTH, hidden_size=128, intermediate_size=256,
                                              num_attention_heads=4, num_key_value_heads=2, head_dim=32))
    r = ho.measure_real_width(Device("cpu"), layers=(1, 4), prompt=32, iters=3)
    assert len(r["decode_forward_s"]) == len(r["prefill_forward_s"]) == 2
    assert r["decode_layer_s"] > 0 and r["prefill_layer_s"] > 0


def test_host_costs_refuse_a_fit_that_does_not_grow_with_depth(monkeypatch):
    """A flat fit (as one H200 calibrate run gave: 42 ms intercept, slope <= 0) must not become host costs."""
    import gpuscope.measure.host.overhead as ho
    from gpuscope.measure.host.costs import host_costs

    monkeypatch.setattr(ho, "measure_family", lambda *a, **k: {
        "family": "llama", "layers": [2, 4, 8], "decode_forward_s": [0.043, 0.041, 0.042], "forward_s": 0.0419,
        "layer_s": -1e-5, "generate_step_s": 0.0})
    c = host_costs("cpu")
    assert "host_launch_s" not in c and "do not grow" in c["host_invalid"]


def test_energy_per_token_and_per_step_with_a_fake_nvml(monkeypatch):
    """J/token of the generate phase and J per training step come from NVML's energy counter read around exactly
    those repeats/steps (the fake counter advances 50 J per read: 50 J per phase); decode_weights_gbs is the issue's
    achieved bandwidth, weights bytes x decode steps per second."""
    from gpuscope.measure.llm import infer as llm_infer
    from gpuscope.measure.llm import train as llm_train
    from gpuscope.measure.device import nvml

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    monkeypatch.setattr(nvml, "device_sampler", lambda dev, interval_s=0.05: nvml.NvmlSampler(interval_s, index=0))
    r = llm_infer.run_infer({"kind": "infer", "model": "tiny-llama", "config": TINY_LLAMA, "batch": 2, "prompt": 8,
                             "gen": 32, "dtype": "fp32", "repeats": 2, "decode_iters": 2, "device": "cpu"})
    assert r["status"] == "ok", r
    assert r["generate_energy_j"] == 50.0 and r["energy_source"] == "total_energy_counter"
    assert r["j_per_token"] == pytest.approx(50.0 / (2 * 2 * 32))  # 31 decode steps: TPOT well above the noise
    assert r["decode_weights_gbs"] == pytest.approx(r["weights_bytes"] / r["tpot_s"] / 1e9)
    t = llm_train.run_train({"kind": "train", "model": "tiny-llama", "config": TINY_LLAMA, "micro_batch": 2,
                             "seq": 16, "precision": "fp32", "recompute": "none", "steps": 2, "warmup": 1,
                             "device": "cpu"})
    assert t["status"] == "ok", t
    assert t["step_energy_j"] == 25.0 and t["j_per_token"] == pytest.approx(50.0 / (2 * 2 * 16))


class _FakeEventDevice:
    """A device with events whose clock only moves when the timed work runs: ``fn(i)`` advances it by ``dur[i]``."""

    def __init__(self, dur):
        self.now, self.dur, self.syncs, self.log = 0.0, dur, 0, []
        dev = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = dev.now
                dev.log.append("event")

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3

        self._mod = type("Mod", (), {"Event": Event})

    def _events_ok(self):
        return True

    def synchronize(self):
        self.syncs += 1
        self.log.append("sync")

    def work(self, i):
        self.now += self.dur[i % len(self.dur)]
        self.log.append("work")


def test_matmul_iterations_are_queued_without_a_synchronize_between_them():
    """On devices with events the timed iterations run back to back (a synchronize before each would start every
    one on an idle GPU and count the launch and the clock ramp): one synchronize per batch, each iteration's own
    event pair, the warm-up dropped."""
    from gpuscope.measure.micro.timing import Settings, time_queued

    dev = _FakeEventDevice([1e-3, 2e-3, 3e-3])
    flushed = []
    times = time_queued(dev, dev.work, Settings(warmup=2, min_iters=10, min_time_s=0.0, max_time_s=9.0),
                        before=flushed.append)
    assert len(times) == 10 and flushed == list(range(12))  # flush before every iteration, warm-up included
    assert times == pytest.approx([[1e-3, 2e-3, 3e-3][i % 3] for i in range(2, 12)])
    assert dev.syncs == 2  # after the warm-up, after the one batch
    timed = dev.log[dev.log.index("sync") + 1:]
    assert "sync" not in timed[:-1]
    # min_time_s is reached with more batches, each still without a synchronize inside
    dev = _FakeEventDevice([1e-3])
    times = time_queued(dev, dev.work, Settings(warmup=0, min_iters=4, min_time_s=0.05, max_time_s=9.0))
    assert sum(times) >= 0.05 and dev.syncs < len(times) / 4


def test_achievable_rate_is_the_median_of_the_five_fastest_burst_iterations(monkeypatch):
    from gpuscope.measure.micro import timing as micro

    dev = _FakeEventDevice([5e-3, 1e-3, 4e-3, 2e-3, 9e-3, 3e-3, 8e-3])
    monkeypatch.setattr(micro.time, "sleep", lambda s: dev.log.append(f"idle {s}"))
    clocks = iter([1980.0, 1755.0])
    times, clk = micro.burst_times(dev, dev.work, bursts=2, iters=7, idle_s=1.0, probe=lambda: next(clocks))
    assert len(times) == 14 and clk == [1980.0, 1755.0]
    assert dev.log.count("idle 1.0") == 2 and dev.log[dev.log.index("idle 1.0") - 1] == "sync"
    fastest = sorted(times)[:5]
    assert fastest == pytest.approx([1e-3, 1e-3, 2e-3, 2e-3, 3e-3])  # the median of these five is 2 ms


def test_wave_quantised_shapes_fill_whole_waves():
    from gpuscope.measure.micro.matmul import matmul_shapes, wave_shapes

    shapes = wave_shapes(132)
    assert (1536, 2816, 6144) in shapes and (2816, 1536, 6144) in shapes  # H200: one wave of 128x256 tiles
    import math

    def whole_waves(m, n):
        return m % 128 == 0 and n % 256 == 0 and (m // 128) * (n // 256) % 132 == 0

    for m, n, k in shapes:  # each shape or its transpose is made of whole 128x256 tiles filling whole waves
        assert whole_waves(m, n) or whole_waves(n, m), (m, n)
        assert 1024 <= m <= 20480 and 1024 <= n <= 20480 and math.log2(k) > 11
    from types import SimpleNamespace

    sweep = matmul_shapes("sweep", SimpleNamespace(type="cuda"), sms=132)
    assert set(shapes) <= set(sweep) and len(sweep) == len(set(sweep))
    assert not set(shapes) <= set(matmul_shapes("sweep", SimpleNamespace(type="cuda")))


def test_micro_matmul_reports_the_achievable_rate(tmp_path):
    r = run("bench", "micro", "--device", "cpu", "--dtype", "fp32", "--shapes", "64x64x64,128x64x96",
            "--db", str(tmp_path / "r.sqlite"), "--json")
    assert r.returncode == 0, r.stderr
    (m,) = json.loads(r.stdout)["measurements"]
    res = m["result"]
    ach = res["achievable"]
    assert len(ach) == 2 and {tuple(a["shape"]) for a in ach} == {(64, 64, 64), (128, 64, 96)}
    for a in ach:
        mm, nn, kk = a["shape"]
        assert a["tflops"] == pytest.approx(2 * mm * nn * kk / a["time_s"] / 1e12)
        assert a["time_s"] == pytest.approx(sorted(a["time_s_fastest"])[2]) and len(a["time_s_fastest"]) == 5
    assert res["tflops_achievable"] == max(a["tflops"] for a in ach)
    r = run("bench", "micro", "--device", "cpu", "--dtype", "fp32", "--shapes", "64x64x64",
            "--db", str(tmp_path / "r.sqlite"))
    assert "achievable" in r.stdout + r.stderr and "MAMF" in r.stdout + r.stderr, r.stdout + r.stderr


def test_bench_with_a_config_file_stores_the_config_inline(tmp_path):
    """--model path/to/config.json: the stored case holds the config itself under the file's name (a device path
    alone could not be re-planned or re-run elsewhere), and `results compare` plans it."""
    cfg = tmp_path / "tiny_llama.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    db = str(tmp_path / "r.sqlite")
    r = run("bench", "train", "--model", str(cfg), "--micro-batch", "2", "--seq", "16", "--steps", "1", "--warmup", "1",
            "--device", "cpu", "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    (m,) = json.loads(r.stdout)["measurements"]
    assert m["key"].startswith("train/tiny_llama/mb2-s16")
    with Store.open(db) as st:
        (rec,) = st.all("train")
    assert rec["config"]["config"] == TINY_LLAMA and rec["config"]["model"] == "tiny_llama"
    assert str(tmp_path) not in json.dumps(rec["config"])


def test_tpot_below_the_noise_is_unresolved_not_negative():
    """(E2E - TTFT) / (G - 1) with the E2E median under the TTFT median (4 tokens on a loaded 2-core CI machine made
    it negative, and the headline crashed on the missing rate): no TPOT, a reason, and a headline that says so."""
    from gpuscope.workloads import headline
    from gpuscope.explain.compare import compare_record
    from gpuscope.measure.llm.infer import tpot_fields

    ok = tpot_fields(0.010, 0.016, 4, 2, 3_000_000_000)
    assert ok["tpot_s"] == pytest.approx(0.002) and ok["decode_tokens_per_s"] == pytest.approx(1000)
    assert ok["decode_weights_gbs"] == pytest.approx(1500) and "tpot_unresolved" not in ok
    bad = tpot_fields(0.010, 0.0099, 4, 2, 3_000_000_000)
    assert bad["tpot_s"] is None and bad["decode_tokens_per_s"] is None and "noise" in bad["tpot_unresolved"]
    assert tpot_fields(0.010, 0.010, 1, 2, 1)["tpot_s"] is None
    r = {"status": "ok", "kind": "infer", "ttft_s": 0.010, **bad}
    assert "tpot unresolved" in headline(r) and "ttft 10.00 ms" in headline(r)
    rec = {"case": {"kind": "infer", "model": "tiny-llama", "config": TINY_LLAMA, "batch": 2, "prompt": 16, "gen": 4,
                    "dtype": "fp32", "device": "cpu"},
           "result": {**r, "peak_generate_bytes": 1_000_000}, "case_id": "infer/tiny-llama/x"}
    rows = compare_record(rec, load_hardware("h200"))
    assert [x.metric for x in rows] == ["peak_bytes", "prefill_s"]


def _train_fit(fwd, bwd, opt=(2e-4, 8e-6)):
    """A measure_train_family result lying exactly on lines: forward/backward (intercept, per layer) in seconds."""
    layers, tensors = [2, 4, 8], [21, 39, 75]
    return {"layers": layers, "param_tensors": tensors,
            "forward_s": [fwd[0] + fwd[1] * n for n in layers], "backward_s": [bwd[0] + bwd[1] * n for n in layers],
            "optimizer_s": [opt[0] + opt[1] * t for t in tensors],
            "forward_fixed_s": fwd[0], "forward_layer_s": fwd[1], "backward_fixed_s": bwd[0],
            "backward_layer_s": bwd[1], "optimizer_fixed_s": opt[0], "optimizer_tensor_s": opt[1]}


def _fake_train_fits(monkeypatch, full_fwd: float, launch: float) -> dict:
    """measure_train_family replaced by Llama fits lying exactly on lines, per kernel (42 a layer) in units of
    ``launch``: forward 2 and backward 4 without recompute, forward ``full_fwd`` and backward 9 with it."""
    import gpuscope.measure.host.overhead as ho

    fits = {"none": _train_fit((1.5e-3, 42 * 2 * launch), (0.5e-3, 42 * 4 * launch)),
            "full": _train_fit((1.5e-3, 42 * full_fwd * launch), (0.5e-3, 42 * 9 * launch))}
    monkeypatch.setattr(ho, "measure_train_family", lambda fam, dev, precision, recompute, steps, **kw:
                        fits[recompute])
    return fits


def test_calibrate_writes_the_training_host_costs_and_the_planner_uses_them(monkeypatch, tmp_path):
    """`hardware calibrate --host` derives roofline.TrainHost for this machine: per-layer slopes / the planner's
    kernels per layer / the launch cost; intercepts whole. The TOML carries them and a plan with
    that TOML uses them (a host twice as slow per training kernel doubles that part of a host-bound step)."""
    from gpuscope.estimate.engines import TRAIN_HOST, train_host_for
    from gpuscope.estimate.train import estimate_train
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.measure.host.costs import train_host_costs
    from gpuscope.specs.models import load_model

    launch = 10e-6
    fits = _fake_train_fits(monkeypatch, 3.0, launch)
    c = train_host_costs(launch, "cpu")
    assert c["host_train_fwd"] == pytest.approx(2.0) and c["host_train_bwd"] == pytest.approx(4.0)
    # full recompute: the forward's extra (3 - 2 per kernel, 42 kernels) is the checkpoint's, per layer; the
    # backward's (9 - 4) the re-forward's, per kernel
    assert c["host_train_recompute"] == pytest.approx(5.0) and c["host_train_ckpt_layer"] == pytest.approx(42.0)
    assert c["host_train_fwd_fixed"] == pytest.approx(1.5e-3 / launch) and c["host_train_other_kernels"] == 0.0
    assert c["host_opt_fixed"] == pytest.approx(20.0) and c["host_opt_tensor"] == pytest.approx(0.8)
    text = calibration_toml("NVIDIA H200", "cuda", {"memory_bw_gbs": 4100.0, "host_launch_s": 17.2e-6,
                                                    **{k: v for k, v in c.items() if k != "host_train_detail"}},
                            None, "Mode: test.")
    assert "host_train_bwd = 4" in text
    path = tmp_path / "h200.toml"
    path.write_text(text)
    hw = load_hardware(str(path))
    th = train_host_for(hw)
    assert (th.fwd, th.bwd, th.recompute, th.ckpt_layer) == pytest.approx((2.0, 4.0, 5.0, 42.0))
    m = load_model("llama-3.2-1b")
    base = estimate_train(m, load_hardware("h200"), micro_batch=1, seq=128).time["host_s_per_micro_batch"]
    mine = estimate_train(m, hw, micro_batch=1, seq=128).time["host_s_per_micro_batch"]
    assert mine > 1.5 * base and TRAIN_HOST.fwd < th.fwd
    # a fit that does not grow with depth writes nothing
    fits["full"] = fits["none"]
    assert "host_train_fwd" not in train_host_costs(launch, "cpu")


def test_a_noisy_checkpoint_split_keeps_the_whole_recompute_per_kernel(monkeypatch):
    """When full recompute's forward reads no slower than without (the host's noise), the checkpoint's per-layer
    cost is not fitted: the whole extra goes per kernel, as calibrations before session 9 wrote it."""
    from gpuscope.measure.host.costs import train_host_costs

    _fake_train_fits(monkeypatch, 1.8, 10e-6)
    c = train_host_costs(10e-6, "cpu")
    assert c["host_train_ckpt_layer"] == 0.0 and c["host_train_recompute"] == pytest.approx(4.8)  # 5 - 0.2


def test_a_calibration_from_before_the_split_plans_as_it_did():
    """A hardware TOML written before session 9 has the whole recompute per kernel and the per-call costs net of
    the tiny Llama's 22 kernels outside its layers: read back, the checkpoint's per-layer cost is 0 (not the
    default's) and those 22 kernels are added back, so a Llama plan is what it was."""
    from gpuscope.estimate.engines import train_host_for

    old = Path(__file__).resolve().parents[1] / "research" / "results" / "2026-11-30-h200-h" / \
        "call5_nvidia-h200-20261130T064124Z-3e2825.toml"
    from gpuscope.estimate.train import layer_kernels, train_forward_ops, train_host_s
    from gpuscope.specs.hf_config import spec_from_config

    th = train_host_for(load_hardware(str(old)))
    assert th.ckpt_layer == 0.0 and th.other_kernels == 22.0 and th.recompute == pytest.approx(3.8389, rel=1e-4)
    spec = spec_from_config(TINY_LLAMA)
    ops = train_forward_ops(spec, 2, 64, 2.0, 4.0)
    in_layers, rest = layer_kernels(ops, spec.num_layers)
    h = train_host_s(ops, spec, 1.0, True, th)
    assert rest == 22 and h["forward"] == pytest.approx(th.fwd_fixed + th.fwd * (in_layers + rest))
    assert h["recompute"] == pytest.approx(th.recompute * in_layers)


def test_calibrate_host_cli_writes_decode_and_training_host_keys(monkeypatch, tmp_path):
    """`gpuscope hardware calibrate --host`: the decode-host fit and the training-host fit both land in the TOML
    (measurements faked: this test is about the wiring, the fits have their own tests)."""
    import tomllib

    import gpuscope.measure.host.costs as cal

    monkeypatch.setattr(cal, "host_costs", lambda device=None: {"host_launch_s": 10e-6, "host_forward_s": 4e-4,
                                                                "host_step_s": 3e-4})
    _fake_train_fits(monkeypatch, 3.0, 10e-6)
    out = tmp_path / "cal.toml"
    r = calibrate_cli("--quick", "--device", "cpu", "--dtype", "fp32", "--host", "--db", str(tmp_path / "c.sqlite"),
                      "--out", str(out))
    assert r.exit_code == 0, r.output
    m = tomllib.loads(out.read_text())["measured"]
    assert m["host_launch_s"] == pytest.approx(10e-6) and m["host_train_bwd"] == pytest.approx(4.0)
    assert m["host_train_recompute"] == pytest.approx(5.0) and m["host_train_ckpt_layer"] == pytest.approx(42.0)
    # the fits themselves are kept in the results store, one measurement of kind "host" beside the micro results
    from gpuscope.store.db import Store

    with Store.open(tmp_path / "c.sqlite") as st:
        rows = st.all("host")
    assert len(rows) == 1 and rows[0]["status"] == "ok"
    assert rows[0]["result"]["host"]["host_launch_s"] == pytest.approx(10e-6)
    assert rows[0]["result"]["train"]["host_train_bwd"] == pytest.approx(4.0)

    # with the fit's detail, the training units are per tiny-model launch: x host_launch_s (real-size factor
    # included) the planner's training host carries the same factor as its decode host
    monkeypatch.setattr(cal, "host_costs", lambda device=None: {
        "host_launch_s": 11e-6, "host_forward_s": 4e-4, "host_step_s": 3e-4, "host_detail": {"launch_tiny_s": 10e-6}})
    r = calibrate_cli("--quick", "--device", "cpu", "--dtype", "fp32", "--host", "--db", str(tmp_path / "c.sqlite"),
                      "--out", str(out))
    assert r.exit_code == 0, r.output
    m = tomllib.loads(out.read_text())["measured"]
    assert m["host_launch_s"] == pytest.approx(11e-6) and m["host_train_bwd"] == pytest.approx(4.0)
    assert "launch_tiny_s" not in m and "10.0 us x the catalog's real-size factor" in r.output

    # passes further apart than HOST_SPREAD_WARN: written (their median), and said to come from a moving host
    monkeypatch.setattr(cal, "host_costs", lambda device=None: {
        "host_launch_s": 11e-6, "host_forward_s": 4e-4, "host_step_s": 3e-4,
        "host_detail": {"launch_tiny_s": 10e-6, "valid_passes": 3, "launch_spread": 0.28}})
    r = calibrate_cli("--quick", "--device", "cpu", "--dtype", "fp32", "--host", "--db", str(tmp_path / "c.sqlite"),
                      "--out", str(out))
    assert r.exit_code == 0 and "median of 3 passes, which spread 28%" in r.output
    assert "the passes disagree" in r.output and "steal per pass" not in r.output
    monkeypatch.setattr(cal, "host_costs", lambda device=None: {
        "host_launch_s": 11e-6, "host_forward_s": 4e-4, "host_step_s": 3e-4,
        "host_detail": {"launch_tiny_s": 10e-6, "valid_passes": 2, "launch_spread": 0.4,
                        "passes": [{"host_load": {"steal_fraction": 0.21}}, {"host_load": {}}]}})
    r = calibrate_cli("--quick", "--device", "cpu", "--dtype", "fp32", "--host", "--db", str(tmp_path / "c.sqlite"),
                      "--out", str(out))
    assert r.exit_code == 0 and "(hypervisor steal per pass: 21%, ?)" in r.output
    assert "per pass, tiny-model launch cost" not in r.output  # passes without probes (older detail): not claimed
    monkeypatch.setattr(cal, "host_costs", lambda device=None: {
        "host_launch_s": 11e-6, "host_forward_s": 4e-4, "host_step_s": 3e-4,
        "host_detail": {"launch_tiny_s": 10e-6, "valid_passes": 2, "launch_spread": 0.4,
                        "passes": [{"launch_tiny_s": 9e-6, "host_probe_s": 2.0e-3},
                                   {"launch_tiny_s": 13e-6, "host_probe_s": 3.1e-3}]}})
    r = calibrate_cli("--quick", "--device", "cpu", "--dtype", "fp32", "--host", "--db", str(tmp_path / "c.sqlite"),
                      "--out", str(out))
    assert "per pass, tiny-model launch cost / host probe: 9.0 us / 2.00 ms, 13.0 us / 3.10 ms" in r.output


def test_calibrate_says_when_the_host_reads_far_from_its_earlier_calibrations(monkeypatch, tmp_path):
    """`hardware calibrate --host` with a results store that holds this machine's earlier calibrations: their
    median probe beside this one is kept with the fits, and a probe 60% slower is said on stderr (one that is
    within 25% is not)."""
    import gpuscope.measure.host.costs as cal
    from gpuscope.store.db import Store

    _fake_train_fits(monkeypatch, 3.0, 10e-6)
    db = str(tmp_path / "c.sqlite")

    def calibrate(probe_s):
        monkeypatch.setattr(cal, "host_costs", lambda device=None: {
            "host_launch_s": 10e-6, "host_forward_s": 4e-4, "host_step_s": 3e-4, "host_probe_s": probe_s})
        r = calibrate_cli("--quick", "--device", "cpu", "--dtype", "fp32", "--host", "--db", db)
        assert r.exit_code == 0, r.output
        return r.output

    for probe in (1.0e-3, 1.1e-3, 0.9e-3):  # too little history to say anything yet
        assert "earlier calibrations" not in calibrate(probe)
    assert "earlier calibrations" not in calibrate(1.2e-3)  # +20% against their 1.0 ms median
    out = calibrate(1.68e-3)  # the median of the four earlier ones is 1.05 ms
    assert ("this calibration's probe read 1.68 ms, 60% slower than the median of this machine's 4 earlier "
            "calibrations (1.05 ms)") in out.replace("\n", " ")
    with Store.open(db) as st:
        rows = st.all("host")
    assert [("history" in r["result"]) for r in rows] == [False, False, False, True, True]
    assert rows[-1]["result"]["history"]["ratio"] == pytest.approx(1.6)


def test_bench_json_carries_the_calibrations_host_history(tmp_path, capsys):
    """bench --json: the run's calibration history (cli/calibrate.say_history sets it on the session) is a key of
    the output, beside the calibration's path; without one, no key."""
    import time

    from gpuscope.cli.bench_run import Session, finish

    s = Session(str(tmp_path / "r.sqlite"), "bench all", False, as_json=True)
    finish(s, time.perf_counter())
    assert "calibration_host_history" not in json.loads(capsys.readouterr().out)
    s.host_history = {"calibrations": 4, "median_probe_s": 1.05e-3, "probe_s": 1.68e-3, "ratio": 1.6}
    finish(s, time.perf_counter())
    assert json.loads(capsys.readouterr().out)["calibration_host_history"]["ratio"] == 1.6
    s.close()


def test_a_burst_holds_a_quarter_second_of_work_at_most(monkeypatch):
    """Long shapes (or a slow device) get fewer burst iterations, never fewer than the five the median needs."""
    from gpuscope.measure.micro import matmul as micro
    from gpuscope.measure.device.device import Device

    seen = []

    def fake_burst(dev, fn, bursts, iters, idle_s, before=None, probe=None):
        seen.append(iters)
        return [0.1] * (bursts * iters), []

    monkeypatch.setattr(micro, "burst_times", fake_burst)
    rows = [{"m": 64, "n": 64, "k": 64, "tflops": 1.0, "time_s": 0.1},
            {"m": 32, "n": 32, "k": 32, "tflops": 0.5, "time_s": 0.001}]
    out = micro._achievable(Device("cpu"), "fp32", rows, dict(micro.BURST, idle_s=0.0), 2, micro._mm("fp32", None),
                            micro._operands, micro._generator(Device("cpu"), 0), None, None)
    assert seen == [5, 40]  # 0.25 s / 0.1 s -> 3, raised to 5; 0.25 s / 1 ms -> 250, capped at 40
    assert [a["iterations"] for a in out] == [15, 120]


def test_headline_says_when_e2e_repeats_spread():
    """E2E repeats that spread more than 20% of their median (an eager 8B run on the lent H200 host read 1.58 / 2.32
    / 2.78 s) make the headline say the run is noisy; a tight run's headline does not."""
    from gpuscope.workloads import headline
    from gpuscope.workloads.infer import NOISY_SPREAD

    r = {"status": "ok", "kind": "infer", "ttft_s": 0.064, "tpot_s": 0.0358, "decode_tokens_per_s": 27.9}
    assert "noisy" not in headline({**r, "e2e_spread": 0.05}) and "noisy" not in headline(r)
    assert "noisy: E2E repeats spread 52%" in headline({**r, "e2e_spread": (2.78 - 1.58) / 2.32})
    assert "noisy" not in headline({**r, "e2e_spread": NOISY_SPREAD})
    noisy = {**r, "e2e_spread": 0.5}
    assert "(more --repeats or --min-time, a quiet host)" in headline(noisy)
    assert "(the median of 80 is kept)" in headline({**noisy, "e2e_repeats": 80})  # a --min-time run's tails
