"""`bench serve --launch transformers`: start `transformers serve` on 127.0.0.1 on a free port, wait until it
answers, drive it with the load generator, and always end it (no orphan).

- The server runs in its own session (``start_new_session``) with a parent-death signal (measure/runner/lifeline:
  it dies with this process, SIGKILL included); on the way out its whole process group gets SIGTERM, then SIGKILL
  after ``STOP_GRACE_S``.
- Ready: GET <base>/models answers 200 (``/v1/models`` on `transformers serve`, vLLM, SGLang); a server that exits
  first, or is not ready within the timeout, is an error carrying the end of its log.
- The model: random weights of the case's config, saved with a word-level tokenizer (``tokenizer_dir``) whose
  words are the load generator's prompt words, one token each, and whose vocabulary covers the model's (so every
  generated id decodes to one word): nothing is downloaded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from gpuscope.measure.runner import lifeline

STOP_GRACE_S = 10.0
POLL_S = 0.25


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """A server process started from ``cmd`` and ended on exit (its process group), whatever happened."""

    def __init__(self, cmd: list[str], base_url: str, log_dir: str | None = None, env: dict | None = None):
        self.cmd, self.base_url = cmd, base_url.rstrip("/")
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="gpuscope-serve-")) / "server.log"
        self.env, self.proc = env, None

    def __enter__(self) -> "Server":
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=self.env,
                                         preexec_fn=lifeline.preexec(os.getpid()))
        finally:
            log.close()
        return self

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until GET <base>/models answered 200; RuntimeError when the server exits or times out first."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.proc.returncode} before it was ready; its "
                                   f"log ends: {self.log_tail(600)}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except OSError:
                pass
            time.sleep(POLL_S)
        raise RuntimeError(f"the server was not ready within {timeout_s:.0f} s; its log ends: {self.log_tail(600)}")

    def stop(self) -> int | None:
        """End the server's process group (SIGTERM, then SIGKILL after the grace); its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                self.proc.send_signal(sig)
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.poll()

    def __exit__(self, *exc) -> None:
        self.stop()


def tokenizer_words(vocab: int) -> list[str]:
    """The tokenizer's words by id: the prompt words first, then ``w<id>`` up to the model's vocabulary."""
    from gpuscope.measure.serve.loadgen import WORDS

    words = list(dict.fromkeys(WORDS))[:vocab]
    return words + [f"w{i}" for i in range(len(words), vocab)]


def save_tokenizer(path: str, vocab: int) -> None:
    """A word-level fast tokenizer (the `tokenizers` library) over ``tokenizer_words``, saved to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = tokenizer_words(vocab)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[-1]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[-1])
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(path)


def save_random_model(case: dict, path: str) -> str:
    """The case's model with random weights and the word tokenizer, saved to ``path`` (safetensors)."""
    import torch

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import DTYPES, build_model, case_config, silence_generation, vocab_size

    model, config = build_model(case_config(case), Device("cpu"), DTYPES[case.get("dtype", "bf16")])
    silence_generation(model)
    model.generation_config.max_new_tokens = int(case["gen"])
    model.save_pretrained(path)
    save_tokenizer(path, vocab_size(config))
    del model
    torch.manual_seed(0)
    return path


def transformers_command(model_dir: str, port: int, device: str | None, case: dict) -> list[str]:
    """`transformers serve MODEL --continuous-batching` on 127.0.0.1:port (the CLI of 5.17 and 5.24 alike)."""
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", model_dir, "--host", "127.0.0.1",
           "--port", str(port), "--continuous-batching", "--dtype", case.get("dtype", "bf16").replace("bf16", "bfloat16")
           .replace("fp16", "float16").replace("fp32", "float32"), "--log-level", "warning"]
    if device:
        cmd += ["--device", device]
    for key, flag in (("num_blocks", "--cb-num-blocks"), ("max_batch_tokens", "--cb-max-batch-tokens"),
                      ("max_memory_percent", "--cb-max-memory-percent")):
        if case.get(key) is not None:
            cmd += [flag, str(case[key])]
    return cmd
