"""`gpuscope hardware`: list the catalog, show one device, write an editable TOML template."""

from __future__ import annotations

import typer

JSON_HELP = "Print JSON (schema gpuscope.hardware/1) instead of a table."


def _console():
    from gpuscope.cli.options import console

    return console(180)  # piped or captured: do not squeeze the table into 80 columns


def _print_list(as_json: bool) -> None:
    from gpuscope.report.hardware_table import catalog_json, catalog_table
    from gpuscope.specs.hardware import list_hardware

    specs = list_hardware()
    if as_json:
        typer.echo(catalog_json(specs))
    else:
        _console().print(catalog_table(specs))


def register(app: typer.Typer) -> None:
    hw = typer.Typer(
        name="hardware",
        help="The hardware catalog: peaks (dense), memory, bandwidth, links, with sources.",
        invoke_without_command=True,
        no_args_is_help=False,
    )

    @hw.callback()
    def hardware_main(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """List the hardware catalog (same as `gpuscope hardware list`)."""
        if ctx.invoked_subcommand is None:
            _print_list(as_json)

    @hw.command("list")
    def list_cmd(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """List every catalog entry with its aliases and headline numbers."""
        _print_list(as_json)

    @hw.command("show")
    def show_cmd(
        name: str = typer.Argument(..., help="Catalog name or alias, or a path to a hardware TOML."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Every field of one device: peaks, efficiencies, sources, unconfirmed values."""
        from gpuscope.report.hardware_table import detail_table, device_json
        from gpuscope.specs.hardware import load_hardware

        spec = load_hardware(name)
        if as_json:
            typer.echo(device_json(spec))
        else:
            _console().print(detail_table(spec))

    @hw.command("template")
    def template_cmd(
        name: str = typer.Argument(..., help="Catalog name or alias to start from."),
    ) -> None:
        """Print an editable hardware TOML: base = NAME plus a commented-out table of measured ceilings."""
        from gpuscope.specs.hardware_template import template_toml

        typer.echo(template_toml(name), nl=False)

    from gpuscope.cli.calibrate import register_calibrate

    register_calibrate(hw)
    app.add_typer(hw, name="hardware")
