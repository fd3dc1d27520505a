"""The measurement harness end to end on the CPU, through a real backend (the example PyTorch plugin):
worker processes, seeds, poisoned outputs, the inputs-unchanged check, the re-check after timing,
timeouts and crashes. The same code paths run for CUDA kernels on a GPU (tests/gpu)."""

from __future__ import annotations

import textwrap
import time

import pytest

import kopt_example_backend
from kopt_core.errors import ConfigError
from kopt_core.records import BenchOptions
from kopt_core.steps.bench import bench_kernel, exit_code

FAST = BenchOptions(seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=60)

REF = """
atol = 1e-6
rtol = 1e-6

def buffers(N):
    return {"x": {"shape": (N,), "dtype": "float32", "role": "input"},
            "y": {"shape": (N,), "dtype": "float32", "role": "output"}}

def reference(x, y, N):
    y.copy_(2.5 * x)
"""


@pytest.fixture
def bench(make_pm, tmp_path):
    pm = make_pm(kopt_example_backend)

    def run(kernel_body: str, ref: str = REF, options: BenchOptions = FAST, **dims):
        kernel = tmp_path / "kernel.py"
        kernel.write_text("import torch\n\n" + textwrap.dedent(kernel_body))
        reference = tmp_path / "ref.py"
        reference.write_text(textwrap.dedent(ref))
        return bench_kernel(pm, kernel, reference, dims or {"N": 4096}, options=options)

    return run


def test_a_correct_kernel_passes_and_is_timed(bench):
    result = bench("def solve(x, y, N: int):\n    torch.mul(x, 2.5, out=y)\n")
    assert exit_code(result) == 0, result.error
    assert result.status == "ok" and result.correctness_pass and result.timing_valid
    phases = [(c.seed, c.phase, c.passed) for c in result.correctness]
    assert phases == [
        (0, "before_timing", True),
        (1, "before_timing", True),
        (1, "before_timing", True),  # seed 1 again, its outputs holding finite decoys: the repeat check
        (1_000_003, "after_timing", True),
    ]
    assert [c.output_init for c in result.correctness] == ["poisoned", "poisoned", "decoy", "poisoned"]
    defences = result.defences
    assert defences.launches >= result.kernel_timing.n and defences.audits >= 1 and result.violation is None
    assert defences.repeat_median_ms > 0 and defences.cost_s > 0
    timing = result.kernel_timing
    assert timing.clock == "host" and timing.n >= 5 and len(timing.samples_ms) == timing.n
    assert timing.min_ms <= timing.median_ms <= timing.p95_ms <= timing.max_ms
    assert result.reference_timing is not None and result.speedup_vs_reference > 0
    assert [b.name for b in result.buffers] == ["x", "y"] and result.buffers[
        1
    ].sized_by == "reference buffers()"
    assert result.workload is None  # this reference has no workload_model


def test_workload_rates_follow_from_the_median(bench):
    ref = REF + "\ndef workload_model(N):\n    return {'flops': N, 'bytes_min': 8 * N}\n"
    result = bench("def solve(x, y, N: int):\n    torch.mul(x, 2.5, out=y)\n", ref=ref)
    seconds = result.kernel_timing.median_ms / 1e3
    assert result.workload.flops == 4096 and result.workload.bytes_min == 8 * 4096
    assert result.workload.tflops == pytest.approx(4096 / seconds / 1e12)
    assert result.workload.tbytes_per_s == pytest.approx(8 * 4096 / seconds / 1e12)


def test_a_wrong_kernel_fails_with_the_worst_mismatch(bench):
    result = bench("def solve(x, y, N: int):\n    torch.mul(x, 2.4, out=y)\n")
    assert exit_code(result) == 2 and not result.correctness_pass
    check = result.correctness[0]
    assert not check.passed and check.buffers[0].mismatches > 0
    worst = check.buffers[0].worst
    assert worst.buffer == "y" and worst.got == pytest.approx(worst.expected * 2.4 / 2.5, rel=1e-5)
    assert result.kernel_timing is None  # an incorrect kernel is never timed


def test_unwritten_outputs_fail_because_they_are_poisoned(bench):
    result = bench("def solve(x, y, N: int):\n    torch.mul(x[:-7], 2.5, out=y[:-7])\n")
    assert exit_code(result) == 2
    first = result.correctness[0]
    assert first.output_init == "poisoned" and first.buffers[0].nan_count == 7
    assert first.buffers[0].mismatches == 7
    # zeroed outputs do not rescue it: the expected values there are not zero
    assert result.correctness[1].output_init == "zeroed" and not result.correctness[1].passed


def test_a_kernel_that_writes_its_input_fails(bench):
    result = bench("def solve(x, y, N: int):\n    torch.mul(x, 2.5, out=y)\n    x[:3] = 0\n")
    assert exit_code(result) == 2
    check = result.correctness[0]
    assert check.buffers[0].passed and not check.inputs_unchanged and "wrote into input" in check.message


def test_a_kernel_that_computes_only_on_its_first_call_fails(bench):
    body = """
    calls = 0

    def solve(x, y, N: int):
        global calls
        calls += 1
        if calls == 1:
            torch.mul(x, 2.5, out=y)
    """
    result = bench(body)
    assert exit_code(result) == 2
    assert result.correctness[0].passed and not result.correctness[1].passed


def test_a_kernel_that_caches_by_pointer_fails_an_audit_of_its_timed_launches(bench):
    # Correct on every seed, but after warm-up it replays the last result it saw for these buffers: every
    # timed launch has fresh inputs, and the first audited one shows it.
    body = """
    seen = {}

    def solve(x, y, N: int):
        key = x.data_ptr()
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 5:
            return
        torch.mul(x, 2.5, out=y)
    """
    result = bench(body)
    assert exit_code(result) == 2
    assert (result.error_stage, result.violation) == ("timing", "audit_failed"), result.error
    assert "picked at random after it ran" in result.error and not result.correctness_pass


def test_a_kernel_relying_on_zeroed_outputs_passes_and_is_flagged(bench):
    ref = """
    atol = 1e-3
    rtol = 1e-5

    def buffers(N):  # dtypes only: sizes follow the default sizing rule
        return {"input": {"dtype": "float32", "role": "input"}, "output": {"dtype": "float32"}}

    def reference(input, output, N):
        output.zero_()
        output[0] = input[:N].sum()
    """
    # The plain contract: buffers sized by the default rule (here N), only output[0] written.
    result = bench("def solve(input, output, N: int):\n    output[0] = input.sum()\n", ref=ref, N=1000)
    assert exit_code(result) == 0, result.error
    assert result.outputs_must_start_zeroed
    assert result.buffers[0].sized_by == "the one integer dim" and result.buffers[0].realised_shape == (1000,)
    assert [c.output_init for c in result.correctness] == ["poisoned", "zeroed", "zeroed", "zeroed"]


def test_a_kernel_that_raises_fails_that_candidate(bench):
    result = bench(
        "def solve(x, y, N: int):\n    raise RuntimeError('CUDA error: an illegal memory access')\n"
    )
    assert exit_code(result) == 2 and result.status == "failed"
    assert "illegal memory access" in result.error


def test_an_endless_kernel_is_killed_at_the_timeout(bench):
    options = BenchOptions(seeds=(0,), warmup_ms=5, budget_s=0.2, timeout_s=8)
    start = time.monotonic()
    result = bench("def solve(x, y, N: int):\n    while True:\n        pass\n", options=options)
    assert time.monotonic() - start < 30
    assert exit_code(result) == 2 and result.error_stage == "timeout" and "8 s timeout" in result.error
    assert result.buffers  # what the worker had established before the hang is kept


def test_a_crashing_worker_fails_that_candidate_only(bench):
    result = bench("import os\n\ndef solve(x, y, N: int):\n    os._exit(9)\n")
    assert exit_code(result) == 2 and result.error_stage == "worker" and "exit code 9" in result.error


def test_a_reference_that_raises_is_a_configuration_error(bench):
    ref = REF.replace("y.copy_(2.5 * x)", "raise ValueError('shape mismatch in my reference')")
    result = bench("def solve(x, y, N: int):\n    torch.mul(x, 2.5, out=y)\n", ref=ref)
    assert exit_code(result) == 4 and result.error_stage == "reference"
    assert "shape mismatch in my reference" in result.error


def test_a_reference_whose_arguments_do_not_match_is_refused_before_any_run(bench):
    ref = REF.replace("def reference(x, y, N):", "def reference(a, b, N):").replace(
        "y.copy_(2.5 * x)", "pass"
    )
    with pytest.raises(ConfigError, match=r"reference\(a, b, N\) cannot take the kernel's arguments"):
        bench("def solve(x, y, N: int):\n    torch.mul(x, 2.5, out=y)\n", ref=ref)
