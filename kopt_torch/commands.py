"""The commands kopt-torch adds to ``kopt`` (through ``kopt_register_commands``): ``kopt import
kernelbench`` and ``kopt suite``. Thin: they parse, call kopt_torch.kbimport / kopt_torch.suite with the
core's public API, and print. A user's mistake is a ``KoptError``, which ends the command with its exit
code (4 for a bad problem, manifest or dims; 3 when the hardware or a tool is missing)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import click

from kopt_core.errors import ConfigError


def _overrides(words: tuple[str, ...]) -> dict[str, Any]:
    """``--dim NAME=VALUE`` words as the core reads ``--NAME=VALUE`` dims (numbers, one value per name)."""
    from kopt_core.dims import parse_dims

    for word in words:
        name, sep, _ = word.partition("=")
        if not sep or not name.isidentifier():
            raise ConfigError(f"--dim {word!r}: give NAME=VALUE (a size of the problems, e.g. batch_size=64)")
    return dict(parse_dims(None, [f"--{word}" for word in words]))


@click.group("import")
def import_group() -> None:
    """Import problems written for other tools as kopt references and baselines."""


@import_group.command("kernelbench")
@click.argument("problem", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--out", type=click.Path(file_okay=False), default=None, help="Folder to write (default: ./<stem>)."
)
@click.option("--atol", type=float, default=None, help="atol to write into ref.py (default: by dtype).")
@click.option("--rtol", type=float, default=None, help="rtol to write into ref.py (default: by dtype).")
@click.option("--force", is_flag=True, help="Replace a problem imported there before.")
def kernelbench_command(
    problem: str, out: str | None, atol: float | None, rtol: float | None, force: bool
) -> None:
    """Write PROBLEM (KernelBench's format: Model, get_inputs, get_init_inputs) as ref.py and baseline.py.

    The problem's module-level sizes become dims (--NAME=VALUE on kopt bench, profile and optimize)."""
    from kopt_torch.kbimport import import_problem

    folder = Path(out) if out else Path.cwd() / Path(problem).stem
    done = import_problem(problem, folder, atol=atol, rtol=rtol, force=force)
    dims = " ".join(f"--{k}={v}" for k, v in done.dims.items())
    click.echo(f"wrote {done.folder}: problem.py, ref.py, baseline.py, problem.json")
    for item in done.inputs:
        click.echo(f"  input  {item['name']}: {item.get('dtype', '')} {item.get('shape', item.get('value'))}")
    for item in done.outputs:
        click.echo(f"  output {item['name']}: {item['dtype']} {item['shape']}")
    click.echo(f"next: kopt bench {done.baseline} --ref {done.reference} {dims}".rstrip())
    click.echo(f"      kopt optimize --baseline {done.baseline} --ref {done.reference} {dims}".rstrip())


@click.command("suite")
@click.argument("problems", type=click.Path(exists=True), required=False)
@click.argument("solutions", type=click.Path(exists=True, file_okay=False), required=False)
@click.option(
    "--manifest", type=click.Path(dir_okay=False, exists=True), default=None, help="JSON list of pairs."
)
@click.option(
    "--out", type=click.Path(file_okay=False), default="suite", show_default=True, help="Suite folder."
)
@click.option("--dim", "dims", multiple=True, help="NAME=VALUE for every problem that has that size.")
@click.option("--compile", "compile_baseline", is_flag=True, help="Also time torch.compile of each problem.")
@click.option("--force", is_flag=True, help="Redo pairs the folder already has rows for.")
@click.option("--budget-s", type=float, default=2.0, show_default=True, help="Timing budget per kernel.")
@click.option("--json", "as_json", is_flag=True, help="Print suite.json's summary as JSON.")
def suite_command(
    problems: str | None,
    solutions: str | None,
    manifest: str | None,
    out: str,
    dims: tuple[str, ...],
    compile_baseline: bool,
    force: bool,
    budget_s: float,
    as_json: bool,
) -> None:
    """Check and time many problem/solution pairs; report correctness, failures, speedups and fast_p.

    Pairs come from --manifest, or by name: each problem under PROBLEMS with each solution under SOLUTIONS
    whose file name starts with the problem's (the eager baseline alone when none does). Resumable: rerun
    the same command to continue. Exit 0 when a solution is correct, 2 when none is."""
    import kopt_core
    from kopt_torch import scores
    from kopt_torch.suite import Suite, pair_folders, read_manifest

    if manifest:
        pairs = read_manifest(manifest)
    elif problems:
        pairs = pair_folders(problems, solutions)
    else:
        raise ConfigError("give PROBLEMS [SOLUTIONS] or --manifest FILE")
    pm = kopt_core.get_plugin_manager()
    options = kopt_core.BenchOptions(time_reference=False, budget_s=budget_s)

    def shown(row: scores.Row) -> None:
        verdict = f"{row.speedup:.2f}x" if row.correct and row.speedup else (row.failure or "failed")
        click.echo(f"{row.problem} {row.solution}: {verdict}", err=True)

    suite = Suite(
        out,
        functools.partial(kopt_core.bench_kernel, pm),
        options,
        overrides=_overrides(dims),
        compile_baseline=compile_baseline,
        force=force,
        on_row=shown,
    )
    rows, summary = suite.run(pairs)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    else:
        click.echo(scores.table(rows, summary))
    if not any(row.correct for row in rows):
        raise click.exceptions.Exit(2)
