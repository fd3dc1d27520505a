"""The executor on the CPU, with the example PyTorch backend: many candidates through one long-lived bench
worker; a failed, hung or crashing candidate costs that candidate and a worker, never the executor; and
paired A/B timing of two kernels on the same buffers in interleaved blocks."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.bench.executor import PairedPlan, SharedExecutor, WorkerExecutor
from kopt_core.bench.paired import block_order
from kopt_core.records import BenchOptions, BenchRequest
from kopt_core.steps.bench import prepare

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"
DIMS = {"N": 4096}
FAST = BenchOptions(
    seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=60, time_reference=False
)
PLAN = PairedPlan(blocks=6, seed=11, samples_per_block=3)


@pytest.fixture
def request_for(make_pm, tmp_path):
    """A BenchRequest for an example kernel (by file name) or for a kernel written from source."""
    pm = make_pm(kopt_example_backend)

    def make(kernel: str, source: str | None = None, options: BenchOptions = FAST) -> BenchRequest:
        path = KERNELS / kernel
        if source is not None:
            path = tmp_path / kernel
            path.write_text(textwrap.dedent(source))
        prepared = prepare(pm, path, KERNELS / "saxpy_ref.py", DIMS)
        return BenchRequest(
            artifact=prepared.artifact, reference=prepared.reference_path, dims=DIMS, options=options
        )

    return make


def test_one_worker_runs_the_ok_candidates_and_is_replaced_after_a_failed_one(request_for):
    correct, wrong = request_for("saxpy.py"), request_for("saxpy_wrong.py")
    with WorkerExecutor() as executor:
        assert executor.pid is None  # started at the first command, not before
        first = executor.bench(correct)
        worker = executor.pid
        second = executor.bench(correct)
        assert executor.pid == worker  # the same process ran both
        failed = executor.bench(wrong)
        assert executor.pid is None  # replaced: the next command starts a fresh worker
        third = executor.bench(correct)
        assert executor.pid is not None and executor.pid != worker
        assert executor.workers_started == 2
    assert [r.status for r in (first, second, failed, third)] == ["ok", "ok", "failed", "ok"]
    assert failed.error_stage == "correctness" and not failed.correctness_pass
    assert third.correctness_pass and third.timing_valid and third.kernel_timing is not None


def test_a_hung_candidate_times_out_and_the_next_runs_in_a_fresh_worker(request_for):
    noisy = request_for(
        "noisy.py",
        """\
        import sys

        import torch

        print("said by an earlier candidate", file=sys.stderr)

        def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
            y.add_(x, alpha=2.0)
        """,
    )
    hung = request_for(
        "hang.py",
        """\
        import sys
        import time

        def solve(x, y, N: int):
            print("about to hang", file=sys.stderr, flush=True)
            time.sleep(3600)
        """,
        options=BenchOptions(seeds=(0,), warmup_ms=5, budget_s=0.2, timeout_s=4, time_reference=False),
    )
    with WorkerExecutor() as executor:
        assert executor.bench(noisy).status == "ok"  # a warm worker: the 4 s are the kernel's alone
        worker = executor.pid
        result = executor.bench(hung)
        after = executor.bench(request_for("saxpy.py"))
        assert executor.pid != worker and executor.workers_started == 2
    assert result.status == "failed" and result.error_stage == "timeout"
    assert "4 s timeout" in result.error and "during stage correctness" in result.error
    # the stderr tail is this candidate's own
    assert "about to hang" in result.error and "earlier candidate" not in result.error
    assert result.buffers  # what the worker had established before the hang is kept
    assert after.status == "ok", after.error


def test_a_candidate_that_ends_the_worker_fails_alone(request_for):
    crash = request_for("crash.py", "import os\n\ndef solve(x, y, N: int):\n    os._exit(9)\n")
    with WorkerExecutor() as executor:
        result = executor.bench(crash)
        after = executor.bench(request_for("saxpy.py"))
    assert result.status == "failed" and result.error_stage == "worker"
    assert "exit code 9" in result.error and "stage correctness" in result.error
    assert after.status == "ok", after.error


def test_a_worker_that_died_while_idle_is_not_charged_to_the_next_candidate(request_for):
    correct = request_for("saxpy.py")
    with WorkerExecutor() as executor:
        assert executor.bench(correct).status == "ok"
        worker = executor.pid
        assert worker is not None
        os.kill(worker, signal.SIGKILL)
        after = executor.bench(correct)
        assert executor.pid not in (None, worker)
    assert after.status == "ok", after.error


def test_a_worker_broken_by_an_earlier_candidate_is_not_charged_to_the_next(request_for):
    # A correct kernel whose module, once imported, makes the worker die at its next command before that
    # command writes anything: the patch itself fails the kernel (its code replaced kopt's), the worker
    # it leaves is not trusted again, and the next candidate runs in a fresh worker.
    saboteur = request_for(
        "saboteur.py",
        """\
        import os

        import torch

        import kopt_core.bench.worker

        kopt_core.bench.worker._run_command = lambda command: os._exit(5)

        def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
            y.add_(x, alpha=2.0)
        """,
    )
    with WorkerExecutor() as executor:
        caught = executor.bench(saboteur)
        assert (caught.status, caught.violation) == ("failed", "patched_code"), caught.error
        assert "kopt_core.bench.worker._run_command" in caught.error
        after = executor.bench(request_for("saxpy.py"))
        assert executor.workers_started == 2
    assert after.status == "ok", after.error


def test_close_ends_the_worker_and_removes_its_files(request_for):
    executor = WorkerExecutor()
    assert executor.bench(request_for("saxpy.py")).status == "ok"
    worker, scratch = executor.pid, executor._scratch
    assert worker is not None and scratch is not None and scratch.name.startswith("kopt-bench-")
    executor.close()
    executor.close()  # twice is fine
    assert not scratch.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


def test_the_steps_of_one_process_share_one_worker_until_the_environment_changes(request_for, monkeypatch):
    shared = SharedExecutor()
    try:
        with shared() as step:  # explore, say
            assert step.bench(request_for("saxpy.py")).status == "ok"
            worker = step.pid
        assert worker is not None
        os.kill(worker, 0)  # the step closed its borrow: the worker lives on for the next step
        with shared() as step:  # ablate, say
            assert step.bench(request_for("saxpy.py")).status == "ok"
            assert step.pid == worker and step.workers_started == 1
        # a worker cannot see an environment changed after it started: the next borrow starts anew
        monkeypatch.setenv("KOPT_TEST_SHARED_EXECUTOR", "1")
        with shared() as step:
            assert step.pid is None
            assert step.bench(request_for("saxpy.py")).status == "ok"
            fresh = step.pid
        assert fresh is not None and fresh != worker
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)
        # a failed candidate still costs its worker, shared or not; its successor starts when the borrow
        # ends, so that it comes up while the process does something else
        with shared() as step:
            assert step.bench(request_for("saxpy_wrong.py")).status == "failed"
            assert step.pid is None
        with shared() as step:
            successor = step.pid
            assert successor is not None and successor != fresh
            assert step.workers_started == 2
        # a step that fails on its way out (an interrupt, kopt's own error) starts no successor
        with pytest.raises(KeyboardInterrupt), shared() as step:
            step.paired(request_for("saxpy_wrong.py"), request_for("saxpy_wrong.py"), PLAN)
            assert step.pid is None
            raise KeyboardInterrupt
        assert shared._executor.pid is None
        with shared() as step:
            step.start()
        # it is still importing torch (over a second): one that never got a command is killed, not awaited
        began = time.perf_counter()
        shared.close()
        assert time.perf_counter() - began < 0.5
    finally:
        shared.close()
    for pid in (fresh, successor):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# ------------------------------------------------------------------------------------------ paired


def logging_saxpy(log: Path, side: str) -> str:
    """A correct saxpy that appends, per call, its side and the addresses of the tensors it was given."""
    return textwrap.dedent(
        f"""\
        import torch

        def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
            with open({str(log)!r}, "a") as log:
                log.write("{side} %d %d\\n" % (x.data_ptr(), y.data_ptr()))
            y.add_(x, alpha=2.0)
        """
    )


def test_an_a_a_pairing_gives_balanced_blocks_in_the_seeded_order(request_for):
    saxpy = request_for("saxpy.py")
    with WorkerExecutor() as executor:
        measurement = executor.paired(saxpy, saxpy, PLAN)
    assert measurement.status == "ok", measurement.error
    assert measurement.error is None and measurement.failed_side is None
    assert measurement.a == measurement.b == saxpy.artifact.source and measurement.seed == 11
    orders = tuple(block.order for block in measurement.blocks)
    assert orders == block_order(6, 11) and orders.count("AB") == orders.count("BA") == 3
    assert [block.index for block in measurement.blocks] == list(range(6))
    for block in measurement.blocks:
        assert len(block.a_samples) == len(block.b_samples) == 3
        assert block.a_ms > 0 and block.b_ms > 0 and not block.voided and block.telemetry == ()
    assert measurement.mode == "per_launch"  # no GPU: one launch per sample, for both sides
    assert not measurement.telemetry_available and "cpu" in measurement.telemetry_note
    assert measurement.worker_seconds > 0


def test_both_sides_of_a_pairing_run_on_the_same_buffers(request_for, tmp_path):
    log = tmp_path / "calls.log"
    a = request_for("a.py", logging_saxpy(log, "a"))
    b = request_for("b.py", logging_saxpy(log, "b"))
    with WorkerExecutor() as executor:
        measurement = executor.paired(a, b, PLAN)
        calls = [line.split() for line in log.read_text().splitlines()]
        worker = executor.pid
        assert executor.bench(a).status == "ok"  # an ok pairing keeps the worker for the next command
        assert executor.pid == worker
    assert measurement.status == "ok", measurement.error
    seen = {side: {tuple(call[1:]) for call in calls if call[0] == side} for side in "ab"}
    assert seen["a"] == seen["b"] and len(seen["a"]) == 1  # one x and one y, the same for both sides
    per_side = {side: sum(1 for call in calls if call[0] == side) for side in "ab"}
    # each side: its correctness check, its warm-up, 6 blocks of 3 samples, its re-check
    assert min(per_side.values()) >= 6 * 3 + 2


def test_a_wrong_challenger_fails_its_side_of_the_pairing(request_for):
    with WorkerExecutor() as executor:
        measurement = executor.paired(request_for("saxpy.py"), request_for("saxpy_wrong.py"), PLAN)
        assert executor.pid is None  # not ok: the worker is replaced
    assert measurement.status == "failed" and measurement.failed_side == "b"
    assert measurement.error_stage == "correctness" and measurement.error.startswith("side b: seed 2000003")
    assert measurement.blocks == ()  # a side that fails its check is never timed


def test_a_pairing_whose_worker_dies_keeps_the_blocks_it_had_timed(request_for):
    # Side b ends the process at its 7th timed sample: in the third block (3 samples each),
    # after two complete blocks were written.
    dying = request_for(
        "dying.py",
        """\
        import os
        import sys

        import torch

        calls = [0]

        def solve(x, y, N: int):
            frame, timed = sys._getframe(1), False
            while frame is not None:
                timed = timed or frame.f_code.co_name == "take"  # a timed sample
                frame = frame.f_back
            if timed:
                calls[0] += 1
                if calls[0] == 7:
                    os._exit(3)
            y.add_(x, alpha=2.0)
        """,
    )
    with WorkerExecutor() as executor:
        measurement = executor.paired(request_for("saxpy.py"), dying, PLAN)
    assert measurement.status == "failed" and measurement.error_stage == "worker"
    assert "exit code 3" in measurement.error and "during stage blocks" in measurement.error
    # the side whose samples were being taken when the worker died is named
    assert len(measurement.blocks) == 2 and measurement.failed_side == "b"
    assert measurement.violation == "exited"


def test_a_pairing_needs_one_reference_and_one_set_of_dims(request_for):
    saxpy = request_for("saxpy.py")
    other = BenchRequest(artifact=saxpy.artifact, reference=saxpy.reference, dims={"N": 8192}, options=FAST)
    with WorkerExecutor() as executor, pytest.raises(ValueError, match="share their reference and dims"):
        executor.paired(saxpy, other, PLAN)


def test_a_paired_plan_needs_two_blocks_of_at_least_one_sample():
    with pytest.raises(ValueError):
        PairedPlan(blocks=1)
    with pytest.raises(ValueError):
        PairedPlan(samples_per_block=0)
