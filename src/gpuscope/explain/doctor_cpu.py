"""The doctor's finding for generate on a CPU (explain/findings.py's rules read device timelines; a CPU run has
none of them, so a plain CPU generate came back "No finding fired").

cpu_decode_weights: at a small batch every decode step reads all the weights for ``batch`` tokens, so a CPU's
decode step is set by its memory bandwidth, or below it by the host's per-op cost and load. Llama-3.2-1B in fp32 at
batch 1 on the loaded 2-core EPYC VM (AVX512-BF16, copy bandwidth 21 GB/s kept by bench): 4.9 GB of weights, a
decode step of 0.62 s, 8 GB/s (38% of that bandwidth). Evidence: the bare run's median decode step
(measure/profile/token_clock.py), the model's parameter bytes, and this host's measured copy bandwidth where bench
kept it (pipeline/host_ceilings.py: ``host_bw_gbs``, put in the summary by explain/doctor_report.py). Fires on a CPU
inference profile at batch <= ``cpu_decode_max_batch`` with those numbers. The speed-up claimed is only the weights'
bytes halved by bf16 (a run in fp32 with the weight read >= half the step at the host's bandwidth); batching raises
tokens/s, not the step, so it is said, not claimed.
"""

from __future__ import annotations

from gpuscope.explain.finding import Finding, num, severity

MAX_BATCH = 8


def cpu_decode_weights(s: dict, t: dict | None = None) -> Finding | None:
    case = s.get("case") or {}
    step, weights = num(s, "tokens", "bare", "decode_s_median"), num(s, "weight_bytes")
    batch = case.get("batch") or 1
    if s.get("device_type") != "cpu" or case.get("kind") != "infer" or not step or not weights or batch > MAX_BATCH:
        return None
    bw = num(s, "host_bw_gbs")
    achieved = weights / step / 1e9
    floor = weights / (bw * 1e9) if bw else None
    share = floor / step if floor else None
    ev = {"decode_s_per_token": step, "weight_gb": weights / 1e9, "batch": batch, "achieved_gbs": achieved,
          "host_copy_gbs": bw, "weight_read_share_of_step": share, "first_token_s": num(s, "tokens", "bare",
                                                                                       "first_token_s")}
    fp32 = case.get("dtype") == "fp32"
    speedup = 1.0 / (1.0 - share / 2) if fp32 and share and share >= 0.5 else None
    where = (f"{share:.0%} of the step at this host's measured {bw:.1f} GB/s copy bandwidth" if share is not None
             else "no copy bandwidth kept for this host yet (a `gpuscope bench` run measures it)")
    return Finding(
        "cpu_decode_weights", f"CPU decode: every step reads all {weights / 1e9:.1f} GB of weights for "
        f"{batch} token(s)", severity(speedup) if speedup else "info", ev,
        "Decode more sequences per step: tokens/s grows almost with the batch while the weight read sets the step "
        "(`gpuscope tune batch infer --model M` finds the knee on this host). Fewer weight bytes: bf16 halves them "
        "where the CPU has AVX512-BF16 or AMX (lscpu flags avx512_bf16, amx_bf16; without them bf16 runs far "
        "slower than fp32), int8 weight-only quantization quarters them. Or decode on a GPU (`gpuscope plan infer "
        "--gpu NAME` gives its figure).",
        f"{step:.3f} s a token reading {weights / 1e9:.2f} GB is {achieved:.1f} GB/s; the weight read alone is "
        f"{where}" + (f": bf16 weights, up to {speedup:.2f}x faster decode" if speedup else ""), speedup=speedup)
