"""A search study in its own process, for test_study's kill -9 test (run as a script, not collected).

    python study_child.py KERNEL STORAGE_URL LOG HANG_AT [BATCH]

Runs the random sampler over KERNEL's space (BATCH: that many proposals asked at once, as an objective
that prefetches them does). The objective appends ``start <config id>`` to LOG (flushed
and fsynced, so the parent can read it at once) and returns a time; the HANG_AT-th evaluation sleeps
instead, so the parent can kill this process with SIGKILL in the middle of that trial.
"""

from __future__ import annotations

import os
import sys
import time

from kopt_core.records.search import TrialOutcome
from kopt_core.search.space import read_space
from kopt_core.search.study import run_study
from kopt_core.search.variants import config_id


def main(kernel: str, storage: str, log: str, hang_at: int, batch: int = 1) -> None:
    space = read_space(kernel)
    evaluations = 0

    def objective(config: dict) -> TrialOutcome:
        nonlocal evaluations
        evaluations += 1
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"start {config_id(config)}\n")
            handle.flush()
            os.fsync(handle.fileno())
        if evaluations == hang_at:
            time.sleep(300)  # killed here
        return TrialOutcome("ok", float(config["X"] * 10 + config["Y"]))

    if batch > 1:
        objective.batch_size = batch  # type: ignore[attr-defined]
        objective.prefetch = lambda configs: None  # type: ignore[attr-defined]
    run_study(space, objective, storage=storage, study_name="killed", sampler="random", progress=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), *(int(a) for a in sys.argv[5:6]))
