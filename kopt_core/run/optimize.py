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

The steps are a ``LoopSteps`` record of functions: the defaults are kopt's own; an embedder (or a test on
a machine without ncu) may hand in others for some of them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from kopt_core import progress
from kopt_core.errors import ConfigError, HardwareError, ValidationError
from kopt_core.generate.base import GeneratorRegistry
from kopt_core.jsonio import write_json
from kopt_core.records import from_data, to_data
from kopt_core.records.state import SANITIZER_TIMEOUT_S, Env
from kopt_core.records.versions import OPTIMIZE_SCHEMA_VERSION
from kopt_core.run.layout import (
    BENCH_FILE,
    BRIEF_MD,
    CHAMPION,
    CHAMPION_REPORT,
    ENV_FILE,
    METHODS_FILE,
    OPTIMIZE_FILE,
    baseline_dir,
    iteration_dir,
)
from kopt_core.run.stop import stop_on_failure
from kopt_core.run.store import RunStore

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager
    from kopt_core.records import GenerationResult
    from kopt_core.records.loop import AttributionRecord, ExploreRecord, SassCheckRecord
    from kopt_core.records.state import State

AWAITING = "awaiting_candidates"


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
    from kopt_core.steps.bench import preflight_kernel

    sanitizer_timeout_s = normalize_sanitizer_timeout(sanitizer_timeout_s)  # exit 4 before anything
    steps = steps or LoopSteps()
    options = dict(options or {})
    backend = backend or BackendRegistry.from_plugins(pm).detect(baseline).name
    generator_for(pm, generator, options)  # an unknown generator or a bad option: exit 4 before anything
    with progress.step("checking the baseline, the reference and the dims; building the baseline"):
        preflight_kernel(pm, baseline, ref, dims, backend=backend, arch=arch, on_warning=on_warning)
    with tempfile.TemporaryDirectory(prefix="kopt-gate-") as scratch:
        env_path = Path(scratch) / ENV_FILE
        with progress.step("the hardware gate"):
            env = steps.gate(pm, backend, env_path)
        if not env.generation_allowed:
            problems = "".join(f"\n  - {problem}" for problem in env.problems)
            raise HardwareError(
                f"the hardware gate refuses generation ({env.attempts} attempt(s)):{problems}",
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
        return from_data(read_json(path), OptimizePlan)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{path} is not a kopt optimize plan: {exc}") from None


def resume_run(
    pm: PluginManager,
    run_dir: str | Path,
    *,
    generator: str | None = None,
    options: dict[str, str] | None = None,
    steps: LoopSteps | None = None,
) -> OptimizeOutcome:
    """``kopt optimize --resume RUN``: go on from wherever the run is. A generator given here replaces
    the one the run was started with (and is kept for the next resume)."""
    from kopt_core.generate import generator_for

    store = RunStore(Path(run_dir))
    store.load()  # a folder that is not a run: exit 4, named
    if generator is not None:
        plan = OptimizePlan(generator=generator, options=dict(options or {}))
        generator_for(pm, plan.generator, plan.options)
        write_json(store.run_dir / OPTIMIZE_FILE, to_data(plan))
    return run_loop(pm, store, steps=steps or LoopSteps())


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
        with progress.step(f"iteration {iteration}: profiling the best kernel"):
            steps.open(pm, store, iteration)
        if fresh and _near_peak(store):
            store.update(run_status="completed", stop_reason="near_peak", stop_stage="iter_open")
            break
        with progress.step(f"iteration {iteration}: selecting methods"):
            steps.select(pm, store, iteration, plan.generator)
        with progress.step(f"iteration {iteration}: generating candidates ({plan.generator})"):
            result = steps.generate(pm, store, iteration, plan.generator, dict(plan.options))
        if result.status == "awaiting":
            store.update(run_status=AWAITING)
            steps.summarize(pm, store)
            return _outcome(store, AWAITING, result.message, brief=str(folder / BRIEF_MD))
        if result.status == "failed":
            stop_on_failure(
                store,
                "generate",
                ValidationError(f"the {plan.generator} generator failed: {result.message}"),
                iteration=iteration,
            )
        if store.load().run_status == AWAITING:
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
    "AWAITING",
    "LoopSteps",
    "OptimizeOutcome",
    "OptimizePlan",
    "resume_run",
    "run_loop",
    "select_for_search",
    "start_run",
]
