"""``kopt gate``: the strict hardware gate, which writes env.json and allows generation or refuses it."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.run.layout import ENV_FILE
from kopt_core.steps.backends import DEFAULT_BACKEND
from kopt_core.steps.gate import MAX_ATTEMPTS


@app.cli.command("gate")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=ENV_FILE,
    show_default=True,
    callback=outputs.out_file,
    help="Write env.json here (also when the gate refuses: it is the evidence).",
)
@click.option(
    "--backend",
    default=DEFAULT_BACKEND,
    show_default=True,
    help="Backend whose tools and dependencies must resolve (an installed one: see kopt backends).",
)
@click.option(
    "--attempts",
    type=click.IntRange(1, MAX_ATTEMPTS),
    default=MAX_ATTEMPTS,
    show_default=True,
    help="Discovery attempts (tools, GPU, CUDA context, backend); stops at the first that passes.",
)
@click.option("--diagnostic", is_flag=True, help="Report everything; never authorise generation.")
@click.option("--no-ceilings", is_flag=True, help="Do not measure the device ceilings.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: env.json) on stdout, not a table."
)
def gate_cmd(out, backend, attempts, diagnostic, no_ceilings, as_json) -> int:
    """The strict hardware gate: GPU, CUDA context, tools, backend, ncu counters and ceilings -> env.json.

    Exit 0 when generation is allowed (with --diagnostic: when the report was written), 3 otherwise.
    """
    from kopt_core.records import to_data
    from kopt_core.steps.gate import gate_outcome

    outcome = gate_outcome(
        app.plugin_manager(),
        backend=backend,
        attempts=attempts,
        diagnostic=diagnostic,
        measure=not no_ceilings,
        out=out,
        on_progress=render.gate_progress,
    )
    if not as_json:
        render.gate_report(outcome.env)
    if outcome.warning is not None:
        render.warning(outcome.warning)
    if outcome.failure is not None:
        render.error(str(outcome.failure))
    if as_json:
        return envelope.emit(
            "gate", outcome.exit_code, to_data(outcome.env), envelope.failure(outcome.failure)
        )
    return outcome.exit_code
