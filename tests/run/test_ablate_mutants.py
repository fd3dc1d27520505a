"""``kopt ablate``'s verdicts in-process (kopt_core/run/ablate.py): what each method of an iteration is
worth to its champion, and what stops the run.

The run folder, the champion and the ablation kernels are real (explored first, as ``kopt explore``
leaves them); each pairing of the champion with an ablation is a record built as data
(tests/run/loop_records.py). The properties: a method without a usable answer (no ablation written, an
ablation that breaks its contract, does not build, fails in the pairing, or a pairing too unstable to
decide) is inconclusive, never measured, and never at 0 ms; a measured attribution is the paired
interval's, with the run's noise threshold and the plan's seed; it changes sign when the champion and its
ablation swap; a failing ablate leaves stop.json with its stage."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kopt_core.bench.executor import PairedPlan
from kopt_core.bench.paired import attribution
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.jsonio import read_json
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.loop import read_attribution
from kopt_core.records.paired import AblationEffect
from kopt_core.run.ablate import ablate_iteration, inconclusive, measured
from kopt_core.run.explore import explore_iteration

from .loop_records import (
    BROKEN,
    KERNEL,
    M1,
    M2,
    M3,
    UNBUILT,
    Picky,
    RecordedExecutor,
    Said,
    bench_record,
    opened_run,
    pairing,
    speedup_blocks,
    write_kernels,
)

PLAN = PairedPlan(blocks=12, seed=7)


@pytest.fixture
def pm(make_pm):
    return make_pm(Picky())


def explored(pm, tmp_path, ablations: dict[str, str], methods=(M1, M2, M3), noise=0.02):
    """A run whose iteration 1 is explored and promoted, with these ablation kernels written."""
    store, iterv1 = opened_run(pm, tmp_path, noise=noise, methods=methods)
    write_kernels(store, iterv1, {"b1": KERNEL}, ablations, methods=methods)
    explore_iteration(
        pm,
        store,
        1,
        executor=RecordedExecutor({"b1": bench_record("", 1.0)}, [pairing(*speedup_blocks(1.5))]),
    )
    return store, iterv1


def slower(ratio: float, base: float = 1.0, **fields):
    """A pairing of the champion (A) with an ablation (B) that takes ``ratio`` times as long."""
    b, a = speedup_blocks(ratio, base=base)
    return pairing(a, b, **fields)


def test_every_method_gets_its_answer_in_the_order_methods_json_lists_them(pm, tmp_path):
    store, iterv1 = explored(pm, tmp_path, {M3: KERNEL, M1: KERNEL})  # none written for M2
    first, second = slower(1.2, base=2.0), slower(1.0005)
    executor = RecordedExecutor(pairings=[first, second])
    record = ablate_iteration(pm, store, 1, executor=executor, plan=PLAN)

    assert [m.method for m in record.methods] == [M1, M2, M3]
    one, two, three = record.methods
    assert two == inconclusive(M2, "no ablation kernel was written for it")
    assert (two.status, two.attribution_ms, two.ms_without, two.beyond_noise) == (
        "inconclusive",
        None,
        None,
        None,
    )
    # the pairings: the champion (A) with each ablation (B), M1 then M3, with the plan given
    champion = iterv1 / "kernel.py"
    assert executor.calls == [
        ("paired", (str(champion), str(iterv1 / "ablations" / M1 / "kernel.py"))),
        ("paired", (str(champion), str(iterv1 / "ablations" / M3 / "kernel.py"))),
    ]
    assert executor.plans == [PLAN, PLAN] and executor.entered == 1
    a, b = executor.requests[0]
    assert a.options == LOOP_OPTIONS
    assert b.reference == a.reference and b.dims == a.dims and b.options == a.options
    # M1 saves 20% of 2 ms, beyond 2% noise; M3 0.05%, within it
    assert one.status == "measured" and one.beyond_noise is True
    assert one.attribution_ms == pytest.approx(0.4, rel=0.01)
    assert one.ms_champion == statistics.median(b.a_ms for b in first.blocks)  # the medians, not the means
    assert one.ms_without == statistics.median(b.b_ms for b in first.blocks)
    assert three.ms_champion == statistics.median(b.a_ms for b in second.blocks)
    assert three.status == "measured" and three.beyond_noise is False
    assert record.champion_ms == one.ms_champion  # the first pairing's champion median
    assert record.champion == str(champion)
    assert record.threshold == 0.02 and record.iteration == 1
    # the evidence: each pairing beside its ablation, attribution.json once everything was answered
    assert read_json(iterv1 / "ablations" / M1 / "paired.json")["b"].endswith(f"{M1}/kernel.py")
    assert read_attribution(iterv1 / "attribution.json") == record


def test_a_measured_attribution_is_the_paired_interval_s_with_the_run_s_threshold_and_seed(pm, tmp_path):
    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,), noise=0.05)
    spread = random.Random(1)
    a_ms = [1 + spread.random() * 0.3 for _ in range(24)]
    b_ms = [a * (1.03 + spread.random() * 0.1) for a in a_ms]  # 3-13% slower without M1
    measurement = pairing(a_ms, b_ms)
    record = ablate_iteration(pm, store, 1, executor=RecordedExecutor(pairings=[measurement]), plan=PLAN)
    got = record.methods[0].effect
    effect = attribution(attrs.evolve(measurement, a=got.a, b=got.b), 0.05, seed=PLAN.seed)
    assert effect != attrs.evolve(attribution(measurement, 0.05, seed=0), a=got.a, b=got.b)  # seeds differ
    assert record.methods[0] == measured(
        M1, effect, ms_champion=statistics.median(a_ms), ms_without=statistics.median(b_ms)
    )
    assert record.methods[0].effect.threshold == 0.05


def test_without_a_plan_the_default_pairing_plan_is_used(pm, tmp_path):
    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    executor = RecordedExecutor(pairings=[slower(1.2)])
    ablate_iteration(pm, store, 1, executor=executor)
    assert executor.plans == [PairedPlan()]


def test_an_ablation_that_breaks_its_contract_or_does_not_build_is_inconclusive(pm, tmp_path):
    store, _ = explored(pm, tmp_path, {M1: BROKEN, M2: UNBUILT, M3: KERNEL})
    executor = RecordedExecutor(pairings=[slower(1.2)])
    record = ablate_iteration(pm, store, 1, executor=executor, plan=PLAN)
    one, two, three = record.methods
    assert [m.method for m in record.methods] == [M1, M2, M3]
    assert one.status == "inconclusive" and one.reason.startswith("its ablation breaks the contract: ")
    assert one.attribution_ms is None
    assert two.status == "inconclusive" and two.reason.startswith("its ablation did not build: ")
    assert "the test says it does not build" in two.reason and two.attribution_ms is None
    assert three.status == "measured"
    assert len(executor.calls) == 1


def test_with_no_ablation_built_nothing_is_paired(pm, tmp_path):
    store, iterv1 = explored(pm, tmp_path, {M1: BROKEN}, methods=(M1, M2))
    executor = RecordedExecutor()
    record = ablate_iteration(pm, store, 1, executor=executor, plan=PLAN)
    assert executor.entered == 0 and record.champion_ms is None
    assert [m.status for m in record.methods] == ["inconclusive", "inconclusive"]
    assert (iterv1 / "attribution.json").is_file()


@pytest.mark.parametrize(("side", "who"), [("a", "the champion"), ("b", "the ablation")])
def test_a_side_failing_in_the_pairing_is_inconclusive_and_named(pm, tmp_path, side, who):
    store, iterv1 = explored(pm, tmp_path, {M1: KERNEL, M2: KERNEL}, methods=(M1, M2))
    failed = pairing(status="failed", failed_side=side, error_stage="recheck", error="wrong after timing")
    record = ablate_iteration(
        pm, store, 1, executor=RecordedExecutor(pairings=[failed, slower(1.3)]), plan=PLAN
    )
    assert record.methods[0] == inconclusive(M1, f"{who} failed in the pairing (recheck): wrong after timing")
    assert record.methods[1].status == "measured"
    assert record.champion_ms == record.methods[1].ms_champion  # the failed pairing gives none
    assert read_json(iterv1 / "ablations" / M1 / "paired.json")["status"] == "failed"


def test_a_pairing_too_unstable_to_decide_is_inconclusive_with_its_reasons(pm, tmp_path):
    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    a, b = speedup_blocks(1.2, count=3)
    short = pairing(a, b)
    record = ablate_iteration(pm, store, 1, executor=RecordedExecutor(pairings=[short]), plan=PLAN)
    effect = attribution(short, 0.02, seed=PLAN.seed)
    assert effect.verdict == "invalid" and effect.reasons
    assert record.methods[0] == inconclusive(M1, "; ".join(effect.reasons))
    assert record.champion_ms == pytest.approx(statistics.median(a))  # side A's, though nothing was decided


def test_measured_answers_an_invalid_effect_as_inconclusive():
    invalid = AblationEffect(
        a="a",
        b="b",
        verdict="invalid",
        beyond_noise=False,
        delta_ms=None,
        delta_low_ms=None,
        delta_high_ms=None,
        slowdown=None,
        slowdown_low=None,
        slowdown_high=None,
    )
    assert measured(M1, invalid) == inconclusive(M1, "the pairing was invalid")
    assert measured(M1, invalid.__class__(**{**_fields(invalid), "reasons": ("r1", "r2")})) == inconclusive(
        M1, "r1; r2"
    )
    # an invalid verdict is inconclusive whatever figures it carries
    figures = {"delta_ms": 0.1, "delta_low_ms": 0.05, "delta_high_ms": 0.2, "slowdown": 0.1}
    assert measured(M1, invalid.__class__(**{**_fields(invalid), **figures})) == inconclusive(
        M1, "the pairing was invalid"
    )
    # a verdict other than invalid without a delta is no measurement either
    no_delta = invalid.__class__(**{**_fields(invalid), "verdict": "within_noise"})
    assert measured(M1, no_delta).status == "inconclusive"


def _fields(effect) -> dict:
    import attrs

    return attrs.asdict(effect, recurse=False)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.5, 2.0), min_size=12, max_size=16),
    st.floats(0.6, 1.6),
    st.integers(0, 3),
)
def test_an_attribution_changes_sign_when_the_champion_and_its_ablation_swap(base, ratio, seed):
    a_ms = list(base)
    b_ms = [x * ratio * (1 + 0.01 * (i % 3)) for i, x in enumerate(base)]
    forward = measured(M1, attribution(pairing(a_ms, b_ms), 0.02, seed=seed))
    backward = measured(M1, attribution(pairing(b_ms, a_ms), 0.02, seed=seed))
    assert forward.status == backward.status == "measured"
    assert forward.attribution_ms == pytest.approx(-backward.attribution_ms, abs=1e-12)
    assert forward.ci_low_ms == pytest.approx(-backward.ci_high_ms, abs=1e-12)
    assert forward.ci_high_ms == pytest.approx(-backward.ci_low_ms, abs=1e-12)
    assert not (forward.beyond_noise and backward.beyond_noise)
    assert forward.reason == "; ".join(forward.effect.reasons)
    assert forward.relative == forward.effect.slowdown


def test_ablate_again_reads_its_answer_and_pairs_nothing(pm, tmp_path):
    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    record = ablate_iteration(pm, store, 1, executor=RecordedExecutor(pairings=[slower(1.2)]), plan=PLAN)
    executor = RecordedExecutor()
    assert ablate_iteration(pm, store, 1, executor=executor, plan=PLAN) == record
    assert executor.entered == 0


def test_ablate_needs_an_explored_iteration_and_a_noise_threshold(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    with pytest.raises(ConfigError) as error:
        ablate_iteration(pm, store, 1, executor=RecordedExecutor())
    assert error.value.message == f"{iterv1} has no explore.json: explore the branches first (kopt explore)"
    (tmp_path / "b").mkdir()
    store, _ = explored(pm, tmp_path / "b", {M1: KERNEL}, methods=(M1,))
    store.update(noise_threshold=None)
    with pytest.raises(ConfigError) as error:
        ablate_iteration(pm, store, 1, executor=RecordedExecutor())
    assert error.value.message == "the run has no measured noise threshold: seed it with this kopt"
    assert store.load().run_status == "running" and store.load_stop() is None


def test_the_machine_failing_in_ablate_stops_the_run_at_stage_ablate(pm, tmp_path):
    store, iterv1 = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    with pytest.raises(HardwareError):
        ablate_iteration(
            pm, store, 1, executor=RecordedExecutor(pairings=[HardwareError("the worker died")]), plan=PLAN
        )
    stop = store.load_stop()
    assert (stop.stage, stop.exit_code, stop.iteration, stop.reason) == ("ablate", 3, 1, "the worker died")
    assert store.load().run_status == "stopped"
    assert not (iterv1 / "attribution.json").exists()
    assert Path(store.run_dir, "stop.json").is_file()


def test_a_measured_answer_carries_the_effect_s_interval_field_by_field():
    a_ms, b_ms = speedup_blocks(1.0)
    b_ms = [b * (1.1 + 0.01 * (i % 4)) for i, b in enumerate(b_ms)]
    effect = attribution(pairing(a_ms, b_ms), 0.02)
    answer = measured(M1, effect, ms_champion=1.0, ms_without=1.1)
    assert (answer.method, answer.status, answer.ms_champion, answer.ms_without) == (M1, "measured", 1.0, 1.1)
    assert answer.attribution_ms == effect.delta_ms
    assert answer.ci_low_ms == effect.delta_low_ms and answer.ci_high_ms == effect.delta_high_ms
    assert answer.ci_low_ms < answer.attribution_ms < answer.ci_high_ms
    assert answer.relative == effect.slowdown and answer.beyond_noise is effect.beyond_noise is True
    assert answer.effect == effect and answer.reason == "; ".join(effect.reasons)
    assert measured(M1, effect).ms_champion is None and measured(M1, effect).ms_without is None


def test_an_ok_pairing_without_blocks_gives_no_champion_time(pm, tmp_path):
    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    record = ablate_iteration(pm, store, 1, executor=RecordedExecutor(pairings=[pairing()]), plan=PLAN)
    assert record.methods[0].status == "inconclusive" and record.champion_ms is None


@pytest.fixture
def said():
    from kopt_core import progress

    reporter = Said()
    previous = progress.install(reporter)
    yield reporter
    progress.install(previous)


def test_ablate_says_what_it_pairs_holds_its_lock_and_names_its_builds(make_pm, tmp_path, said, monkeypatch):
    backend = Picky()
    pm = make_pm(backend)
    store, _ = explored(pm, tmp_path, {M1: KERNEL, M2: KERNEL}, methods=(M1, M2))
    steps = []
    hold = store.locked

    def locked(step):
        steps.append(step)
        return hold(step)

    monkeypatch.setattr(store, "locked", locked)
    said.messages.clear()
    backend.compiled.clear()
    ablate_iteration(pm, store, 1, executor=RecordedExecutor(pairings=[slower(1.2), slower(1.2)]), plan=PLAN)
    assert steps == ["ablate"]
    assert [m for m in said.messages if not m.startswith("building")] == [
        f"pairing the champion with its ablation without {M1}",
        f"pairing the champion with its ablation without {M2}",
    ]
    assert [c.name for c in backend.compiled][:2] == [f"without_{M1}", f"without_{M2}"]


def test_ablate_names_itself_when_its_iteration_is_closed(pm, tmp_path):
    from kopt_core.records.state import HistoryEntry

    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    store.update(history=(HistoryEntry(iteration=1, kernel="", best_ms=2.0),))
    with pytest.raises(ConfigError) as error:
        ablate_iteration(pm, store, 1, executor=RecordedExecutor())
    assert error.value.message == "iteration 1 is already updated; ablate belongs to an open iteration"


def test_ablate_on_a_machine_without_the_gpu_its_backend_needs_stops_at_stage_ablate(make_pm, tmp_path):
    from kopt_core.hardware import detect_gpus

    if detect_gpus()[0]:
        pytest.skip("this machine has a GPU")
    store, iterv1 = explored(make_pm(Picky()), tmp_path, {M1: KERNEL}, methods=(M1,))
    pm = make_pm(Picky(needs_gpu=True))
    with pytest.raises(HardwareError) as error:
        ablate_iteration(pm, store, 1, executor=RecordedExecutor(), plan=PLAN)
    assert str(error.value).endswith("to ablate it")
    assert store.load_stop().stage == "ablate" and store.load_stop().exit_code == 3


def test_ablate_on_a_stopped_run_answers_with_its_stop(pm, tmp_path):
    from kopt_core.errors import KoptError
    from kopt_core.run.stop import write_stop

    store, _ = explored(pm, tmp_path, {M1: KERNEL}, methods=(M1,))
    write_stop(store, "profile", "ncu failed", 3, iteration=1)
    with pytest.raises(KoptError) as error:
        ablate_iteration(pm, store, 1, executor=RecordedExecutor())
    assert "is stopped: profile (iteration 1) failed (exit 3): ncu failed" in str(error.value)
