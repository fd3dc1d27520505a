"""The search engine on synthetic objectives (pure Python, no GPU): it finds the optimum, is deterministic
for a seed, records failures, never evaluates a configuration twice, keeps to its budgets, and resumes a
study whose process was killed with SIGKILL in the middle of a trial."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest

from kopt_core.errors import ConfigError
from kopt_core.records.search import Space, TrialOutcome
from kopt_core.search.space import parse_cu_space, read_space
from kopt_core.search.study import (
    CONFIG,
    CONFIG_ID,
    DETAIL,
    DUPLICATE_OF,
    OWNER,
    PRIOR,
    REQUEUED_FROM,
    SEEDED,
    STATUS,
    load_study_result,
    run_study,
    write_results,
)
from kopt_core.search.variants import config_id

HERE = Path(__file__).parent
SGEMM = HERE / "data" / "sgemm_tiled.cu"
OPTIMUM = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 8, "THREAD_TILE": 4}
SMALL = """\
// kopt:space X = [1, 2, 3, 4]
// kopt:space Y = [1, 2, 3]
// kopt:constraint X + Y != 5
__global__ void k(float* out) { out[0] = X + Y; }
"""


def sgemm_time(config: dict) -> float:
    """A made-up time with one minimum, at OPTIMUM (1.0 ms)."""
    return (
        1.0
        + abs(math.log2(config["BLOCK_M"]) - 6)
        + 0.5 * abs(math.log2(config["BLOCK_N"]) - 6)
        + 0.1 * (config["BLOCK_K"] // 8 - 1)
        + (0.05 if config["THREAD_TILE"] == 8 else 0.0)
    )


def small_time(config: dict) -> float:
    return float(config["X"] * 10 + config["Y"])


class Recorder:
    """An objective that records every configuration it is asked to evaluate."""

    def __init__(self, time_of, fail=lambda config: None, sleep_s: float = 0.0):
        self.time_of, self.fail, self.sleep_s = time_of, fail, sleep_s
        self.calls: list[str] = []

    def __call__(self, config: dict) -> TrialOutcome:
        self.calls.append(config_id(config))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        reason = self.fail(config)
        if reason:
            return TrialOutcome("failed", detail=reason)
        return TrialOutcome("ok", self.time_of(config))


def memory() -> optuna.storages.InMemoryStorage:
    return optuna.storages.InMemoryStorage()


def small_space(tmp_path: Path) -> Space:
    path = tmp_path / "kernel.cu"
    path.write_text(SMALL)
    return read_space(path)


def ids(points) -> set[str]:
    return {config_id(p) for p in points}


def trials_by_status(storage, name: str, status: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=storage)
    return [t for t in study.get_trials() if t.user_attrs.get(STATUS) == status]


# --- finding the optimum -------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", ["grid", "tpe", "random"])
def test_every_sampler_evaluates_each_valid_point_once_and_stops_when_exhausted(sampler):
    space = read_space(SGEMM)
    objective = Recorder(sgemm_time)

    result = run_study(space, objective, storage=memory(), study_name="s", sampler=sampler, progress=False)

    assert result.stop_reason == "space exhausted"
    assert sorted(objective.calls) == sorted(ids(space.valid_points()))  # 33 configurations, each once
    assert len(result.trials) == result.evaluated_now == 33
    assert result.best(1)[0].config == OPTIMUM
    assert result.best(1)[0].value_ms == 1.0
    expected = sorted(sgemm_time(p) for p in space.valid_points())[:4]
    assert [t.value_ms for t in result.best(4)] == expected


def test_grid_never_proposes_an_invalid_point():
    result = run_study(
        read_space(SGEMM),
        Recorder(sgemm_time),
        storage=memory(),
        study_name="g",
        sampler="grid",
        progress=False,
    )

    assert (result.rejected, result.duplicates, result.interrupted) == (0, 0, 0)


def test_grid_order_is_a_seeded_permutation(tmp_path):
    space = read_space(SGEMM)
    orders = []
    for seed in (0, 0, 1):
        objective = Recorder(sgemm_time)
        run_study(
            space, objective, storage=memory(), study_name="g", sampler="grid", seed=seed, progress=False
        )
        orders.append(objective.calls)

    assert orders[0] == orders[1]
    assert orders[0] != orders[2]
    assert sorted(orders[0]) == sorted(orders[2])


def test_tpe_with_a_seed_is_deterministic():
    space = read_space(SGEMM)

    def run(seed: int) -> list[tuple[str, float | None]]:
        result = run_study(
            space,
            Recorder(sgemm_time),
            storage=memory(),
            study_name="t",
            trials=15,
            seed=seed,
            progress=False,
        )
        return [(t.config_id, t.value_ms) for t in result.trials]

    first, again, other = run(0), run(0), run(1)

    assert first == again
    assert first != other
    assert len(first) == len({i for i, _ in first}) == 15


# --- failures, constraints, duplicates -------------------------------------------------------------------


def too_many_registers(config: dict) -> str | None:
    if config["BLOCK_K"] == 32 and config["THREAD_TILE"] == 8:
        return "ptxas: too many registers (300)"
    return None


def test_failed_configurations_are_fail_trials_with_their_reason_and_never_a_value():
    space = read_space(SGEMM)
    storage = memory()
    failing = {config_id(p) for p in space.valid_points() if too_many_registers(p)}

    result = run_study(
        space,
        Recorder(sgemm_time, too_many_registers),
        storage=storage,
        study_name="f",
        sampler="grid",
        progress=False,
    )

    assert (
        len(failing) == 5
    )  # BLOCK_K 32 with THREAD_TILE 8 at (M, N) = (32, 128), (64, 64), (64, 128), (128, 32), (128, 64)
    assert {t.config_id for t in result.trials if t.status == "failed"} == failing
    assert result.failures == 5
    assert all(
        t.value_ms is None and t.detail == "ptxas: too many registers (300)"
        for t in result.trials
        if t.status == "failed"
    )
    assert not failing & {t.config_id for t in result.best(33)}
    failed = trials_by_status(storage, "f", "failed")
    assert {t.user_attrs[CONFIG_ID] for t in failed} == failing
    assert {t.state for t in failed} == {optuna.trial.TrialState.FAIL}
    assert {t.values for t in failed} == {None}
    assert {t.user_attrs[DETAIL] for t in failed} == {"ptxas: too many registers (300)"}


def test_constraint_violations_are_pruned_unbuilt_and_do_not_count_towards_the_budget():
    space = read_space(SGEMM)
    storage = memory()
    objective = Recorder(sgemm_time)

    result = run_study(
        space, objective, storage=storage, study_name="c", sampler="random", trials=10, progress=False
    )

    assert result.stop_reason == "trial budget"
    assert len(objective.calls) == len(result.trials) == 10
    assert all(space.is_valid(t.config) for t in result.trials)
    rejected = trials_by_status(storage, "c", "rejected")
    assert len(rejected) == result.rejected > 0
    assert {t.state for t in rejected} == {optuna.trial.TrialState.PRUNED}
    for trial in rejected:
        assert not space.is_valid(trial.user_attrs[CONFIG])
        assert trial.user_attrs[DETAIL] == space.rejection(trial.user_attrs[CONFIG])
        assert trial.user_attrs[DETAIL].startswith("violates constraint `")


def test_a_proposal_already_evaluated_reuses_its_result(tmp_path):
    space = small_space(tmp_path)
    storage = memory()
    objective = Recorder(small_time, fail=lambda c: "wrong result" if c == {"X": 1, "Y": 3} else None)

    result = run_study(space, objective, storage=storage, study_name="d", sampler="random", progress=False)

    assert Counter(objective.calls) == Counter(ids(space.valid_points()))  # each of the 9 exactly once
    assert result.duplicates > 0
    originals = {
        t.user_attrs[CONFIG_ID]: t
        for t in trials_by_status(storage, "d", "ok") + trials_by_status(storage, "d", "failed")
    }
    for duplicate in trials_by_status(storage, "d", "duplicate"):
        original = originals[duplicate.user_attrs[CONFIG_ID]]
        assert duplicate.user_attrs[DUPLICATE_OF] == original.number
        if original.state == optuna.trial.TrialState.COMPLETE:
            assert duplicate.state == optuna.trial.TrialState.COMPLETE
            assert duplicate.value == original.value
        else:
            assert duplicate.state == optuna.trial.TrialState.PRUNED


# --- budgets --------------------------------------------------------------------------------------------


def test_the_trial_budget_counts_the_whole_study_across_resumes(tmp_path):
    space = read_space(SGEMM)
    url = f"sqlite:///{tmp_path / 'search.db'}"
    objective = Recorder(sgemm_time)

    first = run_study(space, objective, storage=url, study_name="b", sampler="tpe", trials=4, progress=False)
    second = run_study(space, objective, storage=url, study_name="b", sampler="tpe", trials=6, progress=False)
    third = run_study(space, objective, storage=url, study_name="b", sampler="tpe", trials=6, progress=False)

    assert (first.evaluated_now, second.evaluated_now, third.evaluated_now) == (4, 2, 0)
    assert [r.stop_reason for r in (first, second, third)] == ["trial budget"] * 3
    assert len(objective.calls) == len(set(objective.calls)) == 6
    assert [t.config_id for t in third.trials] == objective.calls


def test_the_time_budget_stops_between_evaluations():
    objective = Recorder(sgemm_time, sleep_s=0.3)

    result = run_study(
        read_space(SGEMM), objective, storage=memory(), study_name="t", time_budget_s=0.5, progress=False
    )

    assert result.stop_reason == "time budget"
    assert result.evaluated_now == len(objective.calls) in (1, 2)
    assert result.elapsed_s >= 0.5
    assert 0 < result.trials_per_minute <= 60 * 2 / 0.5


# --- resume -------------------------------------------------------------------------------------------------


def test_resume_after_kill_9_reevaluates_the_interrupted_config_and_nothing_twice(tmp_path):
    space = small_space(tmp_path)
    url = f"sqlite:///{tmp_path / 'search.db'}"
    log = tmp_path / "starts.log"
    child = subprocess.Popen(
        [sys.executable, str(HERE / "study_child.py"), str(space.source), url, str(log), "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and len(log.read_text().splitlines()) == 3):
            assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
            assert time.monotonic() < deadline, "the child did not reach its third evaluation"
            time.sleep(0.05)
        time.sleep(0.2)  # the child is asleep inside its third evaluation
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    started = [line.split()[1] for line in log.read_text().splitlines()]
    completed_before, interrupted = started[:2], started[2]

    objective = Recorder(small_time)
    result = run_study(space, objective, storage=url, study_name="killed", sampler="random", progress=False)

    assert result.stop_reason == "space exhausted"
    assert objective.calls[0] == interrupted  # the requeued configuration goes first
    assert sorted(completed_before + objective.calls) == sorted(ids(space.valid_points()))  # 9, none twice
    assert sorted(t.config_id for t in result.trials) == sorted(ids(space.valid_points()))
    assert result.interrupted == 1
    (dead,) = trials_by_status(url, "killed", "interrupted")
    assert dead.state == optuna.trial.TrialState.FAIL
    assert dead.user_attrs[CONFIG_ID] == interrupted
    assert dead.user_attrs[DETAIL] == "interrupted: the process evaluating it stopped before it finished"
    (retried,) = [t for t in result.trials if t.config_id == interrupted]
    study = optuna.load_study(study_name="killed", storage=url)
    assert study.trials[retried.number].user_attrs[REQUEUED_FROM] == dead.number


def test_an_objective_that_raises_is_retried_on_resume(tmp_path):
    space = small_space(tmp_path)
    storage = memory()
    calls = []

    def broken(config: dict) -> TrialOutcome:
        calls.append(config_id(config))
        if len(calls) == 3:
            raise RuntimeError("boom")
        return TrialOutcome("ok", small_time(config))

    with pytest.raises(RuntimeError, match="boom"):
        run_study(space, broken, storage=storage, study_name="r", sampler="tpe", progress=False)
    objective = Recorder(small_time)
    result = run_study(
        space, objective, storage=storage, study_name="r", sampler="tpe", seed=1, progress=False
    )

    assert objective.calls[0] == calls[2]
    assert sorted(calls[:2] + objective.calls) == sorted(ids(space.valid_points()))
    (raised,) = trials_by_status(storage, "r", "interrupted")
    assert raised.user_attrs[DETAIL] == "interrupted: the objective raised RuntimeError: boom"
    assert raised.state == optuna.trial.TrialState.FAIL
    assert result.interrupted == 1
    (retried,) = [t for t in result.trials if t.config_id == calls[2]]
    study = optuna.load_study(study_name="r", storage=storage)
    assert study.trials[retried.number].user_attrs[REQUEUED_FROM] == raised.number


def dead_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


def test_running_trials_of_a_live_process_are_left_alone_and_those_of_a_dead_one_recovered(tmp_path):
    space = small_space(tmp_path)
    storage = memory()
    run_study(space, Recorder(small_time), storage=storage, study_name="o", trials=0, progress=False)
    study = optuna.load_study(study_name="o", storage=storage)
    distributions = {p.name: optuna.distributions.CategoricalDistribution(p.values) for p in space.parameters}
    elsewhere, dead = {"X": 1, "Y": 1}, {"X": 2, "Y": 2}
    for config, owner in [
        (elsewhere, "another-host/4242/1"),
        (dead, f"{socket.gethostname()}/{dead_pid()}/1"),
    ]:
        study.enqueue_trial(config)
        trial = study.ask(distributions)
        trial.set_user_attr(OWNER, owner)
        trial.set_user_attr(CONFIG_ID, config_id(config))
        trial.set_user_attr(CONFIG, config)
    objective = Recorder(small_time)

    result = run_study(space, objective, storage=storage, study_name="o", sampler="grid", progress=False)

    assert objective.calls[0] == config_id(dead)
    assert sorted(objective.calls) == sorted(ids(space.valid_points()) - {config_id(elsewhere)})
    states = [t.state for t in optuna.load_study(study_name="o", storage=storage).trials[:2]]
    assert states == [optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL]
    assert result.interrupted == 1


def test_a_study_of_another_space_is_refused(tmp_path):
    storage = memory()
    run_study(
        small_space(tmp_path), Recorder(small_time), storage=storage, study_name="x", trials=1, progress=False
    )
    changed = parse_cu_space(SMALL.replace("X = [1, 2, 3, 4]", "X = [1, 2, 3, 8]"), "kernel.cu")

    with pytest.raises(ConfigError, match="study 'x' holds a search over another space"):
        run_study(changed, Recorder(small_time), storage=storage, study_name="x", trials=2, progress=False)


def test_a_study_stored_as_indices_is_refused_by_a_value_sampler(tmp_path):
    storage = memory()
    run_study(
        small_space(tmp_path), Recorder(small_time), storage=storage, study_name="e", trials=0, progress=False
    )
    optuna.load_study(study_name="e", storage=storage).set_user_attr(
        "kopt_encoding", "indices"
    )  # as cmaes does

    with pytest.raises(
        ConfigError, match="study 'e' stores parameters as indices, and this sampler needs values"
    ):
        run_study(
            small_space(tmp_path), Recorder(small_time), storage=storage, study_name="e", progress=False
        )


def test_cmaes_samples_indices_and_still_evaluates_each_valid_point_once():
    pytest.importorskip("cmaes")
    space = read_space(SGEMM)
    storage = memory()
    objective = Recorder(sgemm_time)

    result = run_study(space, objective, storage=storage, study_name="c", sampler="cmaes", progress=False)

    assert result.stop_reason == "space exhausted"
    assert sorted(objective.calls) == sorted(ids(space.valid_points()))
    assert result.best(1)[0].config == OPTIMUM
    first = optuna.load_study(study_name="c", storage=storage).trials[0]
    assert {name: space.choices[name][index] for name, index in first.params.items()} == first.user_attrs[
        CONFIG
    ]


# --- arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"sampler": "annealing"}, r"unknown sampler 'annealing'"),
        ({"trials": -1}, r"the trial budget must be >= 0, not -1"),
        ({"time_budget_s": 0}, r"the time budget must be > 0 seconds, not 0"),
        ({"storage": "nosuchdb://x"}, r"cannot open the study storage 'nosuchdb://x'"),
        ({"storage": "sqlite:////nonexistent/folder/search.db"}, r"cannot open the study storage"),
    ],
)
def test_bad_arguments_are_config_errors(tmp_path, arguments, message):
    options = {"storage": memory(), "study_name": "a", "progress": False, **arguments}

    with pytest.raises(ConfigError, match=message) as caught:
        run_study(small_space(tmp_path), Recorder(small_time), **options)
    assert caught.value.exit_code == 4


def test_the_cmaes_sampler_without_its_package_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cmaes", None)  # import cmaes raises ImportError

    with pytest.raises(ConfigError, match="the cmaes sampler needs the `cmaes` package"):
        run_study(
            small_space(tmp_path), Recorder(small_time), storage=memory(), study_name="a", sampler="cmaes"
        )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("ok", None), "an ok outcome needs a finite time"),
        (("ok", math.nan), "an ok outcome needs a finite time"),
        (("ok", -1.0), "an ok outcome needs a finite time"),
        (("failed", 1.0), "a failed outcome has no value_ms"),
        (("skipped", None), "status must be 'ok' or 'failed'"),
    ],
)
def test_trial_outcomes_are_checked(arguments, message):
    with pytest.raises(ValueError, match=message):
        TrialOutcome(*arguments)


# --- display and results ------------------------------------------------------------------------------------


def test_the_progress_bar_shows_evaluations_best_time_and_failures(tmp_path, capsys):
    objective = Recorder(small_time, fail=lambda c: "wrong result" if c["X"] == 1 else None)

    run_study(small_space(tmp_path), objective, storage=memory(), study_name="p", sampler="grid", trials=9)

    captured = capsys.readouterr()
    assert captured.out == ""
    final = captured.err.strip().splitlines()[-1]
    assert "9/9" in final
    assert "best 21 ms" in final  # X=1 fails, so the best is X=2, Y=1
    assert "failed 3" in final  # X=1 with Y=1, 2 and 3


def test_no_progress_prints_nothing(tmp_path, capsys):
    run_study(small_space(tmp_path), Recorder(small_time), storage=memory(), study_name="q", progress=False)

    assert capsys.readouterr() == ("", "")


def test_results_are_written_as_csv_and_json(tmp_path):
    space = small_space(tmp_path)
    storage = memory()
    objective = Recorder(small_time, fail=lambda c: "wrong, result" if c == {"X": 3, "Y": 3} else None)
    result = run_study(space, objective, storage=storage, study_name="w", sampler="grid", progress=False)

    csv_path, json_path = write_results(result, tmp_path / "out")

    rows = list(csv.DictReader(csv_path.open()))
    assert [r["config_id"] for r in rows] == [t.config_id for t in result.trials]
    assert sorted((r["config"], r["status"], r["value_ms"], r["detail"]) for r in rows) == sorted(
        [
            (f"X={x}, Y={y}", "ok", repr(small_time({"X": x, "Y": y})), "")
            for x, y in [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 1), (4, 2), (4, 3)]
        ]
        + [("X=3, Y=3", "failed", "", "wrong, result")]
    )
    document = json.loads(json_path.read_text())
    assert document["schema_version"] == 1
    assert (document["evaluated"], document["failures"], document["stop_reason"]) == (9, 1, "space exhausted")
    assert document["best"] == [
        config_id(c)
        for c in ({"X": 1, "Y": 1}, {"X": 1, "Y": 2}, {"X": 1, "Y": 3}, {"X": 2, "Y": 1}, {"X": 2, "Y": 2})
    ]
    assert document["trials"][0] == {
        "number": result.trials[0].number,
        "config_id": result.trials[0].config_id,
        "config": result.trials[0].config,
        "status": result.trials[0].status,
        "value_ms": result.trials[0].value_ms,
        "detail": result.trials[0].detail,
        "seconds": result.trials[0].seconds,
        "seeded": "",
        "worker": "",
    }
    assert load_study_result(storage, "w").trials == result.trials


# --- seeds: a prior's configurations first ---------------------------------------------------------------

SEEDS = [{"X": 4, "Y": 3}, {"X": 3, "Y": 3}, {"X": 4, "Y": 2}]  # the slowest points of small_space


def seeded_numbers(storage, name: str) -> list[int]:
    study = optuna.load_study(study_name=name, storage=storage)
    return [t.number for t in study.get_trials() if t.user_attrs.get(SEEDED) == PRIOR]


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_a_fresh_study_evaluates_the_seeds_first_in_order_and_marks_them(tmp_path, sampler):
    space = small_space(tmp_path)
    objective = Recorder(small_time)

    result = run_study(
        space, objective, storage=memory(), study_name="s", sampler=sampler, first=SEEDS, progress=False
    )

    assert objective.calls[:3] == [config_id(seed) for seed in SEEDS]
    assert sorted(objective.calls) == sorted(ids(space.valid_points()))  # then the sampler: each once
    assert [t.seeded for t in result.trials] == [PRIOR] * 3 + [""] * 6
    assert result.seeded == 3
    assert result.best(1)[0].config == {"X": 1, "Y": 1}  # the seeds are only the first trials


def test_the_seeds_count_towards_the_trial_budget_and_are_capped_by_it(tmp_path):
    space = small_space(tmp_path)
    storage = memory()
    objective = Recorder(small_time)

    result = run_study(
        space, objective, storage=storage, study_name="b", trials=2, first=SEEDS, progress=False
    )

    assert objective.calls == [config_id(seed) for seed in SEEDS[:2]]
    assert result.stop_reason == "trial budget" and len(result.trials) == 2
    study = optuna.load_study(study_name="b", storage=storage)
    assert len(study.trials) == 2  # the third seed was never enqueued: nothing waits in the study


def test_a_resumed_study_is_not_seeded_again(tmp_path):
    space = read_space(SGEMM)
    url = f"sqlite:///{tmp_path / 'search.db'}"
    points = list(space.valid_points())
    seeds, others = points[-3:], points[:3]
    objective = Recorder(sgemm_time)

    first = run_study(space, objective, storage=url, study_name="r", trials=4, first=seeds, progress=False)
    again = run_study(space, objective, storage=url, study_name="r", trials=8, first=others, progress=False)

    assert objective.calls[:3] == [config_id(seed) for seed in seeds]
    assert (first.evaluated_now, again.evaluated_now) == (4, 4)
    assert len(objective.calls) == len(set(objective.calls)) == 8  # none lost, none twice
    assert seeded_numbers(url, "r") == [0, 1, 2]  # the second call's points were not enqueued
    assert {t.config_id for t in again.trials if t.seeded} == ids(seeds)


def test_seeds_left_by_an_interrupted_study_are_evaluated_on_resume_and_not_seeded_twice(tmp_path):
    space = small_space(tmp_path)
    storage = memory()
    calls: list[str] = []

    def interrupted(config: dict) -> TrialOutcome:
        calls.append(config_id(config))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(space, interrupted, storage=storage, study_name="i", first=SEEDS, progress=False)
    assert calls == [config_id(SEEDS[0])]
    objective = Recorder(small_time)

    result = run_study(
        space, objective, storage=storage, study_name="i", first=[{"X": 1, "Y": 1}], progress=False
    )

    # the two seeds still waiting, then the interrupted one, requeued and still a seed
    assert objective.calls[:3] == [config_id(SEEDS[1]), config_id(SEEDS[2]), config_id(SEEDS[0])]
    assert sorted(objective.calls) == sorted(ids(space.valid_points()))
    assert result.interrupted == 1
    assert {t.config_id for t in result.trials if t.seeded == PRIOR} == ids(SEEDS)
    study = optuna.load_study(study_name="i", storage=storage)
    (retried,) = [t for t in result.trials if t.config_id == config_id(SEEDS[0])]
    assert study.trials[retried.number].user_attrs[REQUEUED_FROM] == 0
    assert (retried.number, result.seeded) == (3, 3)


def test_a_seed_whose_process_died_is_requeued_as_a_seed(tmp_path):
    """kill -9 in the first seed's evaluation: its trial is RUNNING with a dead owner."""
    space = small_space(tmp_path)
    storage = memory()
    run_study(space, Recorder(small_time), storage=storage, study_name="k", trials=0, progress=False)
    study = optuna.load_study(study_name="k", storage=storage)
    for seed in SEEDS:  # as run_study's seeding leaves them
        study.enqueue_trial(seed, user_attrs={SEEDED: PRIOR})
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        p.name: optuna.distributions.CategoricalDistribution(p.values) for p in space.parameters
    }
    trial = study.ask(distributions)
    trial.set_user_attr(OWNER, f"{socket.gethostname()}/{dead_pid()}/1")
    trial.set_user_attr(CONFIG_ID, config_id(SEEDS[0]))
    trial.set_user_attr(CONFIG, SEEDS[0])
    objective = Recorder(small_time)

    result = run_study(
        space, objective, storage=storage, study_name="k", first=[{"X": 1, "Y": 1}], progress=False
    )

    assert objective.calls[:3] == [config_id(SEEDS[1]), config_id(SEEDS[2]), config_id(SEEDS[0])]
    assert sorted(objective.calls) == sorted(ids(space.valid_points()))
    assert {t.config_id for t in result.trials if t.seeded == PRIOR} == ids(SEEDS)


def test_seeds_are_checked_against_the_space_and_invalid_or_repeated_ones_skipped(tmp_path):
    space = small_space(tmp_path)  # constraint X + Y != 5
    storage = memory()
    objective = Recorder(small_time)

    result = run_study(
        space,
        objective,
        storage=storage,
        study_name="v",
        trials=3,
        first=[{"X": 2, "Y": 3}, {"Y": 2, "X": 2}, {"X": 2, "Y": 2}, {"X": 3, "Y": 3}],
        progress=False,
    )

    # X=2, Y=3 breaks the constraint and {"Y": 2, "X": 2} is X=2, Y=2 again: two seeds, both evaluated
    assert objective.calls[:2] == [config_id({"X": 2, "Y": 2}), config_id({"X": 3, "Y": 3})]
    assert result.seeded == 2 and len(result.trials) == 3
    assert seeded_numbers(storage, "v") == [0, 1]
    for bad, message in [({"X": 5, "Y": 1}, "X=5 is not one of its values"), ({"X": 1}, "missing")]:
        with pytest.raises(ConfigError, match=message):
            run_study(space, objective, storage=memory(), study_name="w", first=[bad], progress=False)


def test_trials_files_say_which_trials_were_seeded(tmp_path):
    space = small_space(tmp_path)
    result = run_study(
        space,
        Recorder(small_time),
        storage=memory(),
        study_name="f",
        trials=4,
        first=SEEDS[:2],
        progress=False,
    )

    csv_path, json_path = write_results(result, tmp_path / "out")

    document = json.loads(json_path.read_text())
    assert document["seeded"] == 2
    assert [t["seeded"] for t in document["trials"]] == ["prior", "prior", "", ""]
    rows = csv_path.read_text().splitlines()
    assert rows[0].endswith(",config,seeded,worker")
    assert [row.rsplit(",", 2)[1] for row in rows[1:]] == ["prior", "prior", "", ""]
