"""The ``kopt`` command line: thin commands over kopt_core's functions.

Exit codes (docs/loop.md): 0 ok, 2 no valid kernel, 3 hardware/tool failure, 4 bad kernel file,
reference or dims. Click's own usage errors are configuration errors (4), never 2.
"""

from __future__ import annotations

import math
import sys

import click

from kopt_core import __version__, progress
from kopt_core.cli import envelope, outputs, render
from kopt_core.errors import EXIT_CONFIG, EXIT_HARDWARE, KoptError
from kopt_core.jsonio import dumps
from kopt_core.records.state import SANITIZER_TIMEOUT_S

# A run's limit on each compute-sanitizer tool per branch (state.json sanitizer_timeout_s): init, optimize.
SANITIZER_TIMEOUT = click.option(
    "--sanitizer-timeout",
    "sanitizer_timeout_s",
    type=click.FloatRange(min=0, min_open=True, max=86400),
    default=SANITIZER_TIMEOUT_S,
    show_default=True,
    help="Seconds each compute-sanitizer tool may take on a branch; past it, race_safe is unknown.",
)


class KoptGroup(click.Group):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        outputs.USER_OUTPUTS.clear()  # the outputs this command line chose, for the OSError below
        raw = list(sys.argv[1:] if args is None else args)
        as_json = envelope.wants_json(raw)
        failure: dict | None = None
        # what kopt is doing, on stderr while it builds, profiles or times: a status line on a terminal, a
        # line per step elsewhere (stdout stays the envelope's alone with --json)
        shown_before = progress.install(render.status_line())
        try:
            code = super().main(
                args=args,
                prog_name=prog_name or "kopt",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except click.exceptions.Abort:
            render.error("aborted")
            code = 1
            failure = envelope.error_data("Abort", "aborted")
        except click.ClickException as exc:  # usage errors: a bad command line is a configuration error
            exc.show()
            code = EXIT_CONFIG
            failure = envelope.error_data("UsageError", exc.format_message())
        except KoptError as exc:
            render.error(str(exc))
            code = exc.exit_code
            failure = envelope.kopt_error(exc)
        except OSError as exc:  # a path the system refused: the user's --out (exit 4) or kopt's own (1)
            message, code = outputs.os_error(exc)
            render.error(message)
            failure = envelope.error_data("ConfigError" if code == EXIT_CONFIG else "OSError", message)
        progress.install(shown_before)
        if failure is not None and as_json:  # the command printed nothing: the failure is the envelope
            envelope.emit(envelope.command_of(self, raw), code, None, failure)
        if not standalone_mode:
            return code
        sys.exit(code or 0)


@click.group(cls=KoptGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kopt")
def cli() -> None:
    """kopt: make GPU kernels faster with evidence instead of guesswork."""


def _plugin_manager():
    from kopt_core.plugins import get_plugin_manager

    return get_plugin_manager()


@cli.command("plugins")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: {plugins: [...]}) on stdout."
)
def plugins_cmd(as_json: bool) -> int:
    """List loaded plugins (name, package version, hooks) as JSON."""
    from kopt_core.plugins import describe_plugins

    plugins = describe_plugins(_plugin_manager())
    if as_json:
        return envelope.emit("plugins", 0, {"plugins": plugins})
    click.echo(dumps(plugins), nl=False)
    return 0


@cli.command("backends")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: {backends: [...]}) on stdout."
)
def backends_cmd(as_json: bool) -> int:
    """List backends: file suffixes, whether each is available here, and why not."""
    from kopt_core.steps.backends import list_backends

    rows = list_backends(_plugin_manager())
    if as_json:
        return envelope.emit("backends", 0, {"backends": rows})
    render.backends_table(rows)
    return 0


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


class FiniteRange(click.FloatRange):
    """A float in a range that is also finite: click's FloatRange lets nan (and inf with no maximum)
    through."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number in the range {self._describe_range()}.", param, ctx)
        return number


POSITIVE = FiniteRange(min=0, min_open=True)
NON_NEGATIVE = FiniteRange(min=0)


@cli.command(
    "bench",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("kernel", type=click.Path(dir_okay=False))
@click.option(
    "--ref",
    "reference",
    required=True,
    type=click.Path(dir_okay=False),
    help="Reference file with reference(**kwargs).",
)
@click.option("--dims", "dims_json", default=None, help='Dims as JSON, e.g. \'{"M":4096,"N":4096}\'.')
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture, e.g. sm_90a (default: the GPU's).")
@click.option("--seeds", default="0,1,2", callback=_seeds, show_default=True, help="Correctness seeds.")
@click.option(
    "--l2",
    type=click.Choice(["cold", "warm"]),
    default="cold",
    show_default=True,
    help="Flush (or rotate past) the L2 before each timed launch, or not.",
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "per_launch", "graph", "batched"]),
    default="auto",
    show_default=True,
    help="Timing mode; auto uses graph replays for kernels under --tiny-us.",
)
@click.option(
    "--warmup-ms",
    type=NON_NEGATIVE,
    default=200.0,
    show_default=True,
    help="Warm-up time per timed function.",
)
@click.option(
    "--budget-s", type=POSITIVE, default=3.0, show_default=True, help="Sampling time budget per function."
)
@click.option(
    "--precision",
    type=FiniteRange(min=0, max=1, min_open=True),
    default=0.005,
    show_default=True,
    help="Stop sampling when the median's 95% interval is within this relative half-width.",
)
@click.option(
    "--tiny-us",
    type=NON_NEGATIVE,
    default=20.0,
    show_default=True,
    help="Kernels faster than this are timed as graph replays / batches.",
)
@click.option(
    "--timeout-s", type=POSITIVE, default=300.0, show_default=True, help="Wall-clock limit for the worker."
)
@click.option("--atol", type=NON_NEGATIVE, default=None, help="Override the reference's atol.")
@click.option("--rtol", type=NON_NEGATIVE, default=None, help="Override the reference's rtol.")
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
    from kopt_core.errors import HardwareError
    from kopt_core.records import BenchOptions, to_data
    from kopt_core.steps.bench import bench_kernel, exit_code

    dims = parse_dims(dims_json, extra)
    try:
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
        result = bench_kernel(
            _plugin_manager(),
            kernel,
            reference,
            dims,
            backend=backend,
            options=options,
            arch=arch,
            on_warning=render.warning,
            out=out,
        )
    except HardwareError as exc:
        # exit 3 before a worker ran (no GPU, the backend cannot run here): the contract was checked, so
        # bench.json and the envelope still carry a result, one that says why nothing was measured
        failed = _bench_error_result(kernel, reference, backend, dims, options, exc)
        if out:
            from kopt_core.jsonio import write_json

            write_json(out, failed)
        render.error(str(exc))
        if as_json:
            return envelope.emit("bench", exc.exit_code, failed, envelope.kopt_error(exc))
        return exc.exit_code
    code = exit_code(result)
    if as_json:
        error = None
        if code:
            message = result.error or f"the kernel did not pass (status {result.status})"
            error = envelope.error_data(envelope.TYPE_FOR_EXIT.get(code, "KoptError"), message)
        return envelope.emit("bench", code, to_data(result), error)
    render.bench_report(result)
    return code


def _bench_error_result(kernel, reference, backend, dims, options, exc: KoptError) -> dict:
    """bench.json for a bench that stopped before its worker: status error, stage device."""
    from datetime import datetime, timezone
    from pathlib import Path

    from kopt_core.backends import BackendRegistry
    from kopt_core.records import BenchResult, to_data

    if not backend:
        try:
            backend = BackendRegistry.from_plugins(_plugin_manager()).detect(kernel).name
        except KoptError:
            backend = ""
    return to_data(
        BenchResult(
            kernel=str(Path(kernel).resolve()),
            backend=backend,
            status="error",
            error=str(exc),
            error_stage="device",
            reference_file=str(Path(reference).resolve()),
            dims=dict(dims),
            options=options,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            kopt_version=__version__,
        )
    )


@cli.command("profile", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--ref",
    "reference",
    type=click.Path(dir_okay=False),
    help="Reference file (its workload_model makes the roofline real).",
)
@click.option(
    "--import",
    "import_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Analyse an existing .ncu-rep (needs ncu) or raw-page CSV (needs nothing) instead of profiling.",
)
@click.option("--dims", "dims_json", default=None, help="Dims as JSON.")
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture (default: the GPU's).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    callback=outputs.out_folder,
    help=(
        "Folder for the report, ncu_top.json, roofline.json and the plot (default: ./kopt_profile_<kernel>)."
    ),
)
@click.option(
    "--ncu-num", type=click.IntRange(1, 50), default=5, show_default=True, help="Top metrics per axis."
)
@click.option(
    "--bundle",
    type=click.Choice(["auto", "full", "light"]),
    default="auto",
    show_default=True,
    help="ncu metric bundle: auto = full below 10 ms of kernel time, light above.",
)
@click.option(
    "--ncu-timeout-s", type=POSITIVE, default=600.0, show_default=True, help="Limit for one ncu run."
)
@click.option(
    "--full-timeout-s",
    type=POSITIVE,
    default=None,
    help="Limit for a full-set run (default: --ncu-timeout-s); past it kopt retries with the light set.",
)
@click.option(
    "--ceilings",
    type=click.Path(dir_okay=False),
    default=None,
    help="Device ceilings JSON (python -m kopt_core.roofline.ceilings); default: built-in H200 figures.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the envelope (result: profile.json with the roofline and the output folder) on stdout.",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(),
    default=None,
    help="Run form: the run's state.json; with --iter and --which, profile into iterv{i}/.",
)
@click.option("--iter", "iteration", type=click.IntRange(1, None), default=None, help="Run form: iteration.")
@click.option(
    "--which",
    type=click.Choice(["best_input", "kernel"]),
    default=None,
    help="Run form: the iteration's input (the current best) or its champion.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[KERNEL] [--NAME=VALUE]...")
def profile_cmd(
    args,
    reference,
    import_path,
    dims_json,
    backend,
    arch,
    out_dir,
    ncu_num,
    bundle,
    ncu_timeout_s,
    full_timeout_s,
    ceilings,
    as_json,
    state_path,
    iteration,
    which,
) -> int:
    """Profile KERNEL with Nsight Compute and write ncu_top.json, roofline.json and a roofline plot.

    Or, with --import, do the same from an existing report or its CSV export.
    """
    from kopt_core.dims import parse_dims
    from kopt_core.errors import ConfigError
    from kopt_core.records import ProfileOptions, to_data
    from kopt_core.steps.profile import load_ceilings, profile_standalone

    if state_path or iteration or which:
        if not (state_path and iteration and which):
            raise ConfigError("the run form needs all of --state, --iter and --which")
        from kopt_core.run.iteration import profile_in_run

        store = _store(state_path)
        written = envelope.Written(store.run_dir)
        folder = profile_in_run(_plugin_manager(), store, iteration, which)
        if as_json:
            return envelope.emit("profile", 0, envelope.run_result(store.run_dir, written, path=str(folder)))
        click.echo(str(folder))
        return 0
    # KERNEL is optional (--import needs none), so it is read from the free arguments: the first one that
    # is not an option; the rest are dims.
    kernel, extra = (args[0], args[1:]) if args and not args[0].startswith("--") else (None, args)
    dims = parse_dims(dims_json, extra)
    options = ProfileOptions(
        ncu_num=ncu_num,
        bundle=None if bundle == "auto" else bundle,
        ncu_timeout_s=ncu_timeout_s,
        full_timeout_s=full_timeout_s,
        ceilings=load_ceilings(ceilings),
    )
    outcome = profile_standalone(
        kernel,
        reference,
        dims,
        import_path=import_path,
        out_dir=out_dir,
        backend=backend,
        arch=arch,
        options=options,
        on_warning=render.warning,
    )
    if as_json:
        result = {
            **to_data(outcome.summary),
            "roofline": to_data(outcome.roofline),
            "out_dir": str(outcome.out_dir),
        }
        return envelope.emit("profile", 0, result)
    render.profile_report(outcome)
    return 0


@cli.command("gate")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="env.json",
    show_default=True,
    callback=outputs.out_file,
    help="Write env.json here (also when the gate refuses: it is the evidence).",
)
@click.option(
    "--backend",
    default="cuda",
    show_default=True,
    help="Backend whose tools and dependencies must resolve (an installed one: see kopt backends).",
)
@click.option(
    "--attempts",
    type=click.IntRange(1, 3),
    default=3,
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
    from pathlib import Path

    from kopt_core.errors import EXIT_OK
    from kopt_core.records import to_data
    from kopt_core.steps.gate import run_gate

    env = run_gate(
        _plugin_manager(),
        backend=backend,
        attempts=attempts,
        diagnostic=diagnostic,
        measure=not no_ceilings,
        out=Path(out),
        on_progress=lambda message: render.err.print(
            f"kopt gate: {message}", style="dim", highlight=False, markup=False, soft_wrap=True
        ),
    )
    if not as_json:
        render.gate_report(env)
    if env.generation_allowed:
        return envelope.emit("gate", EXIT_OK, to_data(env)) if as_json else EXIT_OK
    if diagnostic:
        render.warning(
            f"diagnostic run: generation is never authorised; wrote {out}"
            + "".join(f"\n  - {problem}" for problem in env.problems)
        )
        return envelope.emit("gate", EXIT_OK, to_data(env)) if as_json else EXIT_OK
    problems = "".join(f"\n  - {problem}" for problem in env.problems)
    refusal = f"the hardware gate refuses generation ({env.attempts} attempt(s); evidence in {out}):"
    refusal += problems
    render.error(refusal)
    if as_json:
        error = envelope.error_data("HardwareError", refusal)
        return envelope.emit("gate", EXIT_HARDWARE, to_data(env), error)
    return EXIT_HARDWARE


# ---------------------------------------------------------------------------------------- run: init, status


@cli.command("init", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline kernel file.")
@click.option(
    "--ref",
    "reference",
    required=True,
    type=click.Path(dir_okay=False),
    help="Reference file with reference(**kwargs).",
)
@click.option("--dims", "dims_json", default=None, help='Dims as JSON, e.g. \'{"M":4096,"N":4096}\'.')
@click.option(
    "--env",
    "env_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="env.json written by `kopt gate --out env.json`.",
)
@click.option(
    "--iterations", type=click.IntRange(min=1), default=3, show_default=True, help="Most iterations to run."
)
@click.option(
    "--ncu-num", type=click.IntRange(1, 50), default=5, show_default=True, help="Top ncu metrics per axis."
)
@click.option(
    "--branches",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Branch kernels per iteration.",
)
@click.option("--compile-jobs", default="auto", show_default=True, help="Parallel CPU compiles: auto or N.")
@SANITIZER_TIMEOUT
@click.option(
    "--numerics-mode",
    type=click.Choice(["reference", "strict", "approximate"]),
    default="reference",
    show_default=True,
    help="Numerical contract for methods.",
)
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
        _plugin_manager(),
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


@cli.command("status")
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


def _store(state_path: str):
    from pathlib import Path

    from kopt_core.run.store import RunStore

    path = Path(state_path)
    return RunStore(path.parent if path.name == "state.json" else path)


@cli.command("preflight", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline kernel file.")
@click.option("--ref", "reference", required=True, type=click.Path(dir_okay=False), help="Reference file.")
@click.option("--dims", "dims_json", default=None, help="Dims as JSON.")
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture for the build check (default: the GPU's).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: what was checked) on stdout."
)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[--NAME=VALUE]...")
def preflight_cmd(baseline, reference, dims_json, backend, arch, as_json, extra) -> int:
    """The static contract: the kernel parses and builds, the reference imports and fits, every dim is
    given. No GPU needed. Exit 4 with the reasons."""
    from pathlib import Path

    from kopt_core.dims import parse_dims
    from kopt_core.steps.bench import preflight_kernel

    dims = parse_dims(dims_json, extra)
    outcome = preflight_kernel(
        _plugin_manager(),
        baseline,
        reference,
        dims,
        backend=backend,
        arch=arch,
        on_warning=render.warning,
    )
    if as_json:
        result = {
            "kernel": str(Path(baseline).resolve()),
            "reference": str(Path(reference).resolve()),
            "dims": dims,
            "backend": backend,
            "arch": arch,
            "checks": ["kernel contract", "reference", "dims", "build"],
            "summary": outcome,
        }
        return envelope.emit("preflight", 0, result)
    click.echo(f"preflight passed: {outcome}")
    return 0


@cli.command("seed")
@click.option(
    "--state", "state_path", required=True, type=click.Path(), help="The run's state.json (or folder)."
)
@click.option(
    "--retry",
    is_flag=True,
    help="The run stopped on a hardware/tool failure (exit 3): clear the stop and seed again.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the envelope (result: the run folder) on stdout."
)
def seed_cmd(state_path, retry, as_json) -> int:
    """Validate, time and profile the baseline into baseline/; stop the run (stop.json) if it fails.
    A stopped run answers with what stopped it, exiting with that stop's code."""
    from kopt_core.run.seed import seed_baseline

    store = _store(state_path)
    written = envelope.Written(store.run_dir)
    state = seed_baseline(_plugin_manager(), store, retry=retry)
    if as_json:
        result = envelope.run_result(store.run_dir, written, best_metric_ms=state.best_metric_ms)
        return envelope.emit("seed", 0, result)
    click.echo(f"seeded: baseline {state.best_metric_ms:.4f} ms")
    return 0


@cli.group("iter")
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

    store = _store(state_path)
    written = envelope.Written(store.run_dir)
    folder = open_iteration(_plugin_manager(), store, iteration)
    if as_json:
        return envelope.emit("iter open", 0, envelope.run_result(store.run_dir, written, path=str(folder)))
    click.echo(str(folder))
    return 0


def _method_ids(_ctx, _param, value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    ids = tuple(part.strip() for part in value.split(",") if part.strip())
    if not ids:
        raise click.BadParameter("give method ids separated by commas, e.g. memory.smem_tiling,latency.ilp")
    return ids


@cli.command("select")
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
@click.option("--arch", default="sm_90a", show_default=True, help="Standalone form: target architecture.")
@click.option("--backend", default="cuda", show_default=True, help="Standalone form: backend.")
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    help="Standalone form: operand dtype(s), e.g. float16 (default: the inputs' dtypes in the profile.json "
    "beside roofline.json).",
)
@click.option(
    "--numerics-mode",
    type=click.Choice(["reference", "strict", "approximate"]),
    default="reference",
    show_default=True,
    help="Standalone form: numerics mode.",
)
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

        store = _store(state_path)
        written = envelope.Written(store.run_dir)
        path = select_in_run(
            _plugin_manager(), store, iteration, acknowledged=tuple(acknowledged), methods=methods, why=why
        )
        if as_json:
            return envelope.emit("select", 0, envelope.run_result(store.run_dir, written, path=str(path)))
        click.echo(str(path))
        return 0
    if not (roofline_path and ncu_top_path):
        raise ConfigError("give --state and --iter, or --roofline and --ncu-top")
    from pathlib import Path

    from kopt_core.backends import BackendRegistry
    from kopt_core.steps.select import select_standalone

    installed = tuple(BackendRegistry.from_plugins(_plugin_manager()).backends)
    written = envelope.Written(Path(out_dir or Path(roofline_path).parent))
    path = select_standalone(
        roofline_path,
        ncu_top_path,
        arch=arch,
        backend=backend,
        numerics_mode=numerics_mode,
        dtypes=tuple(dtypes),
        sass_path=sass_path,
        out_dir=out_dir,
        installed_backends=installed,
        methods=methods,
        why=why,
    )
    if as_json:
        return envelope.emit("select", 0, envelope.run_result(None, written, path=str(path)))
    click.echo(str(path))
    return 0


@cli.command("sass")
@click.argument("target", type=click.Path(dir_okay=False), required=False)
@click.option("--method", "methods", multiple=True, help="Method id (repeat for several).")
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    default=None,
    help="The baseline's SASS, cubin or library, for rules relative to it.",
)
@click.option(
    "--arch", default="sm_90a", show_default=True, help="The architecture the target was built for."
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
    from kopt_core.steps.sass import check_sass

    if state_path is not None or iteration is not None:
        if state_path is None or iteration is None or target is not None or methods:
            raise ConfigError("the run form takes --state and --iter, and no TARGET or --method")
        from kopt_core.run.sass_check import check_iteration_sass

        record = check_iteration_sass(_plugin_manager(), _store(state_path), iteration)
        code = (
            EXIT_HARDWARE if record.methods and all(m.status == "tool_error" for m in record.methods) else 0
        )
        if as_json:
            error = (
                envelope.error_data("HardwareError", "no disassembler could read the champion")
                if code
                else None
            )
            return envelope.emit(
                "sass", code, {"target": record.artifact, "verdicts": to_data(record.methods)}, error
            )
        render.sass_check_report(record)
        return code
    else:
        if target is None or not methods:
            raise ConfigError("give TARGET and at least one --method, or the run form --state and --iter")
        verdicts = check_sass(
            _plugin_manager(), target, list(methods), arch=parse_arch(arch), baseline=baseline
        )
    code = EXIT_HARDWARE if verdicts and all(v.status == "tool_error" for v in verdicts) else 0
    if as_json:
        result = {"target": str(target), "verdicts": [to_data(v) for v in verdicts]}
        error = None
        if code:
            error = envelope.error_data("HardwareError", "no disassembler could read the target")
        return envelope.emit("sass", code, result, error)
    render.sass_report(target, verdicts)
    return code


# the loop's steps after select (explore, ablate, update, summarize) register themselves on the group
from kopt_core.cli import loop as _loop  # noqa: E402,F401
from kopt_core.cli import optimize as _optimize  # noqa: E402,F401
from kopt_core.cli import search as _search  # noqa: E402,F401


def main() -> None:
    cli.main()
