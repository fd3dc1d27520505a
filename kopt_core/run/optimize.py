"""``kopt optimize``: the whole run, step after step, with a generator writing each iteration's candidates.

    preflight -> gate -> init -> seed -> per iteration: open -> (near_peak stop) -> select -> generate
    -> explore -> champion profile -> ablate -> sass -> update -> ... -> summarize

Every step is the same function the one-step commands call (``kopt seed``, ``kopt explore``, ...), each
idempotent on what it already wrote, so ``kopt optimize --resume RUN`` goes on from wherever the run is:
after a kill, after an agent wrote its candidates, or after a stop that a retry may clear. What the run
was started with (the generator, its options) is kept in ``optimize.json`` in the run folder.

Stops, as the seed says: every branch failing (explore stops the run, exit 2); near_peak (the best
kernel's profile has a workload model and every gap below 0.15: the run completes early, exit 0); the
iteration limit (the last update completes the run). An agent generator leaves the run in
``awaiting_candidates`` (exit 0 with the brief's path); a generator that fails stops the run (exit 2).

``--resume`` applies every option given with it that a run in progress can take (the iteration limit,
the branches of the iterations whose candidates are still to be written, the compile pool, the sanitizer's
limit, the generator and its options) or refuses them all, each with its reason, before anything is
written (``ResumeOptions``, docs/loop.md, "Resuming a run").

The steps are a ``LoopSteps`` record of functions: the defaults are kopt's own; an embedder (or a test on
a machine without ncu) may hand in others for some of them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import field, frozen

from kopt_core import progress
from kopt_core.errors import ConfigError, ValidationError
from kopt_core.generate.base import GeneratorRegistry
from kopt_core.jsonio import write_json
from kopt_core.records import to_data
from kopt_core.records.converter import from_document
from kopt_core.records.state import SANITIZER_TIMEOUT_S, Env
from kopt_core.records.versions import OPTIMIZE_SCHEMA_VERSION
from kopt_core.run.layout import (
    BENCH_FILE,
    BRIEF_MD,
    CANDIDATES_FILE,
    CHAMPION,
    CHAMPION_REPORT,
    ENV_FILE,
    METHODS_FILE,
    OPTIMIZE_FILE,
    baseline_dir,
    iteration_dir,
)
from kopt_core.run.stop import stop_on_failure
from kopt_core.run.store import AWAITING_CANDIDATES, RunLocked, RunStore, optimize_resume_command

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager
    from kopt_core.records import GenerationResult
    from kopt_core.records.loop import AttributionRecord, ExploreRecord, SassCheckRecord
    from kopt_core.records.state import State


@frozen
class OptimizePlan:
    """optimize.json: how ``kopt optimize`` was started, so that ``--resume`` goes on the same way."""

    generator: str
    options: dict[str, str] = field(factory=dict)
    schema_version: int = OPTIMIZE_SCHEMA_VERSION


@frozen
class OptimizeOutcome:
    """Where a ``kopt optimize`` call left the run."""

    run_dir: Path
    status: str  # completed | awaiting_candidates (stops raise their KoptError)
    iterations_closed: int
    best_file: str
    best_ms: float | None
    baseline_ms: float | None
    message: str = ""
    brief: str | None = None  # the brief an agent is to read, while awaiting
    applied: tuple[str, ...] = ()  # what --resume changed, in words ("--iterations 5 (was 3)")


@frozen
class ResumeOptions:
    """The options a ``kopt optimize --resume`` was given explicitly; None: not given (the command line
    tells the two apart with click's parameter source). ``resume_run`` applies each or refuses them all."""

    generator: str | None = None
    generator_options: dict[str, str] | None = None
    iterations: int | None = None
    k: int | None = None
    compile_jobs: str | None = None
    sanitizer_timeout_s: float | None = None
    numerics_mode: str | None = None  # fixed at init: refused unless it is the run's
    backend: str | None = None  # fixed at init: refused unless it is the run's
    arch: str | None = None  # only for a new run's static build: always refused


def _default_gate(pm: PluginManager, backend: str, out: Path) -> Env:
    from kopt_core.steps.gate import run_gate

    return run_gate(pm, backend=backend, out=out)


def _default_select(pm: PluginManager, store: RunStore, iteration: int, generator: str) -> Path:
    from kopt_core.run.iteration import select_in_run

    if not selects_methods(pm, generator):
        return select_for_search(pm, store, iteration)
    path = iteration_dir(store.run_dir, iteration) / METHODS_FILE
    # selected already (by the scan, or by an agent with `kopt select --methods` before resuming): kept
    return path if path.is_file() else select_in_run(pm, store, iteration)


def _default_profile(pm: PluginManager, store: RunStore, iteration: int) -> Path:
    from kopt_core.run.iteration import profile_in_run

    report = iteration_dir(store.run_dir, iteration) / CHAMPION_REPORT
    return report if report.is_file() else profile_in_run(pm, store, iteration, CHAMPION)


def _default_seed(pm: PluginManager, store: RunStore) -> State:
    from kopt_core.run.seed import seed_baseline

    return seed_baseline(pm, store)


def _default_open(pm: PluginManager, store: RunStore, iteration: int) -> Path:
    from kopt_core.run.iteration import open_iteration

    return open_iteration(pm, store, iteration)


def _default_generate(
    pm: PluginManager, store: RunStore, iteration: int, generator: str, options: dict[str, str]
) -> GenerationResult:
    from kopt_core.generate.step import generate_in_run

    return generate_in_run(pm, store, iteration, generator=generator, options=options)


def _default_explore(pm: PluginManager, store: RunStore, iteration: int) -> ExploreRecord:
    from kopt_core.run.explore import explore_iteration

    return explore_iteration(pm, store, iteration)


def _default_ablate(pm: PluginManager, store: RunStore, iteration: int) -> AttributionRecord:
    from kopt_core.run.ablate import ablate_iteration

    return ablate_iteration(pm, store, iteration)


def _default_sass(pm: PluginManager, store: RunStore, iteration: int) -> SassCheckRecord:
    from kopt_core.run.sass_check import check_iteration_sass

    return check_iteration_sass(pm, store, iteration)


def _default_update(pm: PluginManager, store: RunStore, iteration: int) -> State:
    from kopt_core.run.update import update_in_run

    return update_in_run(store, iteration)


def _default_summarize(pm: PluginManager, store: RunStore) -> Path:
    from kopt_core.run.summary import render_summary

    return render_summary(store)


@frozen
class LoopSteps:
    """The steps the driver runs, each the function its one-step command calls."""

    gate: Callable[..., Env] = _default_gate
    seed: Callable[..., Any] = _default_seed
    open: Callable[..., Any] = _default_open
    select: Callable[..., Any] = _default_select
    generate: Callable[..., Any] = _default_generate
    explore: Callable[..., Any] = _default_explore
    profile: Callable[..., Any] = _default_profile
    ablate: Callable[..., Any] = _default_ablate
    sass: Callable[..., Any] = _default_sass
    update: Callable[..., Any] = _default_update
    summarize: Callable[..., Any] = _default_summarize


def selects_methods(pm: PluginManager, generator: str) -> bool:
    """Whether the iterations of ``generator`` select methods (its ``GeneratorInfo.selects_methods``). A
    name no installed plugin registers, or more than one does, selects them: generating then says what
    is wrong with the name."""
    info = GeneratorRegistry.from_plugins(pm).generators.get(generator)
    return info is None or info.selects_methods


def select_for_search(pm: PluginManager, store: RunStore, iteration: int) -> Path:
    """A search iteration's methods.json: no method (a parameter search tunes the kernel's declared
    tunables and implements nothing new), with the scan's own picks beside it as advice not taken."""
    from kopt_core.run.iteration import select_in_run

    path = iteration_dir(store.run_dir, iteration) / METHODS_FILE
    return path if path.is_file() else select_in_run(pm, store, iteration, for_search=True)


def start_run(
    pm: PluginManager,
    *,
    baseline: str | Path,
    ref: str | Path,
    dims: dict[str, Any],
    generator: str,
    options: dict[str, str] | None = None,
    iterations: int = 3,
    k: int = 4,
    numerics_mode: str = "reference",
    backend: str | None = None,
    compile_jobs: str = "auto",
    arch: str | None = None,
    steps: LoopSteps | None = None,
    on_warning: Callable[[str], None] | None = None,
    sanitizer_timeout_s: float = SANITIZER_TIMEOUT_S,
) -> OptimizeOutcome:
    """A new run of ``kopt optimize``: the generator's name and options are checked, then the static
    contract and the baseline's build (no GPU needed), then the hardware gate, init, and the loop."""
    from kopt_core.backends import BackendRegistry
    from kopt_core.generate import generator_for
    from kopt_core.run.init import init_run, normalize_sanitizer_timeout
    from kopt_core.steps.bench import preflight_checked
    from kopt_core.steps.gate import refusal

    sanitizer_timeout_s = normalize_sanitizer_timeout(sanitizer_timeout_s)  # exit 4 before anything
    steps = steps or LoopSteps()
    options = dict(options or {})
    backend = backend or BackendRegistry.from_plugins(pm).detect(baseline).name
    generator_for(pm, generator, options)  # an unknown generator or a bad option: exit 4 before anything
    with progress.step("checking the baseline, the reference and the dims; building the baseline"):
        checked = preflight_checked(
            pm, baseline, ref, dims, backend=backend, arch=arch, on_warning=on_warning
        )
    with tempfile.TemporaryDirectory(prefix="kopt-gate-") as scratch:
        env_path = Path(scratch) / ENV_FILE
        with progress.step("the hardware gate"):
            env = steps.gate(pm, backend, env_path)
        if not env.generation_allowed:
            built = f" and builds for {checked.arch}" if checked.arch else ""
            raise refusal(
                env,
                passed=f"{Path(baseline).name} passed its contract checks{built}",
                hint="`kopt gate --diagnostic --out env.json` writes the full report",
            )
        if not env_path.is_file():
            write_json(env_path, to_data(env))
        store = init_run(
            pm,
            baseline=baseline,
            ref=ref,
            dims=dims,
            env_path=env_path,
            iterations=iterations,
            branches=k,
            compile_jobs=compile_jobs,
            numerics_mode=numerics_mode,
            backend=backend,
            on_warning=on_warning,
            sanitizer_timeout_s=sanitizer_timeout_s,
        )
    write_json(store.run_dir / OPTIMIZE_FILE, to_data(OptimizePlan(generator=generator, options=options)))
    return run_loop(pm, store, steps=steps)


def read_plan(store: RunStore) -> OptimizePlan:
    from kopt_core.jsonio import read_json

    path = store.run_dir / OPTIMIZE_FILE
    if not path.is_file():
        raise ConfigError(
            f"{store.run_dir} was not started by `kopt optimize` (no {OPTIMIZE_FILE})",
            hint="continue it with the one-step commands, or give --generator to --resume",
        )
    try:
        return from_document(read_json(path), OptimizePlan)  # strict: every bad field named
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{path} is not a kopt optimize plan: {exc}") from None


def resume_run(
    pm: PluginManager,
    run_dir: str | Path,
    *,
    given: ResumeOptions | None = None,
    steps: LoopSteps | None = None,
    on_applied: Callable[[str], None] | None = None,
) -> OptimizeOutcome:
    """``kopt optimize --resume RUN``: go on from wherever the run is, with the options ``given``
    applied first (``apply_resume_options``: every one applied, or all refused with a ConfigError);
    ``on_applied`` hears of each change, in words, before the loop goes on."""
    store = RunStore(Path(run_dir))
    store.load()  # a folder that is not a run: exit 4, named
    applied = apply_resume_options(pm, store, given) if given is not None else ()
    for change in applied:
        if on_applied is not None:
            on_applied(change)
    outcome = run_loop(pm, store, steps=steps or LoopSteps())
    return attrs.evolve(outcome, applied=applied)


def apply_resume_options(pm: PluginManager, store: RunStore, given: ResumeOptions) -> tuple[str, ...]:
    """Apply the options a ``--resume`` was given to the run in progress (docs/loop.md, "Resuming a run"),
    or refuse them: one ConfigError (exit 4) names each option that cannot apply and why, and then nothing
    is changed. An option equal to the run's own value changes nothing and is accepted. Returns what
    changed, in words. A stopped run answers with its stop, whatever was given."""
    from kopt_core.generate import generator_for
    from kopt_core.run.init import normalize_compile_jobs, normalize_sanitizer_timeout

    with store.locked("resume"):
        state = store.load()
        if state.run_status == "stopped":
            raise store.stopped_error(state)
        has_plan = (store.run_dir / OPTIMIZE_FILE).is_file()
        plan = read_plan(store) if has_plan or given.generator is None else None
        refused: list[str] = []
        applied: list[str] = []
        changes: dict[str, Any] = {}
        closed = state.closed_iterations

        # fixed when the run started
        if given.numerics_mode is not None and given.numerics_mode != state.numerics_mode:
            refused.append(
                f"--numerics-mode {given.numerics_mode}: the run's numerics mode is {state.numerics_mode}, "
                "fixed when it started: its baseline was validated and its methods selected under it "
                f"(start a new run with --numerics-mode {given.numerics_mode})"
            )
        if given.backend is not None and given.backend != state.backend:
            refused.append(
                f"--backend {given.backend}: the run's backend is {state.backend}, its baseline's: every "
                "kernel of the run is built and timed by it"
            )
        if given.arch is not None:
            refused.append(
                f"--arch {given.arch}: it is the target of the static build that checks a baseline before a "
                "new run's gate; a run in progress builds for the GPU its gate found"
            )

        # the iteration limit
        total = state.iterations_total
        if given.iterations is not None and given.iterations != total:
            problem = _iterations_problem(store, state, given.iterations)
            if problem:
                refused.append(problem)
            else:
                changes["iterations_total"] = given.iterations
                applied.append(f"--iterations {given.iterations} (was {total})")
                total = given.iterations
                if state.run_status == "completed" and total > closed:
                    changes["run_status"] = "running"  # the limit had completed it: it goes on

        # what applies to the iterations still to come
        open_dir = iteration_dir(store.run_dir, closed + 1)
        left = 0 if state.run_status == "completed" and state.stop_reason == "near_peak" else total - closed

        def nothing_left(option: str) -> bool:
            if left > 0:
                return False
            why = (
                "the run completed early: its best kernel is near the hardware's peak"
                if state.stop_reason == "near_peak"
                else f"the run has closed {closed} of its {total} iterations (--iterations adds more)"
            )
            refused.append(f"{option}: no iteration is left to apply it to: {why}")
            return True

        k = given.k
        changes_k = k is not None and (k != state.branches or state.branches_next is not None)
        if k is not None and changes_k and not nothing_left(f"--k {k}"):
            written = os.path.lexists(open_dir / CANDIDATES_FILE)
            if not written:
                changes.update(branches=k, branches_next=None)
                applied.append(f"--k {k} (was {state.branches}), from iteration {closed + 1}")
            elif k == state.branches:
                changes["branches_next"] = None
                applied.append(f"--k {k}, the run's: the change to {state.branches_next} pending is dropped")
            elif left < 2:
                refused.append(
                    f"--k {k}: iteration {closed + 1}, the run's last, has its {state.branches} candidates "
                    "written already (candidates.json), and no later iteration is left to take it"
                )
            elif k != state.branches_next:
                changes["branches_next"] = k
                applied.append(
                    f"--k {k} (was {state.branches}), from iteration {closed + 2}: iteration "
                    f"{closed + 1} keeps the {state.branches} candidates it has written"
                )

        if given.compile_jobs is not None:
            try:
                jobs = normalize_compile_jobs(given.compile_jobs)
            except ConfigError as exc:
                refused.append(exc.message)
            else:
                if jobs != state.compile_jobs and not nothing_left(f"--compile-jobs {jobs}"):
                    changes["compile_jobs"] = jobs
                    applied.append(
                        f"--compile-jobs {jobs} (was {state.compile_jobs}), for the builds to come"
                    )

        if given.sanitizer_timeout_s is not None:
            try:
                limit = normalize_sanitizer_timeout(given.sanitizer_timeout_s)
            except ConfigError as exc:
                refused.append(exc.message)
            else:
                if limit != state.sanitizer_timeout_s and not nothing_left(f"--sanitizer-timeout {limit:g}"):
                    changes["sanitizer_timeout_s"] = limit
                    applied.append(
                        f"--sanitizer-timeout {limit:g} (was {state.sanitizer_timeout_s:g}), for the "
                        "branches explored from now on"
                    )

        # the generator
        new_plan: OptimizePlan | None = None
        if given.generator is not None:  # a generator named: its options are the ones given
            new_plan = OptimizePlan(generator=given.generator, options=dict(given.generator_options or {}))
        elif given.generator_options is not None:  # the run's: the options given replace those keys
            assert plan is not None  # read above: a run without optimize.json needs --generator
            new_plan = OptimizePlan(
                generator=plan.generator, options={**plan.options, **given.generator_options}
            )
        if new_plan is not None and new_plan != plan:
            option = "--generator" if given.generator is not None else "--generator-option"
            try:
                generator_for(pm, new_plan.generator, new_plan.options)
            except ConfigError as exc:
                refused.append(f"{option}: {exc.message}")
                new_plan = None
            else:
                if nothing_left(option):
                    new_plan = None
                else:
                    shown = ", ".join(f"{key}={value}" for key, value in new_plan.options.items())
                    was = f" (was {plan.generator})" if plan is not None else ""
                    applied.append(
                        f"generator {new_plan.generator}{was}"
                        + (f" with {shown}" if shown else "")
                        + ", for the candidates still to be written"
                    )
        else:
            new_plan = None

        if refused:
            listed = "".join(f"\n  - {problem}" for problem in refused)
            raise ConfigError(
                f"--resume cannot apply {len(refused)} of the options given:{listed}",
                hint=(
                    "nothing was changed: leave those out to continue the run as it stands "
                    f"(`{optimize_resume_command(store.run_dir)}`), or start a new run for them"
                ),
            )
        if changes:
            store.update(**changes)
        if new_plan is not None:
            write_json(store.run_dir / OPTIMIZE_FILE, to_data(new_plan))
        return tuple(applied)


def _iterations_problem(store: RunStore, state: State, iterations: int) -> str | None:
    """Why the run cannot take ``iterations`` as its new limit, or None. A run that completed at its limit
    goes on under a larger one; one that completed near the peak does not (nothing is left to gain by
    the run's rules). A limit below an iteration closed, or below the one open, is refused."""
    closed = state.closed_iterations
    if state.run_status == "completed" and state.stop_reason == "near_peak":
        return (
            f"--iterations {iterations}: the run completed early because its best kernel is near the "
            "hardware's peak (state.json stop_reason near_peak): by the run's rules no gap is left to "
            f"close; start a new run from {state.best_file} to try anyway"
        )
    if iterations < closed:
        return (
            f"--iterations {iterations}: the run has closed {closed} iterations already; give {closed} or "
            "more"
        )
    if iteration_dir(store.run_dir, closed + 1).is_dir() and iterations <= closed:
        return (
            f"--iterations {iterations}: iteration {closed + 1} is open already "
            f"({iteration_dir(store.run_dir, closed + 1).name}/); give {closed + 1} or more"
        )
    return None


def run_loop(pm: PluginManager, store: RunStore, *, steps: LoopSteps) -> OptimizeOutcome:
    """Seed if needed, then iterations until a stop, the limit, or an agent's turn."""
    plan = read_plan(store)
    state = store.load()
    if state.run_status == "stopped":
        raise store.stopped_error(state)
    if state.run_status == "initialized":
        with progress.step("seeding: the baseline checked, timed, profiled and paired with itself"):
            steps.seed(pm, store)
    while True:
        state = store.load()
        if state.run_status == "stopped":
            raise store.stopped_error(state)
        if state.run_status == "completed" or state.closed_iterations >= state.iterations_total:
            break
        iteration = state.closed_iterations + 1
        folder = iteration_dir(store.run_dir, iteration)
        fresh = not folder.is_dir()
        if fresh and state.branches_next is not None:  # a --k given while the last one's were written
            from kopt_core.run.iteration import pending_branches

            store.update(**pending_branches(state))
        with progress.step(f"iteration {iteration}: profiling the best kernel"):
            steps.open(pm, store, iteration)
        if fresh and _near_peak(store):
            store.update(run_status="completed", stop_reason="near_peak", stop_stage="iter_open")
            break
        with progress.step(f"iteration {iteration}: selecting methods"):
            steps.select(pm, store, iteration, plan.generator)
        with progress.step(f"iteration {iteration}: generating candidates ({plan.generator})"):
            try:
                result = steps.generate(pm, store, iteration, plan.generator, dict(plan.options))
            except ConfigError as error:  # candidates that do not validate: the run waits for the fix
                if isinstance(error, RunLocked):
                    raise
                waiting = (
                    f"the run is not stopped: once that is fixed, `{optimize_resume_command(store.run_dir)}` "
                    "goes on"
                )
                error.hint = f"{error.hint}; {waiting}" if error.hint else waiting
                raise

        if result.status == "awaiting":
            store.update(run_status=AWAITING_CANDIDATES)
            steps.summarize(pm, store)
            return _outcome(store, AWAITING_CANDIDATES, result.message, brief=str(folder / BRIEF_MD))
        if result.status == "failed":
            stop_on_failure(
                store,
                "generate",
                ValidationError(f"the {plan.generator} generator failed: {result.message}"),
                iteration=iteration,
            )
        if store.load().run_status == AWAITING_CANDIDATES:
            store.update(run_status="running")
        with progress.step(f"iteration {iteration}: exploring the branches and pairing the champion"):
            steps.explore(pm, store, iteration)
        with progress.step(f"iteration {iteration}: profiling the champion"):
            steps.profile(pm, store, iteration)
        with progress.step(f"iteration {iteration}: ablating each method"):
            steps.ablate(pm, store, iteration)
        with progress.step(f"iteration {iteration}: checking each method in the SASS"):
            steps.sass(pm, store, iteration)
        with progress.step(f"iteration {iteration}: updating the run"):
            steps.update(pm, store, iteration)
    with progress.step("writing summary.md and its charts"):
        steps.summarize(pm, store)
    state = store.load()
    if state.run_status != "completed":
        store.update(run_status="completed")
    return _outcome(store, "completed", state.stop_reason or "")


def _near_peak(store: RunStore) -> bool:
    """The latest profile of the best kernel says near_peak (it needs a workload model: gaps.py)."""
    history = store.load().roofline_history
    return bool(history) and bool(history[-1].near_peak)


def _outcome(store: RunStore, status: str, message: str, brief: str | None = None) -> OptimizeOutcome:
    from kopt_core.jsonio import read_json

    state = store.load()
    baseline_ms = None
    bench = baseline_dir(store.run_dir) / BENCH_FILE
    if bench.is_file():
        timing = (read_json(bench) or {}).get("kernel_timing") or {}
        baseline_ms = timing.get("median_ms")
    return OptimizeOutcome(
        run_dir=store.run_dir,
        status=status,
        iterations_closed=state.closed_iterations,
        best_file=state.best_file,
        best_ms=state.best_metric_ms,
        baseline_ms=baseline_ms,
        message=message,
        brief=brief,
    )


__all__ = [
    "LoopSteps",
    "OptimizeOutcome",
    "OptimizePlan",
    "ResumeOptions",
    "apply_resume_options",
    "resume_run",
    "run_loop",
    "select_for_search",
    "start_run",
]
