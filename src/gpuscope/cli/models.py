"""`gpuscope models`: the built-in presets, and one model's architecture and parameter counts."""

from __future__ import annotations

import json

import typer

from gpuscope.cli import options as o


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models(
        name: str = typer.Argument(None, help="Show one preset or config.json in detail."),
        as_json: bool = o.json_out(help="Print JSON (schemas gpuscope.models/1, gpuscope.model/1)."),
    ) -> None:
        """List model presets (or show one: architecture and exact parameter counts)."""
        from rich.table import Table

        from gpuscope.estimate.params import count_params
        from gpuscope.specs.models import load_model, preset_meta, preset_names

        console = o.console(160)
        if name:
            spec = load_model(name)
            pc = count_params(spec)
            d = {"schema": "gpuscope.model/1", "spec": spec.to_dict(), "params": pc.to_dict()}
            if as_json:
                typer.echo(json.dumps(d, indent=2))
                return
            t = Table(title=f"{spec.name} ({spec.family})", show_header=False)
            for k, v in spec.to_dict().items():
                if v not in (None, (), [], "", 0, False) or k in ("tie_embeddings",):
                    t.add_row(k, str(v))
            for k, v in pc.to_dict().items():
                t.add_row(f"params.{k}", f"{v:,}")
            console.print(t)
            return
        rows = []
        for n in preset_names():
            spec = load_model(n)
            pc = count_params(spec)
            meta = preset_meta(n)
            rows.append({"name": n, "family": spec.family, "params": pc.total, "active": pc.active,
                         "layers": spec.num_layers, "hidden": spec.hidden_size, "heads": spec.num_heads,
                         "kv_heads": spec.num_kv_heads, "vocab": spec.vocab_size,
                         "aliases": meta.get("aliases", []), "source": meta.get("source", "")})
        if as_json:
            typer.echo(json.dumps({"schema": "gpuscope.models/1", "models": rows}, indent=2))
            return
        t = Table(title="model presets (`--model NAME`)", header_style="bold")
        for c in ("name", "family", "params", "active", "layers", "hidden", "heads/kv", "vocab"):
            t.add_column(c, justify="right" if c in ("params", "active", "layers", "hidden", "vocab") else "left")
        for r in rows:
            t.add_row(r["name"], r["family"], f"{r['params'] / 1e9:.2f}B", f"{r['active'] / 1e9:.2f}B",
                      str(r["layers"]), str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}", str(r["vocab"]))
        console.print(t)
