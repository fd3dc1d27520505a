"""``kopt plugins`` and ``kopt backends``: what is installed, and whether it can run here."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, render
from kopt_core.jsonio import dumps


@app.cli.command("plugins")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: {plugins: [...]}) on stdout."
)
def plugins_cmd(as_json: bool) -> int:
    """List loaded plugins (name, package version, hooks) as JSON."""
    from kopt_core.plugins import describe_plugins

    plugins = describe_plugins(app.plugin_manager())
    if as_json:
        return envelope.emit("plugins", 0, {"plugins": plugins})
    click.echo(dumps(plugins), nl=False)
    return 0


@app.cli.command("backends")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: {backends: [...]}) on stdout."
)
def backends_cmd(as_json: bool) -> int:
    """List backends: file suffixes, whether each one's toolchain is present and, apart from it, whether
    the GPU it needs is; whether it can run here, and why not."""
    from kopt_core.steps.backends import list_backends

    rows = list_backends(app.plugin_manager())
    if as_json:
        return envelope.emit("backends", 0, {"backends": rows})
    render.backends_table(rows)
    return 0
