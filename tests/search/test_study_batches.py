"""The search engine in batches (an objective that builds a batch of proposals at once, then evaluates
them one by one): every valid configuration still evaluated once, the trial budget kept exactly, a
configuration proposed twice in one batch evaluated once, and a kill in the middle of a batch losing
nothing. Synthetic objectives, no GPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from kopt_core.records.search import TrialOutcome
from kopt_core.search.space import read_space
from kopt_core.search.study import (
    STATUS,
    STUDY_ENCODING,
    STUDY_SPACE_ID,
    batch_size_of,
    run_study,
)
from kopt_core.search.variants import config_id

HERE = Path(__file__).parent
SGEMM = HERE / "data" / "sgemm_tiled.cu"
SMALL = """\
// kopt:space X = [1, 2, 3, 4]
// kopt:space Y = [1, 2, 3]
// kopt:constraint X + Y != 5
__global__ void k(float* out) { out[0] = X + Y; }
"""


class Batched:
    """An objective that takes ``size`` proposals at once: ``prefetch`` records each batch (as a build
    pool would build it), ``__call__`` records each evaluation and checks it was prefetched first."""

    def __init__(self, size: int, time_of=lambda c: float(sum(v for v in c.values() if isinstance(v, int)))):
        self.batch_size, self.time_of = size, time_of
        self.batches: list[list[str]] = []
        self.calls: list[str] = []
        self.prefetched: set[str] = set()

    def prefetch(self, configs) -> None:
        batch = [config_id(c) for c in configs]
        self.batches.append(batch)
        self.prefetched.update(batch)

    def __call__(self, config) -> TrialOutcome:
        identifier = config_id(config)
        assert identifier in self.prefetched, "evaluated before its batch was prefetched"
        self.calls.append(identifier)
        return TrialOutcome("ok", self.time_of(config))


def in_memory(space, objective, **options):
    """A fresh study in memory, no progress bar."""
    storage = optuna.storages.InMemoryStorage()
    return run_study(space, objective, storage=storage, study_name="b", progress=False, **options)


def small_space(tmp_path: Path):
    path = tmp_path / "kernel.cu"
    path.write_text(SMALL)
    return read_space(path)


def test_batch_size_comes_from_an_objective_that_can_prefetch():
    assert batch_size_of(Batched(4)) == 4
    assert batch_size_of(lambda config: None) == 1  # no prefetch: one at a time

    class NoPrefetch:
        batch_size = 4

    class Zero(Batched):
        pass

    assert batch_size_of(NoPrefetch()) == 1
    assert batch_size_of(Zero(0)) == 1
    assert batch_size_of(Zero(-2)) == 1
    assert type(batch_size_of(Zero(True))) is int  # a bool is no batch size


@pytest.mark.parametrize("sampler", ["grid", "tpe", "random"])
def test_batches_evaluate_every_valid_point_once(sampler):
    space = read_space(SGEMM)
    objective = Batched(4)
    result = in_memory(space, objective, sampler=sampler)
    valid = sorted(config_id(p) for p in space.valid_points())
    assert result.stop_reason == "space exhausted"
    assert sorted(objective.calls) == valid  # 33, each once
    assert all(1 <= len(batch) <= 4 for batch in objective.batches)
    assert all(len(set(batch)) == len(batch) for batch in objective.batches)  # a batch builds each once
    assert sorted(t.config_id for t in result.trials) == valid


def test_the_trial_budget_is_kept_exactly_whatever_the_batch_size(tmp_path):
    space = small_space(tmp_path)
    objective = Batched(4)
    result = in_memory(space, objective, sampler="grid", trials=6)
    assert result.stop_reason == "trial budget"
    assert len(objective.calls) == result.evaluated_now == 6
    assert [len(batch) for batch in objective.batches] == [4, 2]  # the second batch only what is left


def test_a_configuration_proposed_twice_in_one_batch_is_evaluated_once(tmp_path):
    space = small_space(tmp_path)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="twice", direction="minimize")
    study.set_user_attr(STUDY_SPACE_ID, space.space_id)
    study.set_user_attr(STUDY_ENCODING, "values")
    twice = {"X": 2, "Y": 2}
    study.enqueue_trial(twice)
    study.enqueue_trial(twice, skip_if_exists=False)
    objective = Batched(3)
    result = run_study(
        space, objective, storage=storage, study_name="twice", sampler="random", progress=False
    )
    assert objective.calls.count(config_id(twice)) == 1
    assert objective.batches[0][0] == config_id(twice) and objective.batches[0].count(config_id(twice)) == 1
    statuses = [
        t.user_attrs.get(STATUS) for t in optuna.load_study(study_name="twice", storage=storage).trials[:2]
    ]
    assert statuses == ["ok", "duplicate"]
    assert result.stop_reason == "space exhausted" and result.duplicates >= 1


def test_a_kill_in_the_middle_of_a_batch_loses_nothing_and_repeats_nothing(tmp_path):
    space = small_space(tmp_path)
    url = f"sqlite:///{tmp_path / 'search.db'}"
    log = tmp_path / "starts.log"
    # batches of 3; the 5th evaluation (the second of the second batch) hangs: one of that batch done,
    # two asked and RUNNING when the kill comes
    child = subprocess.Popen(
        [sys.executable, str(HERE / "study_child.py"), str(space.source), url, str(log), "5", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and len(log.read_text().splitlines()) == 5):
            assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
            assert time.monotonic() < deadline, "the child did not reach its fifth evaluation"
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    started = [line.split()[1] for line in log.read_text().splitlines()]
    completed, hung = started[:4], started[4]
    running = optuna.load_study(study_name="killed", storage=url).get_trials(
        states=(optuna.trial.TrialState.RUNNING,)
    )
    assert len(running) == 2  # the hung one and the last of its batch, never started

    objective = Batched(3)
    result = run_study(space, objective, storage=url, study_name="killed", sampler="random", progress=False)
    valid = sorted(config_id(p) for p in space.valid_points())
    assert result.stop_reason == "space exhausted"
    assert hung in objective.calls[:2]  # the requeued configurations go first
    assert sorted(completed + objective.calls) == valid  # 9 in all, none twice
    assert result.interrupted == 2
