"""The process compute-sanitizer runs: ``python -m kopt_core.bench.sanitize_target REQUEST [OUTCOME]``.

It prepares the kernel exactly as the bench worker does (same launcher, buffers and inputs), launches it
once with the first seed, synchronizes and asks the launcher for launch errors, then checks it once
against the reference (the worker's own correctness check, on that one seed). Nothing is timed: under
compute-sanitizer kernels run 10-100x slower, and what is wanted is the tool's verdict on real launches.

After each stage it rewrites OUTCOME.json (a ``TargetOutcome``), so the caller knows how far it got and
never reads a clean summary from a process that checked nothing. A launcher that runs on the CPU stops
after preparing: compute-sanitizer has nothing to check there.

Exit codes: 0 ran (or nothing to check on this device), 1 something other than the kernel failed (the
reference, the device, kopt), 2 the kernel failed (crashed, or wrong); the stage and message go to
stderr, as with ``kopt_core.ncu.target``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import attrs

from kopt_core.bench.sanitize import TargetOutcome
from kopt_core.bench.worker import StageFailed, WorkerRun
from kopt_core.errors import ConfigError
from kopt_core.jsonio import read_json, write_json
from kopt_core.records import BenchRequest, from_data

USAGE = "usage: python -m kopt_core.bench.sanitize_target REQUEST.json [OUTCOME.json]"


class _Outcome:
    """OUTCOME.json, rewritten (atomically) at each stage; nothing when no path was given."""

    def __init__(self, path: str | None):
        self.path = path
        self.device = ""

    def __call__(self, stage: str, status: str = "running", message: str = "") -> None:
        if self.path is not None:
            record = TargetOutcome(stage=stage, status=status, device=self.device, message=message)
            write_json(self.path, attrs.asdict(record))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print(USAGE, file=sys.stderr)
        return 1
    request = from_data(read_json(argv[0]), BenchRequest)
    # One seed, not the options' three: each launch here costs 10-100x its normal time.
    seed = request.options.seeds[0]
    outcome = _Outcome(argv[1] if len(argv) == 2 else None)
    with tempfile.TemporaryDirectory(prefix="kopt-sanitize-target-") as scratch:
        run = WorkerRun(request, str(Path(scratch) / "prepared.json"))
        try:
            run.prepare()
            outcome.device = run.device
            if run.device != "cuda":
                outcome("prepared", "done", f"the launcher runs on {run.device}: nothing to sanitize")
                return 0
            outcome("prepared")
            # The worker's own check on the one seed: one launch, a synchronize and the launcher's error
            # check (a crash shows as the "launch" stage, named), then the comparison with the reference
            # (retried on zeroed outputs for kernels that accumulate into them). Each launch of the kernel
            # costs 10-100x its time here, so it is launched once, not once more before the check.
            run.check(seed, stage="launch")
            outcome("checked", "done")
        except StageFailed as failure:
            outcome(failure.stage, failure.status, failure.message)
            print(f"kopt sanitize target: {failure.stage}: {failure.message}", file=sys.stderr)
            return 2 if failure.status == "failed" else 1
        except ConfigError as exc:
            outcome("reference", "error", str(exc))
            print(f"kopt sanitize target: reference: {exc}", file=sys.stderr)
            return 1
        except SystemExit as exc:  # exit() from the kernel or the reference is a failure, never a pass
            message = f"the kernel or the reference called exit({exc.code!r})"
            outcome("worker", "failed", message)
            print(f"kopt sanitize target: {message}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
