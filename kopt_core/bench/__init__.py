"""The measurement harness (docs/measurement.md): buffers, correctness, timing, worker processes.

``run_worker(request)`` is what backends' ``kopt_bench`` hooks call (a one-shot worker); the loop's steps
run many candidates, and paired comparisons, through one long-lived worker (``bench.executor``). The
worker loads the artifact through the backend's launcher (``kopt_core.bench.launchers``).
"""

from kopt_core.bench.executor import run_worker

__all__ = ["run_worker"]
