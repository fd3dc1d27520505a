"""The pairing's check after its timed blocks (``PairedRun._recheck``), in-process on the CPU with the
example PyTorch backend: a kernel that is right before and during the blocks and goes wrong only after
them fails the pairing at stage recheck, on its side, and a kernel that stays right passes.

The kernel learns that the blocks are over from the worker's own result file, which the pairing rewrites
as each stage begins (``error_stage`` is "recheck" only once the blocks ended): so the kernel is exactly
as right as the honest one through every check and every timed launch before, and the recheck is the only
thing that can catch it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.bench.executor import PairedPlan, PairedRequest
from kopt_core.bench.worker import PairedRun
from kopt_core.records import BenchOptions
from kopt_core.steps.bench import prepare

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"
OPTIONS = BenchOptions(seeds=(0,), warmup_ms=1.0, budget_s=0.05, time_reference=False)
PLAN = PairedPlan(blocks=4, samples_per_block=2, seed=3)

HONEST = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""
# right until the worker's result file says the recheck has begun
LATE = """import json

import torch

RESULT = {result!r}


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
    try:
        with open(RESULT) as f:
            stage = json.load(f).get("error_stage")
    except (OSError, ValueError):
        stage = None
    if stage == "recheck":
        y.add_(1.0)
"""


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend)


def pairing(pm, tmp_path: Path, a_code: str, b_code: str):
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    result = tmp_path / "paired.json"
    requests = []
    for name, code in (("a", a_code), ("b", b_code)):
        (tmp_path / f"{name}.py").write_text(code.format(result=str(result)))
        prepared = prepare(
            pm,
            tmp_path / f"{name}.py",
            tmp_path / "ref.py",
            {"N": 1024},
            backend="pytorch",
            require_gpu=False,
        )
        requests.append(prepared.request(OPTIONS))
    return PairedRun(PairedRequest(a=requests[0], b=requests[1], plan=PLAN), str(result)).run()


def test_an_honest_pair_passes_its_recheck(pm, tmp_path):
    measurement = pairing(pm, tmp_path, HONEST, LATE.replace('"recheck"', '"never"'))
    assert measurement.status == "ok", measurement.error
    assert len(measurement.blocks) == PLAN.blocks


@pytest.mark.parametrize("side", ["a", "b"])
def test_a_kernel_that_goes_wrong_after_the_timed_blocks_fails_the_pairing_at_its_recheck(pm, tmp_path, side):
    codes = {"a": HONEST, "b": HONEST, side: LATE}
    measurement = pairing(pm, tmp_path, codes["a"], codes["b"])
    # every block was timed: the kernel was right until then
    assert len(measurement.blocks) == PLAN.blocks
    assert measurement.status == "failed"
    assert measurement.error_stage == "recheck"
    assert measurement.failed_side == side
    assert measurement.violation == "wrong_after_timing"
    assert measurement.error.startswith(f"side {side}: after the timed blocks, with fresh inputs")
