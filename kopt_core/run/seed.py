"""``kopt seed``: the baseline must pass compile, contract, multi-seed correctness, stable positive kernel
and reference timing, and an ncu profile with parsed metrics before iteration 1 may open. Its evidence
goes under ``baseline/``. A failure of the machine or of the baseline writes stop.json, marks the run
stopped, renders a stopped summary.md and leaves no ``iterv1/``; one on a file the user fixes (the
reference) leaves the run waiting (kopt_core.run.stop).

The hardware gate's verdict is the run's env.json. While it refuses generation, every seed reads that
file again (``kopt gate --out RUN/env.json`` renews it), and ``use_env`` (``kopt seed --env PATH``) puts
a new gate's env.json in its place, so a run whose gate once refused is seeded once a gate passes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kopt_core.errors import (
    EXIT_CONFIG,
    EXIT_HARDWARE,
    EXIT_INVALID_KERNEL,
    ConfigError,
    HardwareError,
    KoptError,
    ValidationError,
)
from kopt_core.jsonio import write_json
from kopt_core.records import BenchOptions, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.state import Env, RooflineHistoryEntry, State
from kopt_core.run.layout import BASELINE_PROFILE, BENCH_FILE, NOISE_FILE, baseline_dir
from kopt_core.run.prepare import ExecutorFactory, prepare_in_run, profile_options, profile_problem
from kopt_core.run.stop import clear_stop, stop_on_failure
from kopt_core.run.store import RunStore, read_env, retry_command
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


def gate_refusal(store: RunStore, state: State) -> HardwareError:
    """Why the run's gate verdict refuses generation (its problems, as env.json lists them), and the two
    commands that go on: a gate that passes, then ``kopt seed --retry --env``."""
    env = state.env
    if env is not None and env.diagnostic:
        what = "a diagnostic gate, which never allows generation"
    else:
        what = f"{env.attempts if env is not None else 0} attempt(s)"
    problems = "".join(f"\n  - {problem}" for problem in (env.problems if env is not None else ()))
    return HardwareError(
        f"the hardware gate did not allow generation (the run's env.json: {what})"
        + (f":{problems}" if problems else ""),
        hint=(
            f"run `kopt gate --backend {state.backend} --out env.json` on a machine that passes, then "
            f"`{retry_command(store.run_dir)} --env env.json`"
        ),
    )


def _adopt(store: RunStore, env: Env) -> State:
    """The run's gate verdict becomes ``env`` (state.json's env, generation_allowed, hardware_attempts)."""
    return store.update(env=env, generation_allowed=env.generation_allowed, hardware_attempts=env.attempts)


def use_env(
    store: RunStore,
    source: str | os.PathLike[str],
    *,
    retry: bool = False,
    on_warning: Callable[[str], None] | None = None,
) -> Env:
    """``kopt seed --env PATH``: the env.json of a new ``kopt gate`` becomes the run's (copied byte for
    byte into the run, and into state.json), for a run not yet seeded: a run whose gate refused goes on
    once a gate passes. A seeded run keeps the gate it was seeded under (its baseline's roofline was
    drawn on those ceilings): ConfigError. A stopped run takes it only on a retry (``retry``), and never
    after its kernel failed (exit 2). A malformed env.json is a ConfigError naming it."""
    env = read_env(source)
    with store.locked("seed"):
        state = store.load()
        if state.best_metric_ms is not None:
            raise ConfigError(
                f"--env: run {store.run_dir} is seeded already, under the gate of its env.json; a run keeps "
                "that gate, since its baseline's roofline was drawn on those ceilings",
                hint=(
                    "--env is for a run not yet seeded; a machine problem later in a run is cleared by "
                    f"`{retry_command(store.run_dir)}` alone"
                ),
            )
        if state.run_status == "stopped":
            stop = store.load_stop()
            if not retry or stop is None or stop.exit_code == EXIT_INVALID_KERNEL:
                raise store.stopped_error(state, retrying=retry)
        if env.backend and env.backend != state.backend and on_warning:
            on_warning(f"{source} was written for the {env.backend} backend, the run's is {state.backend}")
        if Path(source).resolve() != store.env_path:
            store.copy_env(source)
        _adopt(store, env)
    return env


def _gate_again(store: RunStore, state: State) -> State:
    """A refused verdict is read again from the run's env.json (a gate may have passed since, writing it
    there, or ``use_env`` put its env.json there): the run goes on under the first that allows it."""
    env = read_env(store.env_path)
    if env.generation_allowed:
        return _adopt(store, env)
    return state if env == state.env else _adopt(store, env)


def seed_baseline(
    pm: PluginManager,
    store: RunStore,
    *,
    options: BenchOptions | None = None,
    retry: bool = False,
    executor: ExecutorFactory | None = None,
) -> State:
    """Seed the run. A stopped run answers with what stopped it (``RunStore.stopped_error``); with
    ``retry``, a stop that was not the kernel's (exit 3: the machine, the gate; exit 4: a file to fix,
    from an older kopt) is cleared first and the run seeded again. While the run's gate verdict refuses
    generation, its env.json is read again first."""
    with store.locked("seed"):
        state = store.load()
        if state.run_status == "stopped":
            stop = store.load_stop()
            if not retry or stop is None or stop.exit_code == EXIT_INVALID_KERNEL:
                raise store.stopped_error(state, retrying=retry)
            state = clear_stop(store)
        if state.run_status != "initialized":
            return state  # seeded already: running the step again changes nothing
        folder = baseline_dir(state.run_dir)
        try:
            if not state.generation_allowed:
                state = _gate_again(store, state)
            if not state.generation_allowed:
                raise gate_refusal(store, state)
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
