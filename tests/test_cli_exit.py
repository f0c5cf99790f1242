"""The entry point's exit codes and signals (shared/CONTRACT.md "Exit codes"), and its lazy command table.

Each case runs ``gpuscope.cli.main`` in a fresh process, as ``python -m gpuscope`` does; a probe command registered
through the same table stands in for a command that fails some cases or is interrupted.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

PROBE = textwrap.dedent("""
    import sys, time, types
    import typer
    import gpuscope.cli as cli

    def register(app):
        @app.command("probe")
        def probe(code: int = typer.Option(0, "--code"), wait: bool = typer.Option(False, "--wait"),
                  keep: bool = typer.Option(False, "--keep")):
            if wait:
                print("ready", flush=True)
                try:
                    time.sleep(30)
                except KeyboardInterrupt:
                    if not keep:
                        raise
                    print("interrupted: 3 finished measurements are kept", file=sys.stderr)
                    raise typer.Exit(130)
            raise typer.Exit(code)

    mod = types.ModuleType("gpuscope.cli._probe")
    mod.register = register
    sys.modules["gpuscope.cli._probe"] = mod
    cli.COMMANDS["probe"] = ("_probe", "A probe.")
    cli.main(sys.argv[1:])
""")


def probe(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PROBE, "probe", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize("code", [0, 1, 2, 130])
def test_exit_code_of_a_command_is_the_process_exit_code(code):
    p = probe("--code", str(code))
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("keep", [False, True])
def test_sigint_and_sigterm_exit_130(sig, keep):
    p = probe("--wait", *(["--keep"] if keep else []))
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    if keep:
        assert "kept" in err


def test_real_entry_point_bad_input_exits_2_and_success_0():
    run = lambda *a: subprocess.run([sys.executable, "-m", "gpuscope", *a], capture_output=True, text=True,
                                    timeout=60)
    r = run("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "h100", "--json")
    assert r.returncode == 0, r.stderr
    r = run("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "h999")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = run("no-such-command")
    assert r.returncode == 2 and "No such command" in r.stderr


def test_help_lists_every_command_from_the_static_table():
    r = subprocess.run([sys.executable, "-m", "gpuscope", "--help"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    from gpuscope.cli import COMMANDS

    for name in COMMANDS:
        assert f" {name} " in r.stdout


def test_static_helps_match_the_commands_own():
    """`gpuscope --help` is answered without importing the commands: each one-line help in the table is the start
    of the help the command itself declares."""
    import typer.main

    import gpuscope.cli as cli

    cli._register()
    group = typer.main.get_command(cli.app)
    norm = lambda s: " ".join((s or "").split())
    for name, (_module, short) in cli.COMMANDS.items():
        declared = norm(group.commands[name].help)
        assert declared.startswith(norm(short).rstrip(".")), (name, declared)


def test_help_imports_no_command_module():
    code = ("import sys, io, contextlib, gpuscope.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: c.main(['--help'])\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpuscope.cli.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr


NO_TORCH = textwrap.dedent("""
    import sys

    class NoTorch:  # as if torch were not installed
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named '{name}'", name=name)

    sys.meta_path.insert(0, NoTorch())
    from gpuscope.cli import main
    main(sys.argv[1:])
""")


@pytest.mark.parametrize("args, code", [
    (("tune", "batch", "infer", "--model", "llama-3.2-1b"), 2),
    (("tune", "precision", "train", "--model", "llama-3.2-1b"), 2),
    (("doctor", "infer", "--model", "llama-3.2-1b"), 2),
    (("doctor", "--", "python", "train.py"), 2),
    (("doctor", "train", "--model", "llama-3.2-1b", "--plan-only", "--gpu", "h100", "--json"), 0),
    (("plan", "train", "--model", "llama-3.2-1b", "--gpu", "h100", "--json"), 0),
    (("tune", "plan", "--model", "llama-3.2-1b", "--gpu", "h100", "--json"), 0),
])
def test_without_torch_one_sentence_or_the_plan(args, code):
    r = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    if code == 2:
        assert "needs PyTorch" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_command_imports_only_its_own_module_and_json_no_rich():
    code = ("import sys, io, contextlib, gpuscope.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.main(['plan', 'infer', '--model', 'llama-3.2-1b', '--gpu', 'h100', '--json'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpuscope.cli.')), 'rich' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    listed, rich_loaded = r.stdout.strip().rsplit(" ", 1)
    modules = ast.literal_eval(listed)  # the sorted list the child printed
    # plan's own sub-commands live in cli/plan_<name>.py (plan serve, plan diffusion): part of the same command
    others = [m for m in modules if m not in ("gpuscope.cli.options", "gpuscope.cli.plan")
              and not m.startswith("gpuscope.cli.plan_")]
    assert "gpuscope.cli.plan" in modules and others == [], (modules, r.stderr)
    assert rich_loaded == "False"
