"""The run's noise threshold (kopt_core.bench.paired.noise_threshold, kopt_core.run.seed.measure_noise):
from the baseline's A/A pairing, never below the floor, and wide enough to cover the A/A interval on
both sides of 1 (its scatter and any bias of the sides); an A/A pairing that cannot decide gives no
threshold at all: the seed stops for the machine, with the pairing kept in baseline/noise_aa.json.
"""

from __future__ import annotations

import json

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kopt_core.bench.executor import PairedPlan
from kopt_core.bench.paired import NOISE_FLOOR, block_order, decide, noise_threshold
from kopt_core.errors import HardwareError
from kopt_core.records import PairedBlock, PairedMeasurement
from kopt_core.run.prepare import prepare_in_run
from kopt_core.run.seed import measure_noise

from .conftest import PLAN, Replay, new_run, paired_measurement


def aa_pairing(blocks: int, seed: int, bias: float, scatter: float) -> PairedMeasurement:
    """The same kernel on both sides; side B ``bias`` slower, each block with ``scatter``."""
    rng = np.random.default_rng(seed)
    order = block_order(blocks, seed)
    a = 1.0 * (1 + rng.normal(0, scatter, blocks))
    b = (1 + bias) * (1 + rng.normal(0, scatter, blocks))
    made = tuple(
        PairedBlock(index=i, order=order[i], a_ms=float(a[i]), b_ms=float(b[i])) for i in range(blocks)
    )
    return PairedMeasurement(a="k.cu", b="k.cu", blocks=made, telemetry_available=True)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.integers(10, 30),
    st.integers(0, 2**16),
    st.sampled_from([-0.02, -0.008, 0.0, 0.003, 0.008, 0.02]),
    st.sampled_from([0.0005, 0.002, 0.01]),
)
def test_the_noise_threshold_covers_the_a_a_interval_on_both_sides(blocks, seed, bias, scatter):
    aa = aa_pairing(blocks, seed, bias, scatter)
    threshold = noise_threshold(aa)
    interval = decide(aa, 0.0)
    assert threshold >= NOISE_FLOOR
    assert 1 - threshold <= interval.ci_low and interval.ci_high <= 1 + threshold
    # and no wider than it must be: the floor, or one side of the interval exactly
    assert threshold in (NOISE_FLOOR, 1 - interval.ci_low, interval.ci_high - 1)


@pytest.fixture
def prepared(pm, tmp_path):
    store = new_run(pm, tmp_path)
    return prepare_in_run(pm, store.load(), "seed"), store.run_dir / "baseline"


def test_an_a_a_pairing_that_cannot_decide_stops_the_seed(prepared):
    """Four blocks (a decision needs ten): no threshold, a stop for the machine, the pairing kept."""
    kernel, folder = prepared
    with pytest.raises(HardwareError, match="the noise is unknown"):
        measure_noise(kernel, folder, executor=Replay(), plan=PairedPlan(blocks=4, seed=7))
    kept = json.loads((folder / "noise_aa.json").read_text())
    assert kept["verdict"] == "invalid" and kept["blocks_used"] == 4


def test_the_seed_s_threshold_is_the_a_a_pairing_s(prepared):
    """An A/A pairing whose sides differ by 1.2%: the threshold is that pairing's, above the floor."""
    kernel, folder = prepared
    aa = attrs.evolve(paired_measurement(1.0, 1.012, PLAN), a="k", b="k")
    replay = Replay(answers=[aa])
    threshold = measure_noise(kernel, folder, executor=replay, plan=PLAN)
    source = kernel.artifact.source
    assert replay.calls == [("paired", source, source)]  # the baseline against itself
    assert threshold == noise_threshold(decide(aa, 0.0, seed=PLAN.seed), seed=PLAN.seed) > 0.01
    kept = json.loads((folder / "noise_aa.json").read_text())
    assert kept["threshold"] == 0.0 and 1 - kept["ci_low"] == pytest.approx(threshold)
