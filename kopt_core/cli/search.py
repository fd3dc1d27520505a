"""``kopt search KERNEL --ref R <dims>``: the fastest configuration of the tunables KERNEL declares
(kopt_core.steps.search), every configuration checked and timed like any kernel.

Exit codes: 0 a configuration passed (best.json, best.<ext>); 2 none passed; 3 no GPU or no tool (after
the static checks); 4 a bad kernel, space, reference, dims or option.
"""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.records.search import DEFAULT_SAMPLER, DEFAULT_TRIALS, SAMPLERS

SEED_MAX = (1 << 32) - 1  # Optuna's samplers seed numpy, which takes 32 bits


@app.cli.command("search", context_settings=app.FREE_ARGUMENTS)
@click.argument("kernel", type=click.Path(dir_okay=False))
@click.option("--ref", "reference", required=True, type=click.Path(dir_okay=False), help="Reference file.")
@app.dims_option()
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=None,
    help=f"Configurations the study evaluates in all, across resumes (default: {DEFAULT_TRIALS}; the grid "
    "sampler: every valid point).",
)
@click.option(
    "--time-budget",
    "time_budget_s",
    type=app.POSITIVE,
    default=None,
    help="Seconds of search in this call, checked between batches (a batch that started is finished).",
)
@click.option(
    "--sampler",
    type=click.Choice(SAMPLERS),
    default=DEFAULT_SAMPLER,
    show_default=True,
    help="The study's sampler.",
)
@click.option(
    "--storage",
    default=None,
    help="Optuna RDB URL of the study (default: sqlite:///OUT/search.db); the same search resumes there.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    callback=outputs.out_folder,
    help="Folder for the trials, trials.csv/json, best.json and best.<ext> "
    "(default: ./kopt_search_<kernel>).",
)
@click.option(
    "--seed", type=click.IntRange(0, SEED_MAX), default=0, show_default=True, help="The sampler's seed."
)
@app.compile_jobs_option("Configurations built at once in the compile pool before each is timed: auto or N.")
@app.executor_options(
    "Where the trials are timed: local (one worker), gpus (one per GPU), ray, or a plugin's."
)
@click.option(
    "--join",
    is_flag=True,
    help="Add this process as one more worker of the study another kopt search (on any host) started in "
    "--storage; the same kernel, reference and dims name the same study.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the search's outcome) on stdout."
)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[--NAME=VALUE]...")
def search_cmd(
    kernel,
    reference,
    dims_json,
    backend,
    trials,
    time_budget_s,
    sampler,
    storage,
    out_dir,
    seed,
    compile_jobs,
    executor,
    executor_options,
    join,
    as_json,
    extra,
) -> int:
    """Search the tunables KERNEL declares for the fastest configuration that passes every check.

    Dims follow as --NAME=VALUE (e.g. --M=4096 --N=4096 --K=4096) or --dims JSON. Declare the space in
    the kernel: `// kopt:space NAME = [..]` lines (.cu), `kopt_space = {...}` (.py), an autotune list,
    or `// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn` for CUTLASS's configurations.
    """
    import sys
    from pathlib import Path

    from kopt_core.dims import parse_dims
    from kopt_core.errors import ConfigError
    from kopt_core.execute.base import open_pool
    from kopt_core.steps.search import search_kernel
    from kopt_core.steps.search_outcome import default_out_dir, default_trials, search_failure

    dims = parse_dims(dims_json, extra)
    if join and storage is None:
        raise ConfigError(
            "--join adds a worker to a study in a shared storage: give it with --storage",
            hint="e.g. --storage postgresql://kopt@db-host/kopt, the URL the first worker was given",
        )
    pm = app.plugin_manager()
    pool = open_pool(pm, executor, executor_options)
    out = Path(out_dir) if out_dir else default_out_dir(kernel)
    if out_dir is None:
        outputs.check_writable(out, folder=True)
    outcome = search_kernel(
        pm,
        kernel,
        reference,
        dims,
        out_dir=out,
        trials=default_trials(trials, time_budget_s, sampler),
        time_budget_s=time_budget_s,
        sampler=sampler,
        storage=storage,
        seed=seed,
        backend=backend,
        progress=not as_json and sys.stderr.isatty(),  # a bar only where a person watches
        on_warning=render.warning,
        compile_jobs=compile_jobs,
        pool=pool,
        join=join,
    )
    failure = search_failure(outcome)
    if as_json:
        return envelope.emit(
            "search", envelope.exit_code(failure), outcome.to_data(), envelope.failure(failure)
        )
    render.search_report(outcome)
    return envelope.exit_code(failure)
