"""An iteration's champion (kopt_core.run.explore): the branch of minimum median among those that pass
every gate, ties to the lowest branch number (b2 before b10: the number, not the id's text); the other
passing branches are its frontier; its kernel is installed as iterv1/kernel.py; and it becomes the run's
best only when its pairing with the best is "faster" by more than the run's noise threshold.

Each branch's bench answers from data (``Replay``), so medians can tie exactly and a mean can order the
branches otherwise than their medians; everything else is kopt's explore on the example backend.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopt_core.errors import ValidationError
from kopt_core.run.explore import explore_iteration

from .conftest import NOISE, Replay, kernel, new_run, write_iteration

# a branch: (median in ms, mean in ms, correct, timing valid); medians from few values, so that they tie
BRANCH = st.tuples(
    st.sampled_from([0.5, 0.6, 0.7, 0.9]),
    st.sampled_from([0.3, 0.55, 0.8, 1.2]),
    st.booleans(),
    st.booleans(),
)


def expected_champion(branches) -> str | None:
    passing = [(ms, n) for n, (ms, _, correct, timed) in enumerate(branches, 1) if correct and timed]
    return f"b{min(passing)[1]}" if passing else None


def explored(pm, folder: Path, branches, baseline_ms: float = 1.0):
    store = new_run(pm, folder, branches=len(branches), baseline_ms=baseline_ms)
    iterv1 = write_iteration(
        store,
        [
            kernel(ms, mean=mean, correct="yes" if correct else "no", timed="yes" if timed else "no")
            for ms, mean, correct, timed in branches
        ],
    )
    return store, iterv1


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(BRANCH, min_size=1, max_size=11))
def test_champion_is_min_median_ties_to_lowest_number(pm, branches):
    with tempfile.TemporaryDirectory() as scratch:
        store, iterv1 = explored(pm, Path(scratch), branches)
        champion = expected_champion(branches)
        if champion is None:
            with pytest.raises(ValidationError, match="every branch of iteration 1 failed"):
                explore_iteration(pm, store, 1, executor=Replay())
            assert json.loads(store.stop_path.read_text())["stage"] == "explore"
            return
        record = explore_iteration(pm, store, 1, executor=Replay())
        assert record.champion == champion
        assert record.champion_ms == branches[int(champion[1:]) - 1][0]
        passing = [f"b{n}" for n, (_, _, correct, timed) in enumerate(branches, 1) if correct and timed]
        assert record.frontier == tuple(b for b in passing if b != champion)
        assert {b.id for b in record.branches if b.passed} == set(passing)
        assert (iterv1 / "kernel.py").read_bytes() == (
            iterv1 / "branches" / champion / "kernel.py"
        ).read_bytes()
        written = json.loads((iterv1 / "explore.json").read_text())
        assert written["champion"] == champion


def test_b2_wins_a_tie_with_b10(pm, tmp_path):
    """Ten branches, b2 and b10 tied at the fastest median: b2 (by its id's text, b10 would come first)."""
    branches = [(0.9, 0.9, True, True)] * 10
    branches[1] = branches[9] = (0.5, 0.5, True, True)
    store, iterv1 = explored(pm, tmp_path, branches)
    record = explore_iteration(pm, store, 1, executor=Replay())
    assert record.champion == "b2" and record.champion_ms == 0.5
    assert "b10" in record.frontier


def test_a_branch_whose_timing_is_invalid_is_never_the_champion(pm, tmp_path):
    branches = [(0.9, 0.9, True, True), (0.1, 0.1, True, False)]
    store, _ = explored(pm, tmp_path, branches)
    record = explore_iteration(pm, store, 1, executor=Replay())
    assert record.champion == "b1"
    b2 = record.branch("b2")
    assert b2 is not None and not b2.passed and not b2.timing_valid and b2.error_stage == "timing"


@pytest.mark.parametrize(
    ("champion_ms", "verdict"),
    [(0.5, "faster"), (0.995, "not_faster"), (1.0, "not_faster"), (1.5, "slower")],
)
def test_promoted_only_on_a_win_beyond_noise(pm, tmp_path, champion_ms, verdict):
    """The pairing has the best as A and the champion as B, and is decided with the run's threshold: a
    champion 0.5% faster than the best (inside the 1% noise) is no win, though its interval is above 1."""
    store, iterv1 = explored(pm, tmp_path, [(champion_ms, champion_ms, True, True)], baseline_ms=1.0)
    replay = Replay()
    explore_iteration(pm, store, 1, executor=replay)
    paired = json.loads((iterv1 / "paired.json").read_text())
    assert replay.calls[-1] == ("paired", store.load().best_file, str(iterv1 / "kernel.py"))
    assert (paired["a"], paired["b"]) == (store.load().best_file, str(iterv1 / "kernel.py"))
    assert paired["threshold"] == NOISE and paired["verdict"] == verdict
    assert (paired["ci_low"] > 1 + NOISE) == (verdict == "faster")
    if champion_ms == 0.995:
        assert paired["ci_low"] > 1  # faster than the best, but not beyond the noise
