"""``kopt bench`` (check a kernel against its reference and time both) and ``kopt preflight`` (the static
contract, no GPU)."""

from __future__ import annotations

from typing import get_args

import click

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.records import BenchOptions
from kopt_core.records.bench import L2Mode, TimingMode

SEED_MAX = (1 << 63) - 1


def _seeds(_ctx, _param, value: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in value.split(",") if s.strip())
    except ValueError:
        raise click.BadParameter("give seeds as integers separated by commas, e.g. 0,1,2") from None
    if not seeds:
        raise click.BadParameter("give at least one seed")
    for seed in seeds:
        if not 0 <= seed <= SEED_MAX:
            raise click.BadParameter(f"seed {seed} is out of range; give seeds 0 <= seed <= {SEED_MAX}")
    return seeds


def _bench_default(name: str):
    return app.default_of(BenchOptions, name)


@app.cli.command("bench", context_settings=app.FREE_ARGUMENTS)
@click.argument("kernel", type=click.Path(dir_okay=False))
@click.option(
    "--ref",
    "reference",
    required=True,
    type=click.Path(dir_okay=False),
    help="Reference file with reference(**kwargs).",
)
@app.dims_option()
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture, e.g. sm_90a (default: the GPU's).")
@click.option(
    "--seeds",
    default=",".join(str(seed) for seed in _bench_default("seeds")),
    callback=_seeds,
    show_default=True,
    help="Correctness seeds.",
)
@click.option(
    "--l2",
    type=click.Choice(get_args(L2Mode)),
    default=_bench_default("l2"),
    show_default=True,
    help="Flush (or rotate past) the L2 before each timed launch, or not.",
)
@click.option(
    "--mode",
    type=click.Choice(get_args(TimingMode)),
    default=_bench_default("mode"),
    show_default=True,
    help="Timing mode; auto uses graph replays for kernels under --tiny-us.",
)
@click.option(
    "--warmup-ms",
    type=app.NON_NEGATIVE,
    default=_bench_default("warmup_ms"),
    show_default=True,
    help="Warm-up time per timed function.",
)
@click.option(
    "--budget-s",
    type=app.POSITIVE,
    default=_bench_default("budget_s"),
    show_default=True,
    help="Sampling time budget per function.",
)
@click.option(
    "--precision",
    type=app.FiniteRange(min=0, max=1, min_open=True),
    default=_bench_default("rel_precision"),
    show_default=True,
    help="Stop sampling when the median's 95% interval is within this relative half-width.",
)
@click.option(
    "--tiny-us",
    type=app.NON_NEGATIVE,
    default=_bench_default("tiny_us"),
    show_default=True,
    help="Kernels faster than this are timed as graph replays / batches.",
)
@click.option(
    "--timeout-s",
    type=app.POSITIVE,
    default=_bench_default("timeout_s"),
    show_default=True,
    help="Wall-clock limit for the worker.",
)
@click.option("--atol", type=app.NON_NEGATIVE, default=None, help="Override the reference's atol.")
@click.option("--rtol", type=app.NON_NEGATIVE, default=None, help="Override the reference's rtol.")
@click.option("--no-reference-timing", is_flag=True, help="Do not time the reference.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    callback=outputs.out_file,
    help="Write bench.json here.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the BenchResult) on stdout."
)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def bench_cmd(
    kernel,
    reference,
    dims_json,
    backend,
    arch,
    seeds,
    l2,
    mode,
    warmup_ms,
    budget_s,
    precision,
    tiny_us,
    timeout_s,
    atol,
    rtol,
    no_reference_timing,
    out,
    as_json,
    extra,
) -> int:
    """Check KERNEL against its reference over several seeds and time both.

    Dims follow as --NAME=VALUE (e.g. --M=4096 --N=4096 --K=4096) or --dims JSON.
    """
    from kopt_core.dims import parse_dims
    from kopt_core.records import to_data
    from kopt_core.steps.bench import bench_outcome

    dims = parse_dims(dims_json, extra)
    options = BenchOptions(
        seeds=seeds,
        l2=l2,
        mode=mode,
        warmup_ms=warmup_ms,
        budget_s=budget_s,
        rel_precision=precision,
        tiny_us=tiny_us,
        timeout_s=timeout_s,
        atol=atol,
        rtol=rtol,
        time_reference=not no_reference_timing,
    )
    outcome = bench_outcome(
        app.plugin_manager(),
        kernel,
        reference,
        dims,
        backend=backend,
        options=options,
        arch=arch,
        on_warning=render.warning,
        out=out,
    )
    if not outcome.measured:  # nothing ran (exit 3): the reason is the whole report
        render.error(str(outcome.failure))
    if as_json:
        error = envelope.failure(outcome.failure)
        return envelope.emit("bench", outcome.exit_code, to_data(outcome.result), error)
    if outcome.measured:
        render.bench_report(outcome.result)
    return outcome.exit_code


@app.cli.command("preflight", context_settings=app.FREE_ARGUMENTS)
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline kernel file.")
@click.option("--ref", "reference", required=True, type=click.Path(dir_okay=False), help="Reference file.")
@app.dims_option("Dims as JSON.")
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture for the build check (default: the GPU's).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: what was checked) on stdout."
)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[--NAME=VALUE]...")
def preflight_cmd(baseline, reference, dims_json, backend, arch, as_json, extra) -> int:
    """The static contract: the kernel parses and builds, the reference imports and fits, every dim is
    given. No GPU needed. Exit 4 with the reasons."""
    from kopt_core.dims import parse_dims
    from kopt_core.steps.bench import preflight_checked, preflight_document

    dims = parse_dims(dims_json, extra)
    outcome = preflight_checked(
        app.plugin_manager(),
        baseline,
        reference,
        dims,
        backend=backend,
        arch=arch,
        on_warning=render.warning,
    )
    if as_json:
        result = preflight_document(baseline, reference, dims, outcome)
        return envelope.emit("preflight", 0, result)
    click.echo(f"preflight passed: {outcome}")
    return 0
