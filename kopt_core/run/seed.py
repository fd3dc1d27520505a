"""``kopt seed``: the baseline must pass compile, contract, multi-seed correctness, stable positive kernel
and reference timing, and an ncu profile with parsed metrics before iteration 1 may open. Its evidence
goes under ``baseline/``. Any failure writes stop.json, marks the run stopped, renders a stopped
summary.md and leaves no ``iterv1/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kopt_core.errors import (
    EXIT_CONFIG,
    EXIT_HARDWARE,
    ConfigError,
    HardwareError,
    KoptError,
    ValidationError,
)
from kopt_core.jsonio import write_json
from kopt_core.records import BenchOptions, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.state import RooflineHistoryEntry, State
from kopt_core.run.layout import BASELINE_PROFILE, BENCH_FILE, NOISE_FILE, baseline_dir
from kopt_core.run.prepare import ExecutorFactory, prepare_in_run, profile_options, profile_problem
from kopt_core.run.stop import clear_stop, stop_on_failure
from kopt_core.run.store import RunStore
from kopt_core.run.summary import render_summary
from kopt_core.steps.bench import Prepared, exit_code, run_bench
from kopt_core.steps.profile import profile_prepared

if TYPE_CHECKING:
    from kopt_core.bench.executor import PairedPlan
    from kopt_core.plugins import PluginManager


def measure_noise(
    prepared: Prepared,
    folder: Path,
    *,
    executor: ExecutorFactory | None = None,
    plan: PairedPlan | None = None,
) -> float:
    """The run's noise threshold: the baseline paired against itself (A/A) in one worker, written to
    ``baseline/noise_aa.json``; the smallest relative effect a later paired comparison may call real.
    An A/A pairing that fails or is too unstable to decide stops the seed (exit 3: the machine, not the
    kernel, is too noisy to judge anything on)."""
    from kopt_core.bench.executor import PairedPlan, shared_executor
    from kopt_core.bench.paired import decide, noise_threshold

    plan = plan or PairedPlan()
    request = prepared.request(LOOP_OPTIONS)
    with (executor or shared_executor)() as runner:
        measurement = runner.paired(request, request, plan)
    comparison = decide(measurement, 0.0, seed=plan.seed)
    write_json(folder / NOISE_FILE, to_data(comparison))
    if measurement.status != "ok":
        raise ValidationError(f"the baseline failed when paired with itself: {measurement.error}")
    try:
        return noise_threshold(comparison, seed=plan.seed)
    except ValueError as exc:
        raise HardwareError(str(exc)) from None


def seed_baseline(
    pm: PluginManager,
    store: RunStore,
    *,
    options: BenchOptions | None = None,
    retry: bool = False,
    executor: ExecutorFactory | None = None,
) -> State:
    """Seed the run. A stopped run answers with what stopped it (``RunStore.stopped_error``); with
    ``retry``, a stop the environment caused (exit 3) is cleared first and the run seeded again."""
    with store.locked("seed"):
        state = store.load()
        if state.run_status == "stopped":
            stop = store.load_stop()
            if not retry or stop is None or stop.exit_code != EXIT_HARDWARE:
                raise store.stopped_error(state, retrying=retry)
            state = clear_stop(store)
        if state.run_status != "initialized":
            return state  # seeded already: running the step again changes nothing
        folder = baseline_dir(state.run_dir)
        try:
            if not state.generation_allowed:
                raise HardwareError(
                    "the hardware gate did not allow generation (env.json); run `kopt gate` again"
                )
            prepared = prepare_in_run(pm, state, "seed the run")
            bench = run_bench(pm, prepared, options or BenchOptions())
            write_json(folder / BENCH_FILE, to_data(bench))
            code = exit_code(bench)
            if code != 0:
                kind = {EXIT_CONFIG: ConfigError, EXIT_HARDWARE: HardwareError}.get(code, ValidationError)
                raise kind(f"the baseline failed ({bench.error_stage}): {bench.error}")
            if bench.reference_timing is None or not bench.reference_timing.median_ms > 0:
                raise ValidationError("the reference has no stable positive timing")
            if bench.kernel_timing is None:  # the worker times every kernel that passed (exit code 0)
                raise ValidationError("the baseline has no kernel timing")
            outcome = profile_prepared(
                pm,
                prepared,
                folder,
                name=BASELINE_PROFILE,
                options=profile_options(state),
                bench=bench,
            )
            problem = profile_problem(outcome)
            if problem:
                raise HardwareError(f"the baseline's ncu profile is degraded: {problem}")
            threshold = measure_noise(prepared, folder, executor=executor)
        except KoptError as error:
            stop_on_failure(store, "seed", error)
        state = store.update(
            noise_threshold=threshold,
            noise_evidence=str(folder / NOISE_FILE),
            best_metric_ms=bench.kernel_timing.median_ms,
            best_ncu_rep=outcome.summary.report,
            run_status="seeded",
            roofline_history=(*state.roofline_history, RooflineHistoryEntry.of(0, outcome.roofline)),
        )
        render_summary(store)
        return state
