"""What the steps of a run share to get at its kernels: the published iteration folder a step works in,
the iteration's validated candidates, a kernel of the run checked and built against the run's reference,
dims and backend, the contract checks and builds of many candidates in the bounded pool, and how the run
profiles a kernel (its options, and when a profile cannot serve as evidence).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError
from kopt_core.records import Candidate, ProfileOptions, Toolchain
from kopt_core.records.state import State, ceilings_of
from kopt_core.run.candidates import iteration_methods, load_candidates
from kopt_core.run.layout import iteration_dir
from kopt_core.run.store import RunStore
from kopt_core.steps.bench import Prepared, check_candidate, prepare, target_arch
from kopt_core.steps.build_pool import BuildJob, BuildOutcome, CompilePlan, build_all, plan_compile_jobs

if TYPE_CHECKING:
    from kopt_core.bench.executor import Executor
    from kopt_core.plugins import PluginManager

# What a step runs its kernels through: a factory of executors (kopt_core.bench.executor).
ExecutorFactory = Callable[[], AbstractContextManager["Executor"]]


def open_folder(store: RunStore, state: State, iteration: int, step: str) -> Path:
    """The published iteration folder of a run that is running, or a ConfigError saying what comes first."""
    if state.run_status == "stopped":
        raise store.stopped_error(state)
    folder = iteration_dir(state.run_dir, iteration)
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} does not exist: open the iteration first (kopt iter open --iter {iteration})"
        )
    if iteration <= state.closed_iterations:
        raise ConfigError(f"iteration {iteration} is already updated; {step} belongs to an open iteration")
    return folder


def iteration_candidates(pm: PluginManager, state: State, folder: Path, iteration: int):
    """The run's backend, the iteration's methods (methods.json) and its validated candidates.json."""
    info = BackendRegistry.from_plugins(pm).get(state.backend)
    methods = iteration_methods(folder)
    candidates = load_candidates(
        folder,
        iteration=iteration,
        methods=methods,
        backend_suffixes=tuple(info.suffixes),
        branches_expected=state.branches,
    )
    return info, methods, candidates


def prepare_in_run(
    pm: PluginManager,
    state: State,
    purpose: str,
    kernel: str | Path | None = None,
    *,
    require_gpu: bool = True,
) -> Prepared:
    """A kernel of the run (the current best unless ``kernel`` is given), checked and built against the
    run's reference, dims and backend (``require_gpu=False``: also on a machine without a GPU)."""
    return prepare(
        pm,
        kernel or state.best_file,
        state.ref_file,
        dict(state.dims),
        backend=state.backend,
        purpose=purpose,
        require_gpu=require_gpu,
    )


def check_and_build(
    pm: PluginManager, state: State, info, ref, candidates: dict[str, Candidate]
) -> tuple[dict[str, str], list[BuildOutcome], CompilePlan]:
    """Each candidate's static contract, then the builds of those that keep it in the bounded pool (the
    run's --compile-jobs). Returns the contract problems by key, the build outcomes (in the given order)
    and the pool's plan. The artifacts stay in the backends' build caches."""
    broken: dict[str, str] = {}
    jobs: list[BuildJob] = []
    for key, candidate in candidates.items():
        try:
            check_candidate(pm, candidate, dict(state.dims), ref)
        except ConfigError as exc:
            broken[key] = str(exc)
            continue
        jobs.append(BuildJob(key=key, candidate=candidate))
    plan = plan_compile_jobs(state.compile_jobs, [info])
    with tempfile.TemporaryDirectory(prefix="kopt-builds-") as scratch:
        builds = build_all(
            pm, jobs, toolchain=Toolchain(arch=target_arch(info)), plan=plan, build_root=Path(scratch)
        )
    return broken, builds, plan


def profile_options(state: State, bundle: str | None = None) -> ProfileOptions:
    """How the run profiles: its ``ncu_num``, the ceilings of ``ceilings_of``, and ``bundle`` (None:
    adaptive, as for the baseline; later profiles force the baseline's), ncu's default time limits."""
    return ProfileOptions(ncu_num=state.ncu_num, bundle=bundle, ceilings=ceilings_of(state))


def profile_problem(outcome) -> str | None:
    """Why a profile cannot serve as evidence (no kernel, no parsed metric, ncu errors in its log), or
    None: the baseline's profile and every iteration's must pass this before anything depends on them."""
    report = outcome.report
    if not report.kernels:
        return "the report has no kernel"
    if not any(m.value is not None for m in report.aggregate.metrics.values()):
        return "the report has no parsed metric"
    for attempt in outcome.summary.attempts[-1:]:
        log = Path(attempt.log)
        if log.is_file() and "==ERROR==" in log.read_text(errors="replace"):
            return f"ncu reported errors (see {log})"
    return None
