"""``kopt explore --state S --iter I``: turn the branches a generator wrote into a champion, and promote it
only on a paired win (spec steps 3e-3f and the promotion rule of 3j).

Scheduling lives here; how one candidate is run lives behind the executor seam
(``kopt_core.bench.executor``): what to check, what to build (a bounded CPU pool), and in which order to
run (serially, b1..bK, through one long-lived worker; with an executor of several workers, a screen on
all of them first, then the ranking on one: ``explore_iteration``). Per branch, explore persists compile_pass,
contract_pass, correctness_pass, race_safe, timing_valid, the requested and realised shapes and a robust
CV in ``iterv{i}/explore.json``; each branch's bench.json stays beside its kernel.

Crash safety: explore.json and paired.json are each written once, atomically, when their step is
complete; a killed explore leaves neither, and the next ``kopt explore`` starts that step again. Nothing
half-done is read as evidence: a branch's bench.json without explore.json is only a leftover.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopt_core import progress
from kopt_core.bench.executor import PairedPlan, shared_executor
from kopt_core.bench.paired import decide
from kopt_core.bench.pool import RANKING, Leases, SingleWorkerPool, WorkerPool
from kopt_core.errors import ConfigError, HardwareError, KoptError, ValidationError
from kopt_core.jsonio import write_json
from kopt_core.records import BenchOptions, BenchRequest, BenchResult, Candidate, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.loop import BranchOutcome, ExploreRecord, read_explore
from kopt_core.records.paired import PairedComparison
from kopt_core.records.state import State
from kopt_core.reference import load_reference
from kopt_core.run.layout import BENCH_FILE, EXPLORE_FILE, PROMOTION_FILE, kernel_file
from kopt_core.run.prepare import (
    ExecutorFactory,
    check_and_build,
    iteration_candidates,
    open_folder,
    prepare_in_run,
)
from kopt_core.run.stop import stop_on_failure
from kopt_core.run.store import AWAITING_CANDIDATES, RunStore
from kopt_core.run.summary import render_summary

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager


def robust_cv(samples: Sequence[float]) -> float | None:
    """1.4826 * MAD / median: the spread of the samples, insensitive to a few outliers."""
    if len(samples) < 3:
        return None
    middle = statistics.median(samples)
    if not middle > 0:
        return None
    return 1.4826 * statistics.median(abs(s - middle) for s in samples) / middle


def _shapes(result: BenchResult, which: str) -> dict[str, list[int]]:
    return {b.name: list(getattr(b, which)) for b in result.buffers}


def explore_iteration(
    pm: PluginManager,
    store: RunStore,
    iteration: int,
    *,
    executor: ExecutorFactory = shared_executor,
    options: BenchOptions = LOOP_OPTIONS,
    plan: PairedPlan | None = None,
    pool: WorkerPool | None = None,
) -> ExploreRecord:
    """Explore iteration ``iteration``'s branches, then pair its champion against the current best.
    Every branch failing stops the run (exit 2), and so does the machine (exit 3). A candidates.json that
    does not validate is a ConfigError (exit 4) naming every problem, and stops nothing: it is read before
    anything is built or written, and the same call goes on once it is fixed. Running it again after it
    finished changes nothing.

    ``pool`` (an executor's pool, ``kopt_core.execute.base.open_pool``; by default one worker,
    ``executor``'s) may hold several workers: the branches are then screened on all of them at once (each
    checked and timed on whichever worker is free), and those that pass are timed again, one by one, on
    the pool's ranking worker, whose times alone rank them; the promotion pairing runs there too."""
    pool = pool if pool is not None else SingleWorkerPool(executor)
    with pool, store.locked("explore"):
        ranking: ExecutorFactory = lambda: contextlib.nullcontext(pool.worker(RANKING))  # noqa: E731
        state = store.load()
        folder = open_folder(store, state, iteration, "explore")
        record_path = folder / EXPLORE_FILE
        if record_path.is_file():
            record = read_explore(record_path)
        else:
            try:
                record = _explore(pm, state, folder, iteration, pool, options)
            except KoptError as error:
                stop_on_failure(store, "explore", error, iteration=iteration)
            if record.champion is None:
                write_json(record_path, to_data(record))
                failures = "; ".join(f"{b.id}: {b.failure}" for b in record.branches)
                stop_on_failure(
                    store,
                    "explore",
                    ValidationError(f"every branch of iteration {iteration} failed: {failures}"),
                    iteration=iteration,
                )
            _install_champion(folder, record, state)
            write_json(record_path, to_data(record))
            frontier = tuple(
                {
                    "iteration": iteration,
                    "branch": b.id,
                    "file": str(folder / b.file),
                    "median_ms": b.median_ms,
                }
                for b in record.branches
                if b.id in record.frontier
            )
            # the candidates an agent's run awaited are in and explored: the run is running again, as the
            # one-step commands that follow (iter open) take it
            status = {"run_status": "running"} if state.run_status == AWAITING_CANDIDATES else {}
            state = store.update(frontier=(*state.frontier, *frontier), **status)
        if not (folder / PROMOTION_FILE).is_file():
            try:
                comparison = promote(pm, state, folder, ranking, plan or PairedPlan())
            except KoptError as error:
                stop_on_failure(store, "promote", error, iteration=iteration)
            write_json(folder / PROMOTION_FILE, to_data(comparison))
        render_summary(store)
        return record


def _explore(
    pm: PluginManager,
    state: State,
    folder: Path,
    iteration: int,
    pool: WorkerPool,
    options: BenchOptions,
) -> ExploreRecord:
    info, methods, candidates = iteration_candidates(pm, state, folder, iteration)
    dims = dict(state.dims)

    # 1-2. the reference's import check, the static contract of each branch, then the builds in the
    # bounded pool, before any timing; the workers start meanwhile (Python, torch and a CUDA context take
    # seconds), idle until 3. A worker finds the reference's check remembered (kopt_core.reference) when
    # it first imports the reference, since no command reaches it before the check passed.
    outcomes = {spec.id: _blank(spec.id, spec.file, dims) for spec in candidates.branches}
    seconds: dict[str, float] = {}
    pool.start()
    ref = load_reference(state.ref_file)
    started = time.perf_counter()
    broken, builds, compile_plan = check_and_build(
        pm,
        state,
        info,
        ref,
        {
            spec.id: Candidate(path=str(folder / spec.file), backend=state.backend, name=spec.id)
            for spec in candidates.branches
        },
    )
    seconds["build"] = round(time.perf_counter() - started, 3)
    for branch_id, problem in broken.items():
        outcomes[branch_id].update(error=problem, error_stage="contract")
    artifacts = {}
    for build in builds:
        outcome = outcomes[build.key]
        outcome["contract_pass"] = True
        outcome.update(
            compile_pass=build.compile_pass, build_seconds=build.seconds, cache_hit=build.cache_hit
        )
        if build.compile_pass and build.artifact is not None:
            artifacts[build.key] = build.artifact
        else:
            outcome.update(error=build.error, error_stage="compile")
    if artifacts:
        _require_device(info)

    def request(branch_id: str) -> BenchRequest:
        return BenchRequest(
            artifact=artifacts[branch_id], reference=str(state.ref_file), dims=dims, options=options
        )

    # 3a. with several workers, a screen on all of them at once: a branch that fails its check or its
    # timing there is done; those that pass go on to 3b. Times from the screen rank nothing.
    order = [spec for spec in candidates.branches if spec.id in artifacts]
    if len(pool.slots) > 1 and len(order) > 1:
        started = time.perf_counter()
        screened = _screen(pool, [(spec.id, request(spec.id)) for spec in order])
        seconds["screen"] = round(time.perf_counter() - started, 3)
        for spec in order:
            slot, result = screened[spec.id]
            outcomes[spec.id]["screened_on"] = slot
            if not _screen_passed(result):
                bench_path = folder / Path(spec.file).parent / BENCH_FILE
                write_json(bench_path, to_data(result))
                outcomes[spec.id].update(_bench_fields(result, folder, bench_path), timed_on=slot)
        order = [spec for spec in order if _screen_passed(screened[spec.id][1])]

    # 3b. serially, b1..bK, on the ranking worker: the times that rank the branches
    runner = pool.worker(RANKING)
    started = time.perf_counter()
    for spec in order:
        one = time.perf_counter()
        with progress.step(f"checking and timing {spec.id} ({len(artifacts)} built)"):
            result = runner.bench(request(spec.id))
        bench_path = folder / Path(spec.file).parent / BENCH_FILE
        write_json(bench_path, to_data(result))
        outcomes[spec.id].update(_bench_fields(result, folder, bench_path), timed_on=pool.slots[RANKING])
        outcomes[spec.id]["bench_seconds"] = round(time.perf_counter() - one, 3)
    seconds["bench"] = round(time.perf_counter() - started, 3)
    # The race check, fastest branch first, until one passes it: compute-sanitizer slows a kernel 10-100x
    # (a 2048^3 SGEMM takes about a minute under racecheck and memcheck), so checking every branch would
    # cost more than the rest of explore. The champion is the same as if all were checked: the fastest
    # branch that passes every gate. Slower branches keep race_safe unknown and say why.
    timed = sorted(
        (spec.id for spec in candidates.branches if _timed(outcomes[spec.id])),
        key=lambda branch_id: (outcomes[branch_id]["median_ms"], _index(branch_id)),
    )
    started = time.perf_counter()
    for position, branch_id in enumerate(timed):
        outcomes[branch_id].update(_race_fields(artifacts[branch_id], state, methods, options))
        if outcomes[branch_id]["race_safe"] is not False:
            for slower in timed[position + 1 :]:
                outcomes[slower]["race_note"] = f"not checked: {branch_id}, faster, passed every gate"
            break
    seconds["race_check"] = round(time.perf_counter() - started, 3)

    branches = tuple(BranchOutcome(**outcomes[spec.id]) for spec in candidates.branches)
    champion, frontier = champion_of(branches)
    return ExploreRecord(
        iteration=iteration,
        branches=branches,
        champion=champion.id if champion else None,
        champion_ms=champion.median_ms if champion else None,
        frontier=frontier,
        compile_jobs=compile_plan.workers,
        compile_jobs_reason=compile_plan.reason,
        seconds=seconds,
    )


def _screen(
    pool: WorkerPool, requests: Sequence[tuple[str, BenchRequest]]
) -> dict[str, tuple[str, BenchResult]]:
    """Each branch checked and timed once, on whichever worker of ``pool`` is free (one thread per
    worker): branch id -> (the slot, its record)."""
    leases = Leases(pool)

    def one(item: tuple[str, BenchRequest]) -> tuple[str, tuple[str, BenchResult]]:
        branch_id, bench_request = item
        with leases.take() as (index, worker):
            return branch_id, (pool.slots[index], worker.bench(bench_request))

    with (
        progress.step(f"screening {len(requests)} branches on {len(leases)} workers"),
        ThreadPoolExecutor(len(leases), thread_name_prefix="kopt-screen") as threads,
    ):
        return dict(threads.map(one, requests))


def _screen_passed(result: BenchResult) -> bool:
    return result.status == "ok" and result.correctness_pass and result.timing_valid


def champion_of(branches: Sequence[BranchOutcome]) -> tuple[BranchOutcome | None, tuple[str, ...]]:
    """The champion, the least median among the branches that passed every gate (ties to the lowest
    branch number: b2 before b10), or None when none passed; and the frontier, the ids of the other
    passing branches in the order given."""
    passing = [b for b in branches if b.passed and b.median_ms is not None]
    champion = min(passing, key=lambda b: (b.median_ms, _index(b.id))) if passing else None
    return champion, tuple(b.id for b in passing if champion is not None and b.id != champion.id)


def _timed(outcome: dict) -> bool:
    return bool(outcome.get("correctness_pass") and outcome.get("timing_valid") and outcome.get("median_ms"))


def _index(branch_id: str) -> int:
    return int(branch_id[1:]) if branch_id[1:].isdigit() else 1 << 30


def _blank(branch_id: str, file: str, dims: dict) -> dict:
    return {
        "id": branch_id,
        "file": file,
        "compile_pass": False,
        "contract_pass": False,
        "correctness_pass": False,
        "race_safe": None,
        "timing_valid": False,
        "median_ms": None,
        "robust_cv": None,
        "requested_dims": dict(dims),
        "realised_dims": {},
        "error": None,
        "error_stage": None,
        "bench": None,
        "build_seconds": None,
    }


def _bench_fields(result: BenchResult, folder: Path, bench_path: Path) -> dict:
    timing = result.kernel_timing
    fields: dict[str, Any] = {
        "correctness_pass": result.correctness_pass,
        "timing_valid": result.timing_valid and timing is not None,
        "median_ms": timing.median_ms if timing is not None else None,
        "robust_cv": robust_cv(timing.samples_ms) if timing is not None else None,
        "realised_dims": dict(result.dims),
        "requested_shapes": _shapes(result, "requested_shape"),
        "realised_shapes": _shapes(result, "realised_shape"),
        "bench": str(bench_path.relative_to(folder)),
    }
    if result.status != "ok":
        fields.update(error=result.error, error_stage=result.error_stage, violation=result.violation)
    return fields


def _race_fields(artifact, state: State, methods: Sequence[str], options: BenchOptions) -> dict:
    """race_safe from compute-sanitizer where it applies: True when every tool ran clean, False on a
    hazard or error (the branch fails), None with the reason when it could not be checked.

    The tools run side by side, one process each (most of a tool run is the process starting under the
    tool, not the GPU), and only on the candidate's own kernel when the build names it
    (``kernel_filter_for``). A tool that did not end clean is run again alone before its verdict counts,
    so two processes sharing the GPU never decide one; except a tool stopped at the run's time limit
    (state.sanitizer_timeout_s): a kernel can run thousands of times slower under a tool, and a second
    wait as long would double the cost of learning nothing. It leaves race_safe unknown and says so."""
    from kopt_core.bench.sanitize import kernel_filter_for, run_sanitizer, tools_for

    request = BenchRequest(
        artifact=artifact, reference=str(state.ref_file), dims=dict(state.dims), options=options
    )
    tools = tools_for(artifact, methods)
    if not tools:
        return {"race_safe": None, "race_note": "no check applies", "race_seconds": 0.0}
    only = kernel_filter_for(artifact)
    limit = state.sanitizer_timeout_s

    def check(tool: str):
        return run_sanitizer(request, tool, timeout_s=limit, kernel_filter=only)

    def settled(report) -> bool:
        return report.status == "clean" or report.timed_out

    started = time.perf_counter()
    with progress.step(f"compute-sanitizer {', '.join(tools)} on {Path(artifact.source).parent.name}"):
        with ThreadPoolExecutor(max_workers=len(tools)) as pool:
            reports = list(pool.map(check, tools))
        if len(tools) > 1:
            reports = [report if settled(report) else check(report.tool) for report in reports]
    seconds = round(time.perf_counter() - started, 3)
    notes = [
        f"{report.tool}: {report.status} ({report.summary}; {report.seconds:.1f} s)" for report in reports
    ]
    for report in reports:
        if report.status in ("hazards", "failed"):
            return {
                "race_safe": False,
                "race_note": "; ".join(notes),
                "race_seconds": seconds,
                "error": report.summary,
                "error_stage": report.tool,
            }
    slow = [report.tool for report in reports if report.timed_out]
    if slow:
        notes.append(
            f"not checked within the run's limit of {limit:g} s per tool ({', '.join(slow)}): race_safe "
            "unknown; a run started with a larger --sanitizer-timeout checks it"
        )
    safe = all(report.status == "clean" for report in reports)
    return {"race_safe": True if safe else None, "race_note": "; ".join(notes), "race_seconds": seconds}


def _require_device(info) -> None:
    if info.needs_gpu:
        from kopt_core.hardware import detect_gpus

        gpus, reason = detect_gpus()
        if not gpus:
            raise HardwareError(f"no GPU to time the branches on: {reason}")


def _install_champion(folder: Path, record: ExploreRecord, state: State) -> Path:
    """Copy the champion's kernel to ``iterv{i}/kernel.<ext>`` (a temporary file renamed into place)."""
    branch = next(b for b in record.branches if b.id == record.champion)
    source = folder / branch.file
    target = folder / kernel_file(Path(state.best_file).suffix)
    fd, temporary = tempfile.mkstemp(prefix=".kernel-", dir=folder)
    os.close(fd)
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)
    return target


def promote(
    pm: PluginManager, state: State, folder: Path, executor: ExecutorFactory, plan: PairedPlan
) -> PairedComparison:
    """The champion (B) against the current best (A), paired and interleaved in one worker on the same
    buffers; "faster" only when the interval's lower bound clears the run's noise threshold."""
    if state.noise_threshold is None:
        raise ConfigError(
            "the run has no measured noise threshold (state.json noise_threshold): seed it with this kopt",
            hint="runs seeded by an older kopt must be seeded again",
        )
    champion = folder / kernel_file(Path(state.best_file).suffix)
    best = prepare_in_run(pm, state, "compare it with the champion")
    challenger = prepare_in_run(pm, state, "compare it with the best", kernel=champion)
    a, b = best.request(LOOP_OPTIONS), challenger.request(LOOP_OPTIONS)
    with executor() as runner, progress.step(f"pairing the champion with the best ({plan.blocks} blocks)"):
        measurement = runner.paired(a, b, plan)
    return decide(measurement, state.noise_threshold, seed=plan.seed)
