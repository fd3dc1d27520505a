"""``kopt optimize``: the whole run in one command (kopt_core.run.optimize), or ``--resume RUN``."""

from __future__ import annotations

import json

import click
from click.core import ParameterSource

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.records.state import State


@app.cli.command("optimize", context_settings=app.FREE_ARGUMENTS)
@click.option("--baseline", type=click.Path(dir_okay=False), default=None, help="Baseline kernel file.")
@click.option("--ref", "reference", type=click.Path(dir_okay=False), default=None, help="Reference file.")
@app.dims_option()
@click.option(
    "--generator",
    default=None,
    help="Who writes each iteration's candidates: agent, command, search, or an installed plugin's.",
)
@click.option(
    "--generator-option",
    "generator_options",
    multiple=True,
    callback=app.key_values,
    metavar="KEY=VALUE",
    help='An option of the generator (repeatable), e.g. \'command=["python3","gen.py"]\' or trials=24.',
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=app.default_of(State, "iterations_total"),
    show_default=True,
    help="Most iterations.",
)
@click.option(
    "--k",
    "k",
    type=click.IntRange(min=1),
    default=app.default_of(State, "branches"),
    show_default=True,
    help="Branches per iteration.",
)
@app.numerics_mode_option("Numerical contract for methods.")
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture for the static build (default: the GPU's).")
@app.compile_jobs_option()
@app.SANITIZER_TIMEOUT
@click.option(
    "--resume", "resume", type=click.Path(file_okay=False), default=None, help="Continue the run in RUN."
)
@click.option("--json", "as_json", is_flag=True, help="Print the envelope (result: where the run stands).")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[--NAME=VALUE]...")
def optimize_cmd(
    baseline,
    reference,
    dims_json,
    generator,
    generator_options,
    iterations,
    k,
    numerics_mode,
    backend,
    arch,
    compile_jobs,
    sanitizer_timeout_s,
    resume,
    as_json,
    extra,
) -> int:
    """Optimize a kernel end to end: preflight, gate, init, seed, then per iteration open, select,
    generate, explore, champion profile, ablate, sass and update, then summarize.

    Exit 0: the run completed, or it awaits an agent's candidates (the brief's path is printed; continue
    with --resume RUN). 2: no valid kernel (every branch failed, or the generator did). 3: hardware, tool
    or ncu failure. 4: bad baseline, reference, dims or options.

    With --resume RUN, each option given is applied to the run in progress (--iterations, --k for the
    iterations whose candidates are still to be written, --compile-jobs, --sanitizer-timeout, --generator,
    --generator-option) or refused with its reason (--numerics-mode and --backend are fixed when a run
    starts, --arch is a new run's): one refusal changes nothing and exits 4."""
    from pathlib import Path

    from kopt_core.dims import parse_dims
    from kopt_core.errors import ConfigError
    from kopt_core.run.optimize import ResumeOptions, resume_run, start_run

    pm = app.plugin_manager()
    argv = click.get_current_context().meta.get(app.AFTER_DOUBLE_DASH)
    if argv is not None:
        # `--generator command -- python3 gen.py --fast`: the words after "--" are the command's argv
        # (docs/plugins.md), the same as --generator-option 'command=["python3", "gen.py", "--fast"]'.
        if generator != "command" or not argv:
            raise ConfigError(
                "the words after `--` are the command generator's program and its arguments: give them "
                "with --generator command, e.g. `--generator command -- python3 gen.py`"
            )
        if "command" in generator_options:
            raise ConfigError("the command is given twice: after `--` and as --generator-option command=...")
        generator_options = {**generator_options, "command": json.dumps(argv)}
    if resume is not None:
        if baseline or reference or extra or dims_json:
            raise ConfigError("--resume continues a run as it was started: leave out --baseline, --ref, dims")
        ctx = click.get_current_context()

        def given(name: str, value):
            """``value`` when the user gave the option, None when it holds its default."""
            source = ctx.get_parameter_source(name)
            return None if source in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP) else value

        options = ResumeOptions(
            generator=given("generator", generator),
            generator_options=(
                generator_options if argv is not None else given("generator_options", generator_options)
            ),
            iterations=given("iterations", iterations),
            k=given("k", k),
            compile_jobs=given("compile_jobs", compile_jobs),
            sanitizer_timeout_s=given("sanitizer_timeout_s", sanitizer_timeout_s),
            numerics_mode=given("numerics_mode", numerics_mode),
            backend=given("backend", backend),
            arch=given("arch", arch),
        )
        outcome = resume_run(
            pm,
            resume,
            given=options,
            on_applied=lambda change: click.echo(f"kopt: resumed with {change}", err=True),
        )
    else:
        missing = [name for name, value in (("--baseline", baseline), ("--ref", reference)) if not value]
        if missing or generator is None:
            missing += [] if generator else ["--generator"]
            raise ConfigError(f"a new run needs {', '.join(missing)} (or --resume RUN to continue one)")
        dims = parse_dims(dims_json, extra)
        outputs.claim(Path(baseline).resolve().parent, "the run folder in")
        outcome = start_run(
            pm,
            baseline=baseline,
            ref=reference,
            dims=dims,
            generator=generator,
            options=generator_options,
            iterations=iterations,
            k=k,
            numerics_mode=numerics_mode,
            backend=backend,
            compile_jobs=compile_jobs,
            sanitizer_timeout_s=sanitizer_timeout_s,
            arch=arch,
            on_warning=render.warning,
        )
    if as_json:
        written = envelope.Written(outcome.run_dir)
        written.before = {}
        result = envelope.run_result(
            outcome.run_dir,
            written,
            path=str(outcome.run_dir),
            status=outcome.status,
            iterations_closed=outcome.iterations_closed,
            best_file=outcome.best_file,
            best_metric_ms=outcome.best_ms,
            baseline_ms=outcome.baseline_ms,
            brief=outcome.brief,
            applied=list(outcome.applied),
        )
        return envelope.emit("optimize", 0, result)
    render.optimize_report(outcome)
    return 0


# The words after `--` are the command generator's program and its arguments (app.KoptCommand).
optimize_cmd.takes_argv = True  # type: ignore[attr-defined]
