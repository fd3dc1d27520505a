"""``kopt ablate --state S --iter I``: what each of the iteration's methods is worth to its champion
(spec step 3h).

For every method the generator wrote ``ablations/<method>/kernel.<ext>``: the champion with that one
method rolled back. Ablations are checked and built in the bounded pool, then each is paired against the
champion in one worker (same buffers, interleaved blocks): attribution(m) = ms_without_m - ms_champion
with its interval. A missing ablation, or one that fails its contract, its build or its correctness
checks, is inconclusive, never "essential". attribution.json is written once, when every method has its
answer; a killed ablate leaves none and starts again.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kopt_core import progress
from kopt_core.bench.executor import PairedPlan, shared_executor
from kopt_core.bench.paired import attribution
from kopt_core.errors import ConfigError, KoptError
from kopt_core.jsonio import write_json
from kopt_core.records import Candidate, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.loop import AttributionRecord, MethodAttribution, read_attribution
from kopt_core.records.paired import AblationEffect
from kopt_core.reference import load_reference
from kopt_core.run.layout import ATTRIBUTION_FILE, EXPLORE_FILE, PAIRED_FILE, kernel_file
from kopt_core.run.prepare import (
    ExecutorFactory,
    check_and_build,
    iteration_candidates,
    open_folder,
    prepare_in_run,
)
from kopt_core.run.stop import stop_on_failure
from kopt_core.run.store import RunStore

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager


def ablate_iteration(
    pm: PluginManager,
    store: RunStore,
    iteration: int,
    *,
    executor: ExecutorFactory = shared_executor,
    plan: PairedPlan | None = None,
) -> AttributionRecord:
    """Attribute the champion's time to each method of iteration ``iteration``; attribution.json."""
    with store.locked("ablate"):
        state = store.load()
        folder = open_folder(store, state, iteration, "ablate")
        path = folder / ATTRIBUTION_FILE
        if path.is_file():
            return read_attribution(path)
        if not (folder / EXPLORE_FILE).is_file():
            raise ConfigError(f"{folder} has no {EXPLORE_FILE}: explore the branches first (kopt explore)")
        if state.noise_threshold is None:
            raise ConfigError("the run has no measured noise threshold: seed it with this kopt")
        try:
            record = _ablate(pm, state, folder, iteration, executor, plan or PairedPlan())
        except KoptError as error:
            stop_on_failure(store, "ablate", error, iteration=iteration)
        write_json(path, to_data(record))
        return record


def _ablate(
    pm: PluginManager,
    state,
    folder: Path,
    iteration: int,
    executor: ExecutorFactory,
    plan: PairedPlan,
) -> AttributionRecord:
    info, methods, candidates = iteration_candidates(pm, state, folder, iteration)
    specs = {spec.method: spec for spec in candidates.ablations}
    ref = load_reference(state.ref_file)
    threshold = float(state.noise_threshold)
    answers: dict[str, MethodAttribution] = {}
    for method in methods:
        if method not in specs:
            answers[method] = inconclusive(method, "no ablation kernel was written for it")
    broken, builds, _ = check_and_build(
        pm,
        state,
        info,
        ref,
        {
            method: Candidate(
                path=str(folder / specs[method].file), backend=state.backend, name=f"without_{method}"
            )
            for method in methods
            if method in specs
        },
    )
    for method, problem in broken.items():
        answers[method] = inconclusive(method, f"its ablation breaks the contract: {problem}")
    built = {}
    for build in builds:
        if build.compile_pass and build.artifact is not None:
            built[build.key] = build.artifact
        else:
            answers[build.key] = inconclusive(build.key, f"its ablation did not build: {build.error}")

    champion_ms = None
    if built:
        champion_file = folder / kernel_file(Path(state.best_file).suffix)
        champion = prepare_in_run(pm, state, "ablate it", kernel=champion_file)
        a = champion.request(LOOP_OPTIONS)
        with executor() as runner:
            for method in methods:
                if method not in built:
                    continue
                b = attrs.evolve(a, artifact=built[method])
                with progress.step(f"pairing the champion with its ablation without {method}"):
                    measurement = runner.paired(a, b, plan)
                write_json(folder / Path(specs[method].file).parent / PAIRED_FILE, to_data(measurement))
                if measurement.status != "ok":
                    side = "the champion" if measurement.failed_side == "a" else "the ablation"
                    answers[method] = inconclusive(
                        method,
                        f"{side} failed in the pairing ({measurement.error_stage}): {measurement.error}",
                    )
                    continue
                effect = attribution(measurement, threshold, seed=plan.seed)
                a_ms = (
                    statistics.median(blk.a_ms for blk in measurement.blocks) if measurement.blocks else None
                )
                b_ms = (
                    statistics.median(blk.b_ms for blk in measurement.blocks) if measurement.blocks else None
                )
                champion_ms = champion_ms or a_ms
                answers[method] = measured(method, effect, ms_champion=a_ms, ms_without=b_ms)
    return AttributionRecord(
        iteration=iteration,
        champion=str(folder / kernel_file(Path(state.best_file).suffix)),
        threshold=threshold,
        methods=tuple(answers[m] for m in methods),
        champion_ms=champion_ms,
    )


def inconclusive(method: str, reason: str) -> MethodAttribution:
    return MethodAttribution(method=method, status="inconclusive", reason=reason)


def measured(
    method: str, effect: AblationEffect, *, ms_champion: float | None = None, ms_without: float | None = None
) -> MethodAttribution:
    """A pairing's answer; an invalid pairing (too few stable blocks) is inconclusive. The medians of the
    two sides' block times are kept for people; the decision reads only the paired interval."""
    if effect.verdict == "invalid" or effect.delta_ms is None:
        return inconclusive(method, "; ".join(effect.reasons) or "the pairing was invalid")
    return MethodAttribution(
        method=method,
        status="measured",
        reason="; ".join(effect.reasons),
        ms_champion=ms_champion,
        ms_without=ms_without,
        attribution_ms=effect.delta_ms,
        ci_low_ms=effect.delta_low_ms,
        ci_high_ms=effect.delta_high_ms,
        relative=effect.slowdown,
        beyond_noise=effect.beyond_noise,
        effect=effect,
    )
