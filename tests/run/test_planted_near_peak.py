"""kopt optimize's near-peak stop (kopt_core.run.optimize) reads the latest profile of the best kernel,
the one ``kopt iter open`` just appended to roofline_history, not an earlier one (the baseline's first):
a planted bug (tests/planted/bugs.toml, optimize-near-peak-first-profile) read the first entry."""

from __future__ import annotations

import shutil

import pytest

import kopt_example_backend
from kopt_core.jsonio import write_json
from kopt_core.records import to_data
from kopt_core.records.state import Env, RooflineHistoryEntry
from kopt_core.run.init import init_run
from kopt_core.run.optimize import _near_peak

from ..properties.conftest import KERNELS, N, kernel


@pytest.mark.parametrize(
    ("history", "near"),
    [
        ((), False),
        ((False,), False),
        ((True,), True),
        ((False, True), True),  # the baseline was not near the peak; the best now is
        ((True, False), False),  # the best moved away from it (another kernel, other dims' model)
        ((False, False, True), True),
        ((True, True, False), False),
    ],
)
def test_the_near_peak_stop_reads_the_latest_profile(make_pm, tmp_path, history, near):
    pm = make_pm(kopt_example_backend)
    (tmp_path / "kernel.py").write_text(kernel(1.0))
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=True)))
    store = init_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims={"N": N},
        env_path=tmp_path / "env.json",
    )
    store.update(
        roofline_history=tuple(
            RooflineHistoryEntry(iteration=i, bound="memory", near_peak=peak)
            for i, peak in enumerate(history)
        )
    )
    assert _near_peak(store) is near
