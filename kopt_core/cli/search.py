"""``kopt search KERNEL --ref R <dims>``: the fastest configuration of the tunables KERNEL declares
(kopt_core.steps.search), every configuration checked and timed like any kernel.

Exit codes: 0 a configuration passed (best.json, best.<ext>); 2 none passed; 3 no GPU or no tool (after
the static checks); 4 a bad kernel, space, reference, dims or option.
"""

from __future__ import annotations

import click

from kopt_core.cli import POSITIVE, _plugin_manager, cli, envelope, outputs, render

SAMPLERS = ("tpe", "grid", "random", "cmaes")
SEED_MAX = (1 << 32) - 1  # Optuna's samplers seed numpy, which takes 32 bits


@cli.command("search", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("kernel", type=click.Path(dir_okay=False))
@click.option("--ref", "reference", required=True, type=click.Path(dir_okay=False), help="Reference file.")
@click.option("--dims", "dims_json", default=None, help='Dims as JSON, e.g. \'{"M":4096,"N":4096}\'.')
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=None,
    help="Configurations the study evaluates in all, across resumes (default: 24; the grid sampler: "
    "every valid point).",
)
@click.option(
    "--time-budget",
    "time_budget_s",
    type=POSITIVE,
    default=None,
    help="Seconds of search in this call, checked between configurations.",
)
@click.option(
    "--sampler", type=click.Choice(SAMPLERS), default="tpe", show_default=True, help="The study's sampler."
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
@click.option(
    "--compile-jobs",
    default="auto",
    show_default=True,
    help="Configurations built at once in the compile pool before each is timed: auto or N.",
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
    from kopt_core.steps.search import DEFAULT_TRIALS, search_kernel

    dims = parse_dims(dims_json, extra)
    if trials is None and time_budget_s is None and sampler != "grid":
        trials = DEFAULT_TRIALS
    out = Path(out_dir) if out_dir else Path(f"kopt_search_{Path(kernel).stem}")
    if out_dir is None:
        outputs.check_writable(out, folder=True)
    outcome = search_kernel(
        _plugin_manager(),
        kernel,
        reference,
        dims,
        out_dir=out,
        trials=trials,
        time_budget_s=time_budget_s,
        sampler=sampler,
        storage=storage,
        seed=seed,
        backend=backend,
        progress=not as_json and sys.stderr.isatty(),  # a bar only where a person watches
        on_warning=render.warning,
        compile_jobs=compile_jobs,
    )
    code = 0 if outcome.best is not None else 2
    if as_json:
        error = None
        if code:
            error = envelope.error_data(
                "ValidationError",
                f"no configuration passed every check ({len(outcome.result.trials)} evaluated): "
                f"see {outcome.trials_csv}",
            )
        return envelope.emit("search", code, outcome.to_data(), error)
    search_report(outcome)
    return code


def search_report(outcome) -> None:
    """The fastest configurations (at most 5) and how fast the search went."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from kopt_core.run.summary import fmt_ms

    result = outcome.result
    top = outcome.top()
    table = Table(title=escape(f"kopt search: {outcome.kernel}"))
    for column in ("#", "config id", "configuration", "median", "vs best", "trial"):
        table.add_column(column, overflow="fold")
    best_ms = top[0].value_ms if top else None
    for rank, record in enumerate(top, start=1):
        ratio = f"{record.value_ms / best_ms:.2f}x" if best_ms else "-"
        table.add_row(
            str(rank),
            escape(record.config_id),
            escape(outcome.labels.get(record.config_id, "")),
            fmt_ms(record.value_ms),
            ratio,
            str(record.number),
        )
    render.out.print(table)
    lines = [
        f"{len(result.trials)} configurations evaluated in the study ({result.evaluated_now} now, "
        f"{result.failures} failed, {result.rejected} rejected by a constraint, {result.duplicates} "
        f"proposed again); stopped: {result.stop_reason}",
        f"{result.evaluated_now} in {result.elapsed_s:.1f} s: {result.trials_per_minute:.1f} trials/minute",
        f"trials: {outcome.trials_csv}",
    ]
    if outcome.best_file is not None:
        lines.append(f"best: {outcome.best_file} ({outcome.best_json})")
    else:
        lines.append("no configuration passed every check: the failures' reasons are in trials.csv")
    render.out.print(Text("\n".join(lines)))
