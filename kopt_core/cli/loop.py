"""The loop's steps after ``select``: explore, ablate, update, summarize. Each parses its options, calls
one function of ``kopt_core.run`` and prints what it wrote (or the --json envelope)."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, render

STATE = click.option(
    "--state", "state_path", required=True, type=click.Path(), help="The run's state.json (or folder)."
)
ITER = click.option(
    "--iter", "iteration", required=True, type=click.IntRange(1, None), help="Iteration number."
)


def _json_option(what: str):
    return click.option("--json", "as_json", is_flag=True, help=f"Print the envelope (result: {what}).")


def _emit_record(command: str, store, written, path, record) -> int:
    from kopt_core.records import to_data

    result = envelope.run_result(store.run_dir, written, path=str(path), record=to_data(record))
    return envelope.emit(command, 0, result)


@app.cli.command("explore")
@STATE
@ITER
@_json_option("explore.json and the promotion's paired.json")
@app.executor_options(
    "Where branches are screened: local (one worker), gpus (one per GPU), ray, or a plugin's."
)
def explore_cmd(state_path, iteration, as_json, executor, executor_options) -> int:
    """Check, build (in a bounded pool) and time (serially, one worker) the iteration's branches; the
    fastest that passes everything is the champion, promoted over the best only on a paired win.
    Every branch failing stops the run (exit 2)."""
    from kopt_core.execute.base import open_pool
    from kopt_core.run.explore import explore_iteration
    from kopt_core.run.layout import EXPLORE_FILE, PROMOTION_FILE, iteration_dir

    store = app.store(state_path)
    written = envelope.Written(store.run_dir)
    pm = app.plugin_manager()
    record = explore_iteration(pm, store, iteration, pool=open_pool(pm, executor, executor_options))
    folder = iteration_dir(store.run_dir, iteration)
    if as_json:
        return _emit_record("explore", store, written, folder / EXPLORE_FILE, record)
    render.explore_report(record, folder / PROMOTION_FILE)
    return 0


@app.cli.command("ablate")
@STATE
@ITER
@_json_option("attribution.json")
def ablate_cmd(state_path, iteration, as_json) -> int:
    """Pair the champion against each ablation (the champion without one method): attribution(m) =
    ms_without_m - ms_champion with its interval; a missing or broken ablation is inconclusive."""
    from kopt_core.run.ablate import ablate_iteration
    from kopt_core.run.layout import ATTRIBUTION_FILE, iteration_dir

    store = app.store(state_path)
    written = envelope.Written(store.run_dir)
    record = ablate_iteration(app.plugin_manager(), store, iteration)
    path = iteration_dir(store.run_dir, iteration) / ATTRIBUTION_FILE
    if as_json:
        return _emit_record("ablate", store, written, path, record)
    render.attribution_report(record)
    return 0


@app.cli.command("update")
@STATE
@ITER
@_json_option("the run's state after the update")
def update_cmd(state_path, iteration, as_json) -> int:
    """Apply the seed's update rules from the iteration's evidence (explore, paired, attribution,
    sass_check): classify each method, move best_file only on a paired win, append the history."""
    from kopt_core.run.update import update_in_run

    store = app.store(state_path)
    written = envelope.Written(store.run_dir)
    state = update_in_run(store, iteration)
    if as_json:
        return envelope.emit(
            "update", 0, envelope.run_result(store.run_dir, written, path=str(store.state_path))
        )
    render.update_report(state, iteration)
    return 0


@app.cli.command("summarize")
@click.option(
    "--state", "state_path", required=True, type=click.Path(), help="The run's state.json (or folder)."
)
@_json_option("summary.md and its charts")
def summarize_cmd(state_path, as_json) -> int:
    """Write summary.md with the result and its interval, each iteration's evidence, a roofline chart and a
    speedup-per-iteration chart."""
    from kopt_core.run.summary import render_summary

    store = app.store(state_path)
    written = envelope.Written(store.run_dir)
    path = render_summary(store)
    if as_json:
        return envelope.emit("summarize", 0, envelope.run_result(store.run_dir, written, path=str(path)))
    click.echo(str(path))
    return 0
