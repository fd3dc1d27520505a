"""``kopt select``: methods by the budget-aware priority scan, or the agent's own choice checked against
the hard constraints; in a run's iteration or on any profile."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.hardware import DEFAULT_ARCH
from kopt_core.steps.backends import DEFAULT_BACKEND


def _method_ids(_ctx, _param, value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    ids = tuple(part.strip() for part in value.split(",") if part.strip())
    if not ids:
        raise click.BadParameter("give method ids separated by commas, e.g. memory.smem_tiling,latency.ilp")
    return ids


@app.cli.command("select")
@click.option(
    "--state", "state_path", type=click.Path(), default=None, help="Run form: the run's state.json."
)
@click.option("--iter", "iteration", type=click.IntRange(1, None), default=None, help="Run form: iteration.")
@click.option(
    "--roofline",
    "roofline_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Standalone form: a roofline.json.",
)
@click.option(
    "--ncu-top",
    "ncu_top_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Standalone form: the ncu_top.json of the same profile.",
)
@click.option("--arch", default=DEFAULT_ARCH, show_default=True, help="Standalone form: target architecture.")
@click.option("--backend", default=DEFAULT_BACKEND, show_default=True, help="Standalone form: backend.")
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    help="Standalone form: operand dtype(s), e.g. float16 (default: the inputs' dtypes in the profile.json "
    "beside roofline.json).",
)
@app.numerics_mode_option("Standalone form: numerics mode.")
@click.option(
    "--sass",
    "sass_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Standalone form: the kernel's cuobjdump --dump-sass text, for its traits (smem staging, MMA...); "
    "default: the listing the profile.json beside roofline.json names.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    callback=outputs.out_folder,
    help="Standalone form: where methods.json and analysis.md go (default: beside roofline.json).",
)
@click.option(
    "--acknowledge",
    "acknowledged",
    multiple=True,
    metavar="METHOD",
    help="Run form: select this implementation-failed method again, knowing it failed before.",
)
@click.option(
    "--methods",
    "methods",
    default=None,
    callback=_method_ids,
    metavar="A,B,...",
    help="Choose the methods yourself (ids, comma-separated), instead of the scan's picks; they must pass "
    "the hard constraints (docs/loop.md), and the scan's picks are recorded beside them. 'none': no "
    "method, the branches differ in hyperparameters only. Needs --why.",
)
@click.option("--why", default=None, metavar="TEXT", help="Why you chose --methods (recorded).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the files written) on stdout."
)
def select_cmd(
    state_path,
    iteration,
    roofline_path,
    ncu_top_path,
    arch,
    backend,
    dtypes,
    numerics_mode,
    sass_path,
    out_dir,
    acknowledged,
    methods,
    why,
    as_json,
) -> int:
    """Pick methods by the budget-aware priority scan, or check your own (--methods, --why) against the
    hard constraints; write methods.json and analysis.md (nothing when the choice is refused)."""
    from kopt_core.errors import ConfigError

    if state_path or iteration:
        if not (state_path and iteration):
            raise ConfigError("the run form needs --state and --iter")
        from kopt_core.run.iteration import select_in_run

        store = app.store(state_path)
        written = envelope.Written(store.run_dir)
        path = select_in_run(
            app.plugin_manager(), store, iteration, acknowledged=tuple(acknowledged), methods=methods, why=why
        )
        notes = _notes(path)
        if as_json:
            result = envelope.run_result(store.run_dir, written, path=str(path), notes=notes)
            return envelope.emit("select", 0, result)
        click.echo(str(path))
        return 0
    if not (roofline_path and ncu_top_path):
        raise ConfigError("give --state and --iter, or --roofline and --ncu-top")
    from kopt_core.steps.backends import installed_backends, method_backends
    from kopt_core.steps.select import select_standalone, standalone_out_dir

    written = envelope.Written(standalone_out_dir(roofline_path, out_dir))
    path = select_standalone(
        roofline_path,
        ncu_top_path,
        arch=arch,
        backend=backend,
        numerics_mode=numerics_mode,
        dtypes=tuple(dtypes),
        sass_path=sass_path,
        out_dir=out_dir,
        installed_backends=installed_backends(app.plugin_manager()),
        method_backends=method_backends(app.plugin_manager(), backend),
        methods=methods,
        why=why,
    )
    notes = _notes(path)
    if as_json:
        return envelope.emit("select", 0, envelope.run_result(None, written, path=str(path), notes=notes))
    click.echo(str(path))
    return 0


def _notes(path) -> list[str]:
    """The selection's notes (``selection_notes``: a missing SASS listing), each a warning on stderr too."""
    from kopt_core.steps.select import selection_notes

    notes = selection_notes(path)
    for note in notes:
        render.warning(note)
    return notes
