"""What an eager PyTorch run costs per op on a CPU: the measurements behind the planner's CPU model (estimate/cpu.py).

Writes one JSON (argv[1], default stdout) with:
- ``dispatch``: seconds per op of a loop of tiny ops (torch.add of 64 floats): the dispatcher alone;
- ``tiny_forward``: a tiny Llama's (measure/models/tiny.TINY) prefill and decode forward at 1, 2, 4, 8 layers,
  medians, and the per-layer slope divided by the kernels the planner counts in a layer: the per-kernel host cost;
- ``gemm``: F.linear (what HF's nn.Linear runs) at the widths of GPT-2 and a small Llama, rows M from 1 to 512:
  seconds and GFLOP/s, and the large square GEMM's rate for reference;
- ``elementwise``: a + b and a.mul_(c) from 16 KiB to 256 MiB tensors: GB/s (bytes read + written);
- ``profiles``: torch.profiler self-CPU time by category (matmul, attention, elementwise/other) and op counts of
  one prefill forward, one decode-step forward and one training step (forward, backward, AdamW) of GPT-2 and of a
  small Llama, at bench's CPU defaults (prompt 32, seq 128), beside the same step's wall time unprofiled.

Run: ``PYTHONPATH=src python3 research/scripts/cpu_op_costs.py out.json`` (``--tiny``: small sizes, seconds).
Pin it to the cores a run uses (``taskset -c 0,1``, ``OMP_NUM_THREADS=2``) to stand for a 2-core host.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

TINY_RUN = "--tiny" in sys.argv
SMALL_LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 8,
               "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000,
               "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def timed(fn, min_s: float = 0.05, min_n: int = 5) -> float:
    """Median seconds of fn() after 2 untimed calls, at least min_n calls and min_s seconds."""
    fn(), fn()
    ts, t_all = [], time.perf_counter()
    while len(ts) < min_n or time.perf_counter() - t_all < min_s:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def dispatch() -> dict:
    a, b = torch.randn(64), torch.randn(64)
    n = 2000

    def loop():
        for _ in range(n):
            torch.add(a, b)
    return {"add64_s": timed(loop) / n}


def tiny_forward() -> dict:
    from gpuscope.estimate import ops as opsmod
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import build_model
    from gpuscope.measure.models.tiny import TINY
    from gpuscope.specs.hf_config import spec_from_config

    dev = Device("cpu")
    out = {"layers": [1, 2, 4, 8], "prefill_s": [], "decode_s": []}
    ids = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        for n in out["layers"]:
            m, _ = build_model(dict(TINY["llama"], num_hidden_layers=n), dev, torch.float32)
            m.eval()
            out["prefill_s"].append(timed(lambda: m(ids, use_cache=False), 0.2))
            o = m(ids, use_cache=True)
            cache = o.past_key_values
            nxt = ids[:, -1:]
            out["decode_s"].append(timed(lambda: m(nxt, use_cache=True, past_key_values=cache), 0.2))
    k = [sum(o.kernels * o.count for o in opsmod.forward_ops(spec_from_config(dict(TINY["llama"], num_hidden_layers=n)),
                                                           1, 16, 0, 4.0, 4.0, 4.0, head_tokens=16)) for n in (1, 2)]
    out["planner_kernels_per_layer"] = k[1] - k[0]
    out["planner_kernels_1_layer"] = k[0]
    for key in ("prefill_s", "decode_s"):
        xs, ys = out["layers"], out[key]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        out[key.replace("_s", "_layer_s")] = b
        out[key.replace("_s", "_fixed_s")] = my - b * mx
        out[key.replace("_s", "_per_kernel_s")] = b / out["planner_kernels_per_layer"]
    return out


def gemm() -> dict:
    shapes = [(768, 2304), (768, 768), (768, 3072), (3072, 768), (512, 1408), (1408, 512), (768, 50257),
              (512, 32000)]
    rows = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if TINY_RUN:
        shapes, rows = shapes[:2], [1, 32]
    out = []
    for k, n in shapes:
        w = torch.randn(n, k)
        for m in rows:
            x = torch.randn(m, k)
            s = timed(lambda: F.linear(x, w))
            out.append({"m": m, "n": n, "k": k, "s": s, "gflops": 2 * m * n * k / s / 1e9,
                        "weight_gbs": n * k * 4 / s / 1e9})
    big = 512 if TINY_RUN else 2048
    a, b = torch.randn(big, big), torch.randn(big, big)
    s = timed(lambda: a @ b, 0.3)
    return {"points": out, "square": {"n": big, "s": s, "gflops": 2 * big**3 / s / 1e9}}


def elementwise() -> dict:
    out = []
    for p in range(12, 27 if not TINY_RUN else 18, 2):
        n = 2**p
        a, b, c = torch.randn(n), torch.randn(n), torch.randn(n)
        s_add = timed(lambda: a + b)
        s_mul = timed(lambda: a.mul_(c.clamp_(0.99, 1.01)[:1]))  # in place, broadcast scalar-like: r + w
        out.append({"floats": n, "add_s": s_add, "add_gbs": 12 * n / s_add / 1e9, "mul_inplace_s": s_mul,
                    "mul_inplace_gbs": 8 * n / s_mul / 1e9})
    return {"points": out}


def category(name: str) -> str:
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"):
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    return "other"


def profile_case(cfg: dict, what: str, prompt: int = 32, seq: int = 128) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import build_model

    dev = Device("cpu")
    torch.manual_seed(0)
    m, config = build_model(cfg, dev, torch.float32, use_cache=(what != "train"))
    vocab = int(config.vocab_size)
    if what == "train":
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        ids = torch.randint(0, vocab, (1, seq))

        def fn():
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        m.eval()
        ids = torch.randint(0, vocab, (1, prompt))
        with torch.no_grad():
            past = m(ids, use_cache=True).past_key_values
        nxt = ids[:, -1:]

        def fn():
            with torch.no_grad():
                if what == "prefill":
                    m(ids, use_cache=True, logits_to_keep=1)
                else:
                    import copy
                    m(nxt, use_cache=True, past_key_values=copy.copy(past))
    wall = timed(fn, 0.5 if what != "train" else 0.0, 3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    cats: dict = {}
    ops = []
    for e in prof.key_averages():
        c = category(e.key)
        d = cats.setdefault(c, {"self_s": 0.0, "calls": 0})
        d["self_s"] += e.self_cpu_time_total / 1e6
        d["calls"] += e.count
        ops.append({"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "calls": e.count})
    ops.sort(key=lambda o: -o["self_s"])
    return {"what": what, "wall_s": wall, "categories": cats, "top_ops": ops[:30],
            "profiled_total_s": sum(o["self_s"] for o in ops)}


def main() -> None:
    from gpuscope.specs.models import preset_config

    res = {"torch": torch.__version__, "threads": torch.get_num_threads(), "tiny": TINY_RUN}
    t0 = time.perf_counter()
    res["dispatch"] = dispatch()
    res["tiny_forward"] = tiny_forward()
    res["gemm"] = gemm()
    res["elementwise"] = elementwise()
    res["micro_s"] = time.perf_counter() - t0
    gpt2 = preset_config("gpt2")
    models = {"gpt2": gpt2, "llama-small": SMALL_LLAMA}
    if TINY_RUN:
        models = {"llama-small": dict(SMALL_LLAMA, num_hidden_layers=1, hidden_size=128, intermediate_size=256,
                                      vocab_size=1000)}
    res["profiles"] = {name: [profile_case(cfg, w) for w in ("prefill", "decode", "train")]
                       for name, cfg in models.items()}
    res["total_s"] = time.perf_counter() - t0
    text = json.dumps(res, indent=1)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        with open(args[0], "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
