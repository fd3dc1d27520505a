"""An attribution changes sign when the champion and its ablation swap (kopt_core.run.ablate): ablate
pairs the champion (A) with the champion without the method (B) and records the time the method saves,
ms_without - ms_champion, with its interval. Swap the two kernels and every number turns over: the time
saved is negated, its interval mirrored, the two medians exchanged, the relative slowdown inverted
((1 + r)(1 + r') = 1), and at most one of the two is beyond the run's noise threshold. A method without
a pairing (no ablation written, or one that breaks the contract) has no sign at all: it is inconclusive.

The pairings answer from data (``Replay``): a kernel's blocks are the same whichever side it is on.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopt_core.run.ablate import ablate_iteration
from kopt_core.run.explore import explore_iteration

from .conftest import BROKEN, METHODS, NOISE, PLAN, Replay, kernel, new_run, write_iteration

MS = st.sampled_from([0.5, 0.8, 0.995, 1.0, 1.004, 1.02, 1.3])


def ablated(pm, folder: Path, champion: str, ablations: dict[str, str]):
    """A run whose iteration 1 has one branch, ``champion``, explored, then ablated with ``ablations``."""
    store = new_run(pm, folder, branches=1, baseline_ms=2.0)
    iterv1 = write_iteration(store, [champion], ablations)
    replay = Replay()
    explore_iteration(pm, store, 1, executor=replay, plan=PLAN)
    return ablate_iteration(pm, store, 1, executor=replay, plan=PLAN), iterv1, replay


def close(x, y) -> bool:
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(MS, MS)
def test_swapped_ablation_changes_the_sign(pm, champion_ms, without_ms):
    method = METHODS[0]
    with tempfile.TemporaryDirectory() as scratch:
        one, iterv1, replay = ablated(
            pm, Path(scratch) / "one", kernel(champion_ms), {method: kernel(without_ms)}
        )
        other, _, _ = ablated(pm, Path(scratch) / "other", kernel(without_ms), {method: kernel(champion_ms)})
        # the champion is side A, its ablation side B
        assert replay.calls[-1] == (
            "paired",
            str(iterv1 / "kernel.py"),
            str(iterv1 / f"ablations/{method}/kernel.py"),
        )
        pairing = json.loads((iterv1 / f"ablations/{method}/paired.json").read_text())
    forward, backward = one.get(method), other.get(method)
    assert forward is not None and backward is not None
    assert forward.status == backward.status == "measured"
    assert one.threshold == other.threshold == NOISE and forward.effect.threshold == NOISE
    # the medians of the blocks, each side's, and exchanged by the swap
    assert forward.ms_champion == statistics.median(b["a_ms"] for b in pairing["blocks"])
    assert forward.ms_without == statistics.median(b["b_ms"] for b in pairing["blocks"])
    assert (backward.ms_champion, backward.ms_without) == (forward.ms_without, forward.ms_champion)
    assert one.champion_ms == forward.ms_champion
    assert close(backward.attribution_ms, -forward.attribution_ms)
    assert close(backward.ci_low_ms, -forward.ci_high_ms) and close(backward.ci_high_ms, -forward.ci_low_ms)
    assert close((1 + forward.relative) * (1 + backward.relative), 1.0)
    if champion_ms != without_ms:  # the sign is the sign of what the method saves
        assert math.copysign(1, forward.attribution_ms) == math.copysign(1, without_ms - champion_ms)
        assert math.isclose(forward.relative, without_ms / champion_ms - 1, rel_tol=0.05, abs_tol=0.002)
    assert not (forward.beyond_noise and backward.beyond_noise)
    # beyond noise: the slowdown's lower bound clears the run's threshold, not 0
    assert forward.beyond_noise == (forward.effect.slowdown_low > NOISE)
    if without_ms == champion_ms * 1.004 or champion_ms == without_ms:
        assert forward.beyond_noise is False


@pytest.mark.parametrize("without", ["none", "broken"])
def test_a_method_without_a_pairing_has_no_attribution(pm, tmp_path, without):
    """No ablation written for METHODS[1] (or one whose kernel breaks the contract): inconclusive, never
    a measured 0 ms; the other method is measured."""
    ablations = {METHODS[0]: kernel(1.3)}
    if without == "broken":
        ablations[METHODS[1]] = BROKEN
    record, _, replay = ablated(pm, tmp_path, kernel(1.0), ablations)
    missing, measured = record.get(METHODS[1]), record.get(METHODS[0])
    assert missing is not None and measured is not None
    assert missing.status == "inconclusive" and missing.attribution_ms is None
    assert missing.beyond_noise is None and missing.ms_without is None
    assert ("no ablation kernel" in missing.reason) == (without == "none")
    assert measured.status == "measured" and measured.beyond_noise is True and measured.attribution_ms > 0
    assert [c[0] for c in replay.calls].count("paired") == 2  # the promotion, and one ablation


def test_an_ablation_within_noise_is_measured_not_inconclusive(pm, tmp_path):
    record, _, _ = ablated(pm, tmp_path, kernel(1.0), {METHODS[0]: kernel(1.0)})
    answer = record.get(METHODS[0])
    assert answer is not None and answer.status == "measured" and answer.beyond_noise is False
