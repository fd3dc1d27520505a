"""The process Nsight Compute profiles: ``python -m kopt_core.ncu.target REQUEST.json``.

It prepares the kernel exactly as the bench worker does (same launcher, buffers and inputs), launches it
once outside the profiler range so that compilation, autotuning and lazy module loading stay out of the
report, then launches it once more between cudaProfilerStart and cudaProfilerStop: with
``--profile-from-start off`` ncu profiles that one invocation, every kernel in it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from kopt_core.bench.worker import StageFailed, WorkerRun
from kopt_core.jsonio import read_json
from kopt_core.records import BenchRequest, from_data


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    request = from_data(read_json(argv[0]), BenchRequest)
    with tempfile.TemporaryDirectory(prefix="kopt-ncu-target-") as scratch:
        run = WorkerRun(request, str(Path(scratch) / "prepared.json"))
        try:
            run.prepare()
            launch = run.kernel_call(request.options.seeds[0])
            launch()  # warm: JIT, autotune, module loading happen here, outside the range
            run.kernel_clock.sync()
            launch = run.kernel_call(request.options.seeds[0])
            run.kernel_clock.sync()
            torch.cuda.profiler.start()
            launch()
            run.kernel_clock.sync()
            torch.cuda.profiler.stop()
            run.launcher.check()
        except StageFailed as failure:
            print(f"kopt ncu target: {failure.stage}: {failure.message}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
