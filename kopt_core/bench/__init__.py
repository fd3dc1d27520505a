"""The measurement harness (docs/measurement.md): buffers, correctness, timing, one worker per candidate.

``run_worker(request)`` is what backends' ``kopt_bench`` hooks call; the worker process loads the
artifact through the backend's launcher (``kopt_core.bench.launchers``).
"""

from kopt_core.bench.runner import run_worker

__all__ = ["run_worker"]
