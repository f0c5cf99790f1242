"""Model CPU offload, where its time goes (issue 25: `plan diffusion --offload model` planned SDXL 1024 x 2 steps at
2.33 s, measured 4.79 s on an H200 VM; research/results/2026-12-02-h200-c/diffusion.md).

One process builds the SDXL text encoders, UNet and VAE with random weights from the preset as `bench diffusion`
does (measure/diffusion/components.load, offload="model": accelerate's cpu_offload_with_hook chain), then:
1. ``pipeline``: CALLS pipeline calls as measure/diffusion/loop.measure_pipeline runs one (text, denoise, vae
   phases, each between two synchronizes), with every ``Module.to`` of a top-level module (the hooks' moves in and
   out, the VAE's fp32 upcast and cast back) and accelerate's ``clear_device_cache`` timed on its own, each move
   with the process's minor page faults (getrusage), its RSS change and glibc's mallinfo2 (heap / mmapped bytes).
   Per phase: its time, the moves', the cache clears', and the rest (forwards, hook overhead).
2. ``unet_rounds``: the UNet moved in and out with ``module.to`` 3x, then 1 round tensor by tensor per size class
   (< 128 KiB, 128 KiB - 32 MiB, >= 32 MiB: glibc's initial and largest dynamic mmap thresholds on 64-bit).
3. ``touch``: 1 GiB of new host memory written twice with one thread (first touch of fresh pages, then resident).
4. ``env``: the same script again in a child process (``--child``) with MALLOC_MMAP_THRESHOLD_=32 MiB and
   MALLOC_TRIM_THRESHOLD_=1 TiB (glibc keeps freed heap memory resident): the pipeline calls and the UNet rounds
   again (2 calls, 3 rounds), as far as its time allows.
Hypotheses: (a) moves out land in fresh host pages whose first touch is slow on this VM (faults ~ bytes / 4 KiB
on the slow moves, none on the fast ones; the env child fast after its first move); (b) the hooks move more than
the plan counts (extra moves, clear_device_cache costs, the VAE's host-side upcast); (c) moves in slower right
after the module was written out (their rate in the pipeline against the rounds').
Output: $OUT/gpu_offload_probe/offload_probe.json (both processes), packed into $OUT/gpu_offload_probe/
gpu_offload_probe.tgz with run.out. Budget 80 s wall (imports and builds ~15 s a process).
usage: PYTHONPATH=src python3 research/scripts/gpu_offload_probe.py [--tiny]   (--tiny: tiny folder, CPU, fp32)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tarfile
import time
from pathlib import Path

T0 = time.perf_counter()
LIMIT_S = float(os.environ.get("GS_OFFLOAD_LIMIT", 74.0))  # a few seconds of the budget (80 s) left for packing
CLASSES = ((0, 128 << 10, "lt128k"), (128 << 10, 32 << 20, "128k_32m"), (32 << 20, 1 << 62, "ge32m"))
TOPS = {"UNet2DConditionModel", "AutoencoderKL", "CLIPTextModel", "CLIPTextModelWithProjection"}


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    try:
        lib = ctypes.CDLL("libc.so.6")
        lib.mallinfo2.restype = _Mallinfo2
        return lib
    except (OSError, AttributeError):
        return None


LIBC = _libc()


def host_state() -> dict:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = {"minflt": ru.ru_minflt, "majflt": ru.ru_majflt, "rss": None}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    if LIBC is not None:
        mi = LIBC.mallinfo2()
        out.update(heap=mi.arena, mmapped=mi.hblkhd, heap_free=mi.fordblks)
    return out


def delta(a: dict, b: dict) -> dict:
    return {k: (b[k] - a[k]) if a.get(k) is not None and b.get(k) is not None else None for k in a}


class Probe:
    def __init__(self, torch, dev):
        self.torch, self.dev, self.log, self.tag = torch, dev, [], {}
        self.cuda = dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def timed(self, fn, **rec):
        self.sync()
        h0, t0 = host_state(), time.perf_counter()
        out = fn()
        self.sync()
        s = time.perf_counter() - t0
        h1 = host_state()
        r = {**self.tag, **rec, "s": s, **delta(h0, h1), **{f"after_{k}": v for k, v in h1.items()
                                                           if k in ("rss", "heap", "mmapped", "heap_free")}}
        if r.get("bytes") and s > 0:
            r["gbs"] = r["bytes"] / s / 1e9
        self.log.append(r)
        return out


def nbytes(m) -> int:
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in m.parameters()}.values())


def patch(probe: Probe) -> None:
    """Every Module.to of a top-level module and accelerate's clear_device_cache, timed and logged."""
    import accelerate.hooks as ah
    import torch

    orig_to, orig_clear = torch.nn.Module.to, ah.clear_device_cache

    def to(self, *a, **k):
        if type(self).__name__ not in TOPS:
            return orig_to(self, *a, **k)
        p = next(self.parameters())
        src = f"{p.device.type}/{str(p.dtype).split('.')[-1]}"
        target = " ".join(str(x) for x in (*a, *k.values()))
        return probe.timed(lambda: orig_to(self, *a, **k), what="to", module=type(self).__name__, src=src,
                           target=target, bytes=nbytes(self))

    def clear(*a, **k):
        return probe.timed(lambda: orig_clear(*a, **k), what="clear_device_cache")

    torch.nn.Module.to = to
    ah.clear_device_cache = clear


def pipeline_calls(probe: Probe, mods, case: dict, calls: int) -> list[dict]:
    import torch

    from gpuscope.measure.diffusion import loop
    from gpuscope.measure.diffusion.components import denoiser_for, encode_all, settings, vae_upcast
    from gpuscope.measure.diffusion.inputs import encoder_inputs

    t = settings(case)
    gen = torch.Generator(device=probe.dev).manual_seed(0)
    sched, den = loop.scheduler(mods), denoiser_for(mods, t, gen)
    upcast = vae_upcast(case, mods)
    inputs = {n: encoder_inputs(e, t["t5_tokens"], t["batch"], gen) for n, e in mods.encoders.items()}
    phases = []
    for i in range(calls):
        if time.perf_counter() - T0 > LIMIT_S - 8:
            break
        lat = {}
        steps = {"text": lambda: encode_all(mods, inputs, t),
                 "denoise": lambda: lat.setdefault("z", loop.denoise(den, sched, t["steps"])),
                 "vae": lambda: loop.finish(mods, loop.decode_as_pipeline(
                     mods.vae, loop.vae_input(den, lat["z"], upcast), t["frames"], None, upcast))}
        for name, fn in steps.items():
            probe.tag = {"part": "pipeline", "call": i, "phase": name}
            n0 = len(probe.log)
            with torch.inference_mode():
                probe.timed(fn, what="phase")
            inner = probe.log[n0:-1]
            ph = probe.log[-1]
            ph["moves_s"] = sum(r["s"] for r in inner if r["what"] == "to")
            ph["clear_s"] = sum(r["s"] for r in inner if r["what"] == "clear_device_cache")
            ph["rest_s"] = ph["s"] - ph["moves_s"] - ph["clear_s"]
            phases.append(ph)
    return phases


def unet_rounds(probe: Probe, m, rounds: int = 3, class_rounds: int = 1) -> None:
    import torch

    for i in range(rounds):
        for target in (probe.dev, "cpu"):
            if time.perf_counter() - T0 > LIMIT_S - 4:
                return
            probe.tag = {"part": "unet_rounds", "round": i}
            m.to(target)
    params = list({id(p): p for p in m.parameters()}.values())
    for i in range(class_rounds):
        for target in (probe.dev, torch.device("cpu")):
            for lo, hi, name in CLASSES:
                if time.perf_counter() - T0 > LIMIT_S - 3:
                    return
                ps = [p for p in params if lo <= p.numel() * p.element_size() < hi]
                probe.tag = {"part": "class_rounds", "round": i}

                def move(ps=ps, target=target):
                    with torch.no_grad():
                        for p in ps:
                            p.data = p.data.to(target)

                probe.timed(move, what="to", module=f"unet[{name}]", target=str(target), tensors=len(ps),
                            bytes=sum(p.numel() * p.element_size() for p in ps))


def touch(probe: Probe, n: int) -> None:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a pageable D2H copy writes its destination from the calling thread
    x = torch.empty(n, dtype=torch.uint8)
    probe.tag = {"part": "touch"}
    for k in ("first", "resident"):
        probe.timed(lambda: x.fill_(1), what=f"fill_{k}", bytes=n)
    del x
    torch.set_num_threads(threads)


def measure(tiny: bool, folder_root: Path, child: bool = False) -> dict:
    import torch

    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.diffusion.components import load

    dev = Device(pick_device("cpu" if tiny else None))
    probe = Probe(torch, dev.torch_device)
    patch(probe)
    model = str(folder_root / "tiny-sdxl") if tiny else "sdxl"
    size = 32 if tiny else 1024
    case = {"model": model, "component": "pipeline", "dtype": "fp32" if tiny else "fp16", "offload": "model",
            "batch": 1, "height": size, "width": size, "steps": 2, "device": "cpu" if tiny else None}
    from gpuscope.measure.diffusion.components import folder_of, pipeline_spec

    torch.manual_seed(0)
    probe.tag = {"part": "load"}
    t_load = time.perf_counter()
    mods = load(case, folder_of(pipeline_spec(model)), dev)
    out = {"device": dev.name, "device_name": dev.device_name(), "torch": torch.__version__,
           "env": {k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")},
           "load_s": time.perf_counter() - t_load, "weights_bytes": mods.info.get("weights_bytes"),
           "unet_bytes_by_class": {n: sum(p.numel() * p.element_size() for p in mods.denoiser.parameters()
                                          if lo <= p.numel() * p.element_size() < hi) for lo, hi, n in CLASSES}}
    out["phases"] = pipeline_calls(probe, mods, case, 2 if child else 3)
    unet_rounds(probe, mods.denoiser, class_rounds=0 if child else 1)
    if not child and time.perf_counter() - T0 < LIMIT_S - 3:
        touch(probe, (1 << 20) if tiny else (1 << 30))
    out["log"] = probe.log
    out["elapsed_s"] = time.perf_counter() - T0
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--limit", type=float, default=LIMIT_S)
    a = ap.parse_args()
    globals()["LIMIT_S"] = a.limit
    root = Path("/tmp/gs_offload_probe")
    if a.tiny and not a.child:
        subprocess.run([sys.executable, "tests/diffusion_tiny.py", str(root)], check=True, capture_output=True)
    if a.child:
        print(json.dumps(measure(a.tiny, root, child=True)))
        return 0
    res = {"parent": measure(a.tiny, root)}
    left = LIMIT_S - (time.perf_counter() - T0)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(1 << 40))
    if left > 25:
        cmd = [sys.executable, __file__, "--child", "--limit", f"{left - 2:.0f}"] + (["--tiny"] if a.tiny else [])
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
            res["env_child"] = json.loads(p.stdout) if p.returncode == 0 else {"rc": p.returncode,
                                                                              "stderr": p.stderr[-3000:]}
        except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            res["env_child"] = {"error": type(e).__name__}
    else:
        res["env_child"] = {"skipped": f"{left:.0f} s left"}
    res["elapsed_s"] = time.perf_counter() - T0
    out = Path(os.environ.get("OUT", "/tmp/gs_offload_probe_out")) / "gpu_offload_probe"
    out.mkdir(parents=True, exist_ok=True)
    (out / "offload_probe.json").write_text(json.dumps(res, indent=1))
    with tarfile.open(out / "gpu_offload_probe.tgz", "w:gz") as tf:
        for f in ("offload_probe.json", "run.out"):
            if (out / f).is_file():
                tf.add(out / f, arcname=f)
    (out / "offload_probe.json").unlink()
    print(f"offload probe: {res['elapsed_s']:.1f} s, {out / 'gpu_offload_probe.tgz'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
