"""One worker of a study shared through a database, in its own process, for test_shared_study's heartbeat
test (run as a script, not collected).

    python shared_child.py KERNEL STORAGE_URL STUDY TRIALS first|join [HOSTNAME]

Runs the random sampler over KERNEL's space on the study STUDY (``join``: as one more worker of a study
that exists), with heartbeats every second, so that a worker killed with SIGKILL is failed by Optuna
after GRACE_BEATS seconds of silence. Each evaluation is real CPU work (about a second), no sleep. Prints
the study's count of evaluations and why it stopped, as JSON.
HOSTNAME: set this process's host name first; run inside ``unshare --uts`` (a namespace of its own),
that makes it a worker on another host as far as the other workers can tell (its pid cannot be checked
from there, only its heartbeat).
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys

from kopt_core.records.search import TrialOutcome
from kopt_core.search.space import read_space
from kopt_core.search.study import run_study

ROUNDS = 900_000  # sha256 over its own digest: about a second on one core


def work(seed: str) -> int:
    digest = seed.encode()
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return digest[0]


def main(kernel: str, storage: str, study: str, trials: int, mode: str, hostname: str = "") -> None:
    if hostname:
        socket.sethostname(hostname)
    space = read_space(kernel)

    def objective(config: dict) -> TrialOutcome:
        spread = work(repr(sorted(config.items()))) / 1000  # the work's result, so it cannot be skipped
        return TrialOutcome("ok", float(config["X"] * 10 + config["Y"]) + spread)

    result = run_study(
        space,
        objective,
        storage=storage,
        study_name=study,
        sampler="random",
        trials=trials,
        progress=False,
        join=mode == "join",
        heartbeat_s=1,
    )
    print(json.dumps({"evaluated": len(result.trials), "stop_reason": result.stop_reason}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], *sys.argv[6:7])
