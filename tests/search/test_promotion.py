"""The search's verdicts (kopt_core.search.promotion) on constructed bench records and trial lists with
known answers: a configuration passes only when its record is ok, correct and validly timed; a device
that could not be used is no verdict; every other record fails with its stage and first error line; the
fastest passing configurations are kept, fastest first, ties in trial order; the contenders timed again
before a search names its best are each worker's fastest and those within the margin of it, read on that
worker's own times."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kopt_core.errors import HardwareError
from kopt_core.records import BenchResult, TimingStats
from kopt_core.records.search import TrialOutcome, TrialRecord
from kopt_core.search.promotion import CONTENDER_MARGIN, contenders, fastest_passing, first_error_line, judge
from kopt_core.search.study import StudyResult


def timing(median_ms: float) -> TimingStats:
    return TimingStats(
        mode="per_launch",
        l2="cold",
        clock="cuda_events",
        launches_per_sample=1,
        n=20,
        median_ms=median_ms,
        p95_ms=median_ms * 1.5,
        mean_ms=median_ms * 1.25,
        min_ms=median_ms / 2,
        max_ms=median_ms * 2,
        stddev_ms=0.1,
        cv=0.05,
        median_ci_rel=0.004,
        stop_reason="precision reached",
        warmup_ms=10.0,
        warmup_launches=3,
    )


def record(status="ok", correct=True, valid=True, median=0.75, stage=None, error=None) -> BenchResult:
    return BenchResult(
        kernel="trials/abc/kernel.cu",
        backend="cuda",
        status=status,
        correctness_pass=correct,
        timing_valid=valid,
        error=error,
        error_stage=stage,
        kernel_timing=timing(median) if median is not None else None,
    )


# --------------------------------------------------------------------------------------------- judge


def test_an_ok_correct_validly_timed_record_passes_with_its_median():
    assert judge(record(median=0.75)) == TrialOutcome("ok", value_ms=0.75, detail="")
    outcome = judge(record(median=2))  # an integer median still becomes a float time
    assert outcome == TrialOutcome("ok", value_ms=2.0) and type(outcome.value_ms) is float


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        ({"correct": False}, "correctness: the output does not match the reference"),
        (
            {"correct": False, "error": "seed 1: y: 3 of 4096 elements off"},
            "correctness: seed 1: y: 3 of 4096 elements off",
        ),
        # correct but the timing is not valid, or there is no timing at all
        ({"valid": False}, "timing: the timing is not valid"),
        (
            {"valid": False, "error": "work escaped onto another stream"},
            "timing: work escaped onto another stream",
        ),
        ({"median": None}, "timing: the timing is not valid"),
        # a wrong result whose timing is also invalid is a correctness failure first
        ({"correct": False, "valid": False}, "correctness: the output does not match the reference"),
    ],
)
def test_an_ok_record_that_is_not_correct_and_validly_timed_fails(changes, detail):
    assert judge(record(**changes)) == TrialOutcome("failed", detail=detail)


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        ({"status": "failed", "stage": "correctness", "error": "y: NaN"}, "correctness: y: NaN"),
        ({"status": "failed", "stage": "recheck", "error": None}, "recheck: status failed"),
        ({"status": "failed", "stage": None, "error": "killed"}, "failed: killed"),
        ({"status": "error", "stage": None, "error": None}, "error: status error"),
        ({"status": "error", "stage": "worker", "error": "exit -11\nsegfault"}, "worker: exit -11"),
        # the device stage fails the configuration unless the worker itself could not run (status error)
        ({"status": "failed", "stage": "device", "error": "illegal address"}, "device: illegal address"),
    ],
)
def test_a_record_that_is_not_ok_fails_with_its_stage_and_first_error_line(changes, detail):
    # the record still carries a valid-looking timing: only the status decides
    assert judge(record(**changes)) == TrialOutcome("failed", detail=detail)


def test_a_caught_cheat_is_named_after_the_reason():
    cheat = attrs.evolve(
        record(status="failed", stage="correctness", error="y: 3 of 16 wrong"), violation="input_stash"
    )
    assert judge(cheat) == TrialOutcome("failed", detail="correctness: y: 3 of 16 wrong [input_stash]")
    assert judge(record(status="failed", stage="correctness", error="y: 3 of 16 wrong")).detail == (
        "correctness: y: 3 of 16 wrong"
    )


def test_a_device_the_worker_could_not_use_is_no_verdict_on_the_configuration():
    with pytest.raises(HardwareError) as raised:
        judge(record(status="error", stage="device", error="note: retrying\ncudaErrorNoDevice: error 100"))
    assert raised.value.message == "the bench worker could not use the device: cudaErrorNoDevice: error 100"
    with pytest.raises(HardwareError) as raised:
        judge(record(status="error", stage="device", error=None))
    assert raised.value.message == "the bench worker could not use the device: no message"


# --------------------------------------------------------------------------------- first_error_line


def test_the_first_line_that_says_error_is_chosen_else_the_first_line():
    text = "\n  warning: unused variable\n3 errors generated\nkernel.cu(12): Error: bad type\nerror: later\n"
    assert first_error_line(text) == "kernel.cu(12): Error: bad type"  # "errors" is not the word
    assert first_error_line("  first\nsecond\n") == "first"
    assert first_error_line("terror\nerror_count 2\nno-error here") == "no-error here"


@pytest.mark.parametrize("empty", [None, "", " \n\t\n"])
def test_no_output_is_no_message(empty):
    assert first_error_line(empty) == "no message"


def test_a_long_line_is_cut_to_the_limit_with_an_ellipsis():
    assert first_error_line("e" * 300) == "e" * 300
    assert first_error_line("e" * 301) == "e" * 297 + "..."
    assert first_error_line("abcdefghijk", limit=10) == "abcdefg..."
    assert first_error_line("abcdefghij", limit=10) == "abcdefghij"


# ---------------------------------------------------------------------------------- fastest_passing


def trial(number: int, value_ms: float | None, status: str = "ok", worker: str = "") -> TrialRecord:
    return TrialRecord(
        worker=worker,
        number=number,
        config_id=f"c{number}",
        config={"T": number},
        status=status,
        value_ms=value_ms,
        detail="" if status == "ok" else "compile: error",
        seconds=1.0,
    )


TRIALS = (
    trial(0, 3.0),
    trial(1, None, "failed"),
    trial(2, 1.5),
    trial(3, 2.0),
    trial(4, 1.5),  # ties with trial 2: the earlier trial first
    trial(5, None),  # ok without a time: never kept
    trial(6, 0.5, "failed"),  # a failed trial with a time (never written so, but never kept either)
)


def test_the_fastest_passing_configurations_are_kept_fastest_first_ties_by_trial_number():
    assert [t.number for t in fastest_passing(TRIALS, 4)] == [2, 4, 3, 0]
    assert [t.number for t in fastest_passing(TRIALS)] == [2]
    assert [t.number for t in fastest_passing(reversed(TRIALS), 2)] == [2, 4]
    assert [t.number for t in fastest_passing(TRIALS, 10)] == [2, 4, 3, 0]
    assert fastest_passing(TRIALS, 0) == ()
    assert fastest_passing([trial(1, None, "failed")], 3) == ()


def test_a_study_result_keeps_the_same_configurations():
    result = StudyResult(study_name="s", sampler="grid", trials=TRIALS)
    assert result.best(3) == fastest_passing(TRIALS, 3)
    assert [t.number for t in result.best()] == [2]


# ---------------------------------------------------------------------------------- contenders


def numbers(trials) -> list[int]:
    return [t.number for t in trials]


def test_the_contenders_are_the_fastest_and_those_within_the_margin_of_it():
    trials = (
        trial(0, 1.00),
        trial(1, 1.05),  # exactly at the margin: still a contender
        trial(2, 1.051),  # just past it
        trial(3, 1.02),
        trial(4, 0.99, "failed"),  # failed: never one, however fast
        trial(5, 3.0),
    )
    assert CONTENDER_MARGIN == 0.05
    assert numbers(contenders(trials, 5)) == [0, 3, 1]
    assert numbers(contenders(trials, 2)) == [0, 3]  # at most k
    assert numbers(contenders(trials, 1)) == [0]
    assert numbers(contenders(trials, 5, margin=0.0)) == [0]
    assert numbers(contenders(trials, 5, margin=0.06)) == [0, 3, 1, 2]


def test_a_lone_passing_configuration_is_its_own_contender_and_none_pass_means_none():
    assert numbers(contenders([trial(0, None, "failed"), trial(1, 7.0)], 5)) == [1]
    assert contenders([trial(0, None, "failed")], 5) == ()
    assert contenders([], 3) == ()
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        contenders([trial(0, 1.0)], 0)


def test_each_worker_s_contenders_are_read_on_its_own_times():
    """Worker b's times are a hundred times faster (another GPU): its trials are not compared with a's, so
    each worker gives its own fastest and its own near-fastest."""
    trials = (
        trial(0, 1.00, worker="a"),
        trial(1, 1.03, worker="a"),
        trial(2, 2.00, worker="a"),
        trial(3, 0.020, worker="b"),
        trial(4, 0.0201, worker="b"),
        trial(5, 0.010, worker="b"),
        trial(6, 0.5, "failed", worker="a"),
    )
    assert numbers(contenders(trials, 5)) == [5, 0, 1]  # b's fastest is 5; 3 and 4 are twice as slow
    assert numbers(contenders(trials, 5, margin=1.5)) == [5, 3, 4, 0, 1, 2]
    assert numbers(contenders(trials, 1, margin=1.5)) == [5, 0]  # k per worker


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.01, max_value=100.0, allow_nan=False),
            st.sampled_from(["a", "b", "c"]),
            st.booleans(),
        ),
        max_size=30,
    ),
    st.integers(min_value=1, max_value=6),
    st.floats(min_value=0.0, max_value=0.5),
)
def test_contenders_hold_every_worker_s_fastest_and_nothing_past_its_margin(rows, k, margin):
    trials = [
        trial(n, value, "ok" if passed else "failed", worker)
        for n, (value, worker, passed) in enumerate(rows)
    ]
    chosen = contenders(trials, k, margin)
    assert len({t.number for t in chosen}) == len(chosen)  # none twice
    for worker in {t.worker for t in trials if t.status == "ok"}:
        mine = [t for t in chosen if t.worker == worker]
        (fastest,) = fastest_passing([t for t in trials if t.worker == worker], 1)
        assert mine and mine[0] == fastest  # every worker's fastest, first
        assert len(mine) <= k
        assert all(t.status == "ok" and t.value_ms <= fastest.value_ms * (1 + margin) for t in mine)
        # and every trial of that worker within the margin is in, up to k
        near = [t for t in fastest_passing(trials, len(trials)) if t.worker == worker]
        near = [t for t in near if t.value_ms <= fastest.value_ms * (1 + margin)][:k]
        assert mine == near
