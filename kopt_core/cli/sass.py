"""``kopt sass``: the SASS each method leaves, checked in a listing, a cubin or a library, or in a run
iteration's champion."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, render
from kopt_core.hardware import DEFAULT_ARCH


@app.cli.command("sass")
@click.argument("target", type=click.Path(dir_okay=False), required=False)
@click.option("--method", "methods", multiple=True, help="Method id (repeat for several).")
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    default=None,
    help="The baseline's SASS, cubin or library, for rules relative to it.",
)
@click.option(
    "--arch", default=DEFAULT_ARCH, show_default=True, help="The architecture the target was built for."
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(),
    default=None,
    help="Run form: the run's state.json (or folder); checks iteration --iter's champion.",
)
@click.option("--iter", "iteration", type=click.IntRange(1, None), default=None, help="Run form: iteration.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: {target, verdicts}) on stdout."
)
def sass_cmd(target, methods, baseline, arch, state_path, iteration, as_json) -> int:
    """Check TARGET (cuobjdump --dump-sass text, a cubin or a shared library) for the SASS each method
    leaves. Exit 3 when no disassembler could run (a missing tool is never a pass); exit 4 when TARGET
    or --baseline holds no device code (empty, no instructions, no cubin in it).

    Run form (--state, --iter): the iteration's champion against the baseline, for the iteration's
    methods, into iterv{i}/sass_check.json."""
    from kopt_core.errors import ConfigError
    from kopt_core.hardware import parse_arch
    from kopt_core.records import to_data
    from kopt_core.steps.sass import check_sass, unread_failure

    if state_path is not None or iteration is not None:
        if state_path is None or iteration is None or target is not None or methods:
            raise ConfigError("the run form takes --state and --iter, and no TARGET or --method")
        from kopt_core.run.sass_check import check_iteration_sass

        record = check_iteration_sass(app.plugin_manager(), app.store(state_path), iteration)
        failure = unread_failure(record.methods, "the champion")
        if as_json:
            result = {"target": record.artifact, "verdicts": to_data(record.methods)}
            return envelope.emit("sass", envelope.exit_code(failure), result, envelope.failure(failure))
        render.sass_check_report(record)
        return envelope.exit_code(failure)
    if target is None or not methods:
        raise ConfigError("give TARGET and at least one --method, or the run form --state and --iter")
    verdicts = check_sass(
        app.plugin_manager(), target, list(methods), arch=parse_arch(arch), baseline=baseline
    )
    failure = unread_failure(verdicts, "the target")
    if as_json:
        result = {"target": str(target), "verdicts": [to_data(v) for v in verdicts]}
        return envelope.emit("sass", envelope.exit_code(failure), result, envelope.failure(failure))
    render.sass_report(target, verdicts)
    return envelope.exit_code(failure)
