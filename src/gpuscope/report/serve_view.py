"""Rich tables of a serving estimate (estimate.serve.ServeEstimate): renders what the estimate holds, computes
nothing new."""

from __future__ import annotations

from rich.table import Table

GIB = 2**30


def _s(v) -> str:
    if v is None:
        return "-"
    return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"


def render(est, console) -> None:
    j = est.to_json()
    inp, cap, mem, thr, lat = j["inputs"], j["capacity"], j["memory"], j["throughput"], j["latency"]
    mode = j["simulation"]["mode"] + (f" {inp['rate']:g} req/s" if inp["rate"] else "") + (
        f" {inp['concurrency']} clients" if inp["concurrency"] else "")
    console.print(f"[bold]{j['model']}[/bold] on {j['hardware']} x{inp['tp']} ({j['engine']['name']}), "
                  f"{inp['requests']} requests {inp['prompt']} in / {inp['gen']} out, {mode}")
    t = Table(title="capacity and memory (per GPU)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("weights", f"{mem['weights_bytes'] / GIB:.2f} GiB")
    t.add_row("KV cache", f"{mem['kv_cache_bytes'] / GIB:.2f} GiB ({cap['num_blocks']} blocks x {cap['block_size']})")
    t.add_row("KV tokens", f"{cap['kv_cache_tokens']:,}")
    t.add_row("max concurrent sequences", f"{cap['max_concurrent_sequences']:,} (KV {cap['kv_cache_sequences']:,}, "
              f"engine {cap['max_num_seqs']:,})")
    t.add_row("tokens per step", f"{cap['max_batched_tokens']:,}")
    console.print(t)
    t = Table(title="throughput and latency")
    for c in ("metric", "mean", "p50", "p90", "p99"):
        t.add_column(c, justify="right" if c != "metric" else "left")
    for name in ("ttft", "tpot", "e2e"):
        t.add_row(name.upper(), *(_s(lat.get(f"{name}_{k}_s")) for k in ("mean", "p50", "p90", "p99")))
    t.add_row("ITL", "", *(_s(lat.get(f"itl_{k}_s")) for k in ("p50", "p90", "p99")))
    console.print(t)
    line = (f"output {thr['output_tokens_per_s']:,.0f} tok/s, {thr['requests_per_s']:.2f} req/s; "
            f"{j['simulation']['steps']:,} steps, {j['simulation']['preemptions']} preemptions")
    if j["goodput"]:
        g = j["goodput"]
        line += f"; goodput {g['requests_per_s']:.2f} req/s ({g['fraction_meeting_slo']:.0%} meet the SLO)"
    c = j["cost"]
    if c["usd_per_m_output_tokens"]:
        line += f"; ${c['usd_per_m_output_tokens']:.3f} per 1M output tokens at ${c['usd_per_gpu_hour']:g}/GPU-h"
    if c["usd_per_m_output_tokens_owned"]:
        line += (f"; ${c['usd_per_m_output_tokens_owned']:.3f} per 1M output tokens owned (${c['purchase_usd']:,.0f} "
                 "a GPU over 3 years, busy at TDP)")
    console.print(line)
    if j["curve"]:
        t = Table(title="throughput-latency curve (Poisson arrivals)")
        for c2 in ("req/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"):
            t.add_column(c2, justify="right")
        for p in j["curve"]:
            t.add_row(f"{p['rate_requests_per_s']:.2f}", f"{p['output_tokens_per_s']:,.0f}", _s(p["ttft_p50_s"]),
                      _s(p["ttft_p99_s"]), _s(p["tpot_p50_s"]), _s(p["tpot_p99_s"]))
        console.print(t)
    for a in j["assumptions"]:
        console.print(f"  - {a}")
