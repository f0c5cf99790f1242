"""`plan train --kbit-prep`: QLoRA planned as the HF recipe runs it (peft's prepare_model_for_kbit_training before
get_peft_model: estimate/lora_memory.py's kbit_prep), through the CLI."""

from __future__ import annotations

import json

from cli_inproc import run_cli

BASE = ["plan", "train", "--model", "llama-3.1-8b", "--gpu", "h100", "--lora-r", "32", "--micro-batch", "1",
        "--seq", "8192", "--json"]


def _plan(*extra):
    r = run_cli(*BASE, *extra)
    return r.returncode, r.stdout + r.stderr


def test_kbit_prep_adds_the_fp32_stream_to_the_peak_and_says_so():
    code, out = _plan("--qlora", "--recompute", "full")
    code_p, out_p = _plan("--qlora", "--recompute", "full", "--kbit-prep")
    assert code == code_p == 0, out + out_p
    plain, prep = json.loads(out), json.loads(out_p)
    grown = prep["memory"]["peak_bytes_per_gpu"] - plain["memory"]["peak_bytes_per_gpu"]
    # H200 (call 3): +5.30 GB at 8192 tokens with r32; the planner's kbit_prep gives the same within a few percent
    assert 4.5e9 < grown < 6.0e9, grown
    assert any("prepare_model_for_kbit_training" in a for a in prep["assumptions"])
    assert not any("prepare_model_for_kbit_training" in a for a in plain["assumptions"])
    assert prep["inputs"]["kbit_prep"] is True


def test_kbit_prep_without_qlora_and_checkpointing_is_one_sentence_and_exit_2():
    code, out = _plan("--kbit-prep")
    assert code == 2
    assert "--kbit-prep" in out and "--qlora" in out and "Traceback" not in out
