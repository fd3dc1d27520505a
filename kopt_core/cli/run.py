"""The run's first steps and where it stands: ``kopt init``, ``kopt seed``, ``kopt iter open`` and
``kopt status``."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.records.state import State


@app.cli.command("init", context_settings=app.FREE_ARGUMENTS)
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline kernel file.")
@click.option(
    "--ref",
    "reference",
    required=True,
    type=click.Path(dir_okay=False),
    help="Reference file with reference(**kwargs).",
)
@app.dims_option()
@click.option(
    "--env",
    "env_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="env.json written by `kopt gate --out env.json`.",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=app.default_of(State, "iterations_total"),
    show_default=True,
    help="Most iterations to run.",
)
@click.option(
    "--ncu-num",
    type=click.IntRange(1, 50),
    default=app.default_of(State, "ncu_num"),
    show_default=True,
    help="Top ncu metrics per axis.",
)
@click.option(
    "--branches",
    type=click.IntRange(min=1),
    default=app.default_of(State, "branches"),
    show_default=True,
    help="Branch kernels per iteration.",
)
@app.compile_jobs_option()
@app.SANITIZER_TIMEOUT
@app.numerics_mode_option("Numerical contract for methods.")
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the run folder) on stdout."
)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[--NAME=VALUE]...")
def init_cmd(
    baseline,
    reference,
    dims_json,
    env_path,
    iterations,
    ncu_num,
    branches,
    compile_jobs,
    sanitizer_timeout_s,
    numerics_mode,
    backend,
    as_json,
    extra,
) -> int:
    """Check the baseline, reference and dims (no GPU needed), then create run_YYYYMMDD_HHMMSS/ next to the
    baseline with baseline/, env.json and state.json. Prints the run folder."""
    from pathlib import Path

    from kopt_core.dims import parse_dims
    from kopt_core.run.init import init_run

    dims = parse_dims(dims_json, extra)
    # the run folder goes beside the baseline: a folder there that cannot be made is the user's (exit 4)
    outputs.claim(Path(baseline).resolve().parent, "the run folder in")
    store = init_run(
        app.plugin_manager(),
        baseline=baseline,
        ref=reference,
        dims=dims,
        env_path=env_path,
        iterations=iterations,
        ncu_num=ncu_num,
        branches=branches,
        compile_jobs=compile_jobs,
        numerics_mode=numerics_mode,
        backend=backend,
        on_warning=render.warning,
        sanitizer_timeout_s=sanitizer_timeout_s,
    )
    if as_json:
        written = envelope.Written(store.run_dir)
        written.before = {}  # everything in the new run folder was written by this command
        return envelope.emit("init", 0, envelope.run_result(store.run_dir, written))
    click.echo(str(store.run_dir))
    return 0


@app.cli.command("status")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the run's status) on stdout."
)
def status_cmd(run_dir, as_json) -> int:
    """Where RUN stands: status, stop, iterations, best vs baseline, iteration folders, the lock."""
    from kopt_core.run.status import run_status

    info = run_status(run_dir)
    if as_json:
        return envelope.emit("status", 0, info)
    render.status_report(info)
    return 0


@app.cli.command("seed")
@click.option(
    "--state", "state_path", required=True, type=click.Path(), help="The run's state.json (or folder)."
)
@click.option(
    "--retry",
    is_flag=True,
    help="Clear a stop the machine caused (exit 3), or one an older kopt made on a file to fix (exit 4), "
    "and go on: the seed runs again if the baseline was not seeded.",
)
@click.option(
    "--env",
    "env_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A new env.json from `kopt gate --out`, for a run not yet seeded (its gate refused): it becomes "
    "the run's.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the run folder) on stdout."
)
def seed_cmd(state_path, retry, env_path, as_json) -> int:
    """Validate, time and profile the baseline into baseline/; stop the run (stop.json) if it fails.
    A stopped run answers with what stopped it, exiting with that stop's code."""
    from kopt_core.run.seed import seed_baseline, use_env

    store = app.store(state_path)
    written = envelope.Written(store.run_dir)
    pm = app.plugin_manager()
    stop = store.load_stop() if retry else None
    if env_path is not None:
        use_env(store, env_path, retry=retry, on_warning=render.warning)
    state = seed_baseline(pm, store, retry=retry)
    # a retry that cleared a stop after the seed: the stage that stopped is the one to run again
    cleared = stop is not None and not store.stop_path.is_file()
    after = stop if cleared and stop is not None and stop.stage != "seed" else None
    go_on = store.continue_with(after.stage, after.iteration) if after is not None else None
    if as_json:
        extra = {"cleared": after.stage, "continue_with": go_on} if after is not None else {}
        result = envelope.run_result(store.run_dir, written, best_metric_ms=state.best_metric_ms, **extra)
        return envelope.emit("seed", 0, result)
    if after is not None:
        where = f" (iteration {after.iteration})" if after.iteration is not None else ""
        click.echo(f"stop cleared: {after.stage}{where} can run again; continue with {go_on}")
    else:
        click.echo(f"seeded: baseline {state.best_metric_ms:.4f} ms")
    return 0


@app.cli.group("iter")
def iter_group() -> None:
    """Steps of one iteration."""


@iter_group.command("open")
@click.option(
    "--state", "state_path", required=True, type=click.Path(), help="The run's state.json (or folder)."
)
@click.option("--iter", "iteration", required=True, type=click.IntRange(1, None), help="Iteration number.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the run folder) on stdout."
)
def iter_open_cmd(state_path, iteration, as_json) -> int:
    """Recheck the hardware, profile the best kernel into staging, publish iterv{i}/ when complete."""
    from kopt_core.run.iteration import open_iteration

    store = app.store(state_path)
    written = envelope.Written(store.run_dir)
    folder = open_iteration(app.plugin_manager(), store, iteration)
    if as_json:
        return envelope.emit("iter open", 0, envelope.run_result(store.run_dir, written, path=str(folder)))
    click.echo(str(folder))
    return 0
