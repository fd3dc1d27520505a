"""One study shared by two search workers through a real PostgreSQL server (the ``postgres_url`` fixture:
a fresh database for each test), as two users on two hosts run them: the first ``kopt search`` plain,
the second with ``--join`` once the study exists. A worker killed with SIGKILL in the middle of a trial
loses nothing: the other one finishes the budget, and every configuration of the study is evaluated
once, the interrupted one included. A worker on another host (a UTS namespace with a host name of its
own, so its pid cannot be checked) is noticed through its silent heartbeat alone. The exit-4 errors:
joining a study that does not exist, --join without --storage, a URL where nothing listens. And the race
itself, in one process on SQLite: two workers whose views of the study are equally stale proposing one
configuration (or the budget's last evaluation) at once evaluate one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

import kopt_example_backend
from kopt_core.search.space import parse_cu_space
from kopt_core.search.study import (
    CONFIG,
    CONFIG_ID,
    DUPLICATE_OF,
    OWNER,
    REQUEUED_FROM,
    STATUS,
    _open_storage,
    _Session,
    load_study_result,
)
from kopt_core.steps.search import search_space, study_name_for

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parents[1] / "examples" / "kopt_example_backend" / "kernels"
CHILD = HERE / "shared_child.py"
N = 1 << 16
TRIALS = 10  # of the 12 configurations below: the budget, not the space, ends the search
# `kopt` with the search command registered, whether or not kopt_core/cli/__init__.py imports it yet
KOPT = ("-c", "import kopt_core.cli.search; from kopt_core.cli import main; main()")
# one thread each: two workers on a machine of two cores, as they would be on two hosts
ENV = dict(os.environ, KOPT_PLUGINS="pytorch", COLUMNS="200", OMP_NUM_THREADS="1")
OTHER_HOST = "kopt-other-host"

WORK = '''"""y += 2 x, computed ROUNDS times over in chunks of CHUNK elements: the fewer calls, the faster."""

import torch

kopt_space = {"CHUNK": [1024, 4096, 16384, 65536], "ROUNDS": [1, 2, 3]}
CHUNK = 1024
ROUNDS = 1


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    twice = torch.empty_like(x)
    for _ in range(ROUNDS):
        for start in range(0, N, CHUNK):
            torch.mul(x[start : start + CHUNK], 2.0, out=twice[start : start + CHUNK])
    y.add_(twice)
'''
SPACE = 'kopt_space = {"X": [0, 1, 2, 3], "Y": [0, 1, 2, 3]}\nX = 0\nY = 0\n'


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "space.py").write_text(SPACE)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    return tmp_path


def run_kopt(*args: object, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``kopt ARGS --json`` as a user types it: the process and its envelope; never a traceback."""
    proc = subprocess.run(
        [sys.executable, *KOPT, *map(str, args), "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    document = json.loads(proc.stdout)
    assert document["exit_code"] == proc.returncode, proc.stderr
    return proc, document


def start(command: list[str], cwd: Path, log: str) -> subprocess.Popen:
    """A worker in a session of its own (a kill of its group takes its bench worker too, as a crash of
    the host would), its stdout and stderr in ``log``.out and ``log``.err."""
    with open(cwd / f"{log}.out", "w") as out, open(cwd / f"{log}.err", "w") as err:
        return subprocess.Popen(command, cwd=cwd, env=ENV, stdout=out, stderr=err, start_new_session=True)


def kopt_worker(work: Path, url: str, out: str, *extra: str) -> subprocess.Popen:
    args = ["search", "work.py", "--ref", "ref.py", f"--N={N}", "--trials", str(TRIALS)]
    return start([sys.executable, *KOPT, *args, "--storage", url, "--out", out, "--json", *extra], work, out)


def connect_args(url: str) -> dict:
    from sqlalchemy.engine import make_url

    return make_url(url).translate_connect_args(username="user", database="dbname")


def study_exists(url: str, name: str) -> bool:
    """Whether the study is in the database yet, asked with psycopg2 (an Optuna storage opened here
    would create Optuna's tables, racing the worker that is creating them)."""
    import psycopg2

    connection = psycopg2.connect(**connect_args(url))
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM studies WHERE study_name = %s", (name,))
            return cursor.fetchone() is not None
    except psycopg2.errors.UndefinedTable:
        return False
    finally:
        connection.close()


def open_study(url: str, name: str) -> optuna.Study:
    # psycopg2 named: SQLAlchemy 2.1's driver for a bare postgresql:// URL is psycopg (3)
    storage = optuna.storages.RDBStorage(url.replace("postgresql://", "postgresql+psycopg2://", 1))
    return optuna.load_study(study_name=name, storage=storage)


def wait_until(ready: Callable[[], object], what: str, workers: list[subprocess.Popen], timeout: float = 120):
    """``ready()``'s first true value, polled; fails when a worker ends first or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        for worker in workers:
            assert worker.poll() is None, f"a worker ended (exit {worker.returncode}) before {what}"
        time.sleep(0.05)
    pytest.fail(f"no {what} within {timeout} s")


def stop(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)


def host_pid(trial: FrozenTrial) -> tuple[str, int]:
    host, pid, _ = str(trial.user_attrs.get(OWNER, "//")).split("/", 2)
    return host, int(pid or 0)


def in_flight(study: optuna.Study, owned: Callable[[str, int], bool]) -> list[FrozenTrial]:
    """The RUNNING trials whose owner (host, pid) ``owned`` accepts, with a configuration chosen and
    running for 0.3 s already: being evaluated (a proposal closed as a duplicate takes milliseconds)."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if CONFIG_ID in t.user_attrs
        and owned(*host_pid(t))
        and (datetime.now(t.datetime_start.tzinfo) - t.datetime_start).total_seconds() > 0.3
    ]


def cut_short(trial: FrozenTrial) -> bool:
    """A FAIL trial that was not judged: interrupted by kopt, or failed by Optuna for its heartbeat
    (with no kopt_status, or one its worker set just before it died)."""
    return trial.state == TrialState.FAIL and trial.user_attrs.get(STATUS) not in ("failed", "surplus")


def evaluations(study: optuna.Study) -> Counter:
    """How many times each configuration was evaluated (an ok or failed trial), straight from Optuna."""
    return Counter(
        t.user_attrs[CONFIG_ID] for t in study.get_trials() if t.user_attrs.get(STATUS) in ("ok", "failed")
    )


def test_two_kopt_search_workers_share_one_study_and_a_kill_mid_trial_loses_nothing(
    work, postgres_url, make_pm
):
    source = search_space(make_pm(kopt_example_backend), work / "work.py", {"N": N})
    assert source.space.size == 12
    name = study_name_for(source, {"N": N}, work / "ref.py", "pytorch")
    first = kopt_worker(work, postgres_url, "first")
    workers = [first]
    try:
        wait_until(lambda: study_exists(postgres_url, name), "study made by the first worker", workers)
        second = kopt_worker(work, postgres_url, "second", "--join")
        workers.append(second)
        study = open_study(postgres_url, name)
        # both at work: the second has a trial in flight, and the first is in the middle of one
        wait_until(lambda: in_flight(study, lambda h, pid: pid == second.pid), "trial of the joiner", workers)
        wait_until(lambda: in_flight(study, lambda h, pid: pid == first.pid), "trial of the first", workers)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL
        second.wait(timeout=300)
    finally:
        stop(workers)
    err = (work / "second.err").read_text()
    assert "Traceback" not in err, err
    assert second.returncode == 0, err

    # the survivor finished the budget, counting the first worker's evaluations
    document = json.loads((work / "second.out").read_text())
    assert document["ok"] is True and document["result"]["evaluated"] == TRIALS
    recorded = json.loads((work / "second" / "trials.json").read_text())
    assert recorded["stop_reason"] == "trial budget" and recorded["evaluated"] == TRIALS
    assert recorded["interrupted"] == 1

    # the study: exactly TRIALS configurations evaluated, each once, whoever evaluated it
    result = load_study_result(postgres_url, name)
    ids = [t.config_id for t in result.trials]
    assert len(ids) == TRIALS and len(set(ids)) == TRIALS
    assert result.interrupted == 1
    study = open_study(postgres_url, name)
    counts = evaluations(study)
    assert sum(counts.values()) == TRIALS and set(counts.values()) == {1}, counts

    # the trial the kill cut short: FAIL, interrupted, and its configuration evaluated once, afterwards,
    # from the copy the survivor enqueued
    trials = study.get_trials()
    cut = [t for t in trials if host_pid(t)[1] == first.pid and cut_short(t)]
    assert len(cut) == 1, [(t.number, t.state, t.user_attrs) for t in trials]
    killed = cut[0]  # interrupted (its pid is dead) or failed by its heartbeat, whichever came first
    identifier = killed.user_attrs[CONFIG_ID]
    assert counts[identifier] == 1
    (again,) = [
        t for t in trials if t.user_attrs.get(CONFIG_ID) == identifier and t.user_attrs.get(STATUS) == "ok"
    ]
    assert again.number > killed.number and host_pid(again)[1] == second.pid
    assert again.user_attrs.get(REQUEUED_FROM, again.system_attrs.get("failed_trial")) == killed.number
    assert all(t.state != TrialState.RUNNING for t in trials)  # nothing left in flight


def test_joining_a_study_that_does_not_exist_is_exit_4_naming_it(work, postgres_url, make_pm):
    source = search_space(make_pm(kopt_example_backend), work / "work.py", {"N": N})
    name = study_name_for(source, {"N": N}, work / "ref.py", "pytorch")
    proc, document = run_kopt(
        "search", "work.py", "--ref", "ref.py", f"--N={N}", "--storage", postgres_url, "--join", cwd=work
    )
    assert proc.returncode == 4 and document["error"]["type"] == "ConfigError"
    assert name in document["error"]["message"] and "to join" in document["error"]["message"]
    assert "without --join" in document["error"]["hint"]


def test_join_without_a_storage_is_exit_4(work):
    proc, document = run_kopt("search", "work.py", "--ref", "ref.py", f"--N={N}", "--join", cwd=work)
    assert proc.returncode == 4 and document["error"]["type"] == "ConfigError"
    assert "--storage" in document["error"]["message"]
    assert not (work / "kopt_search_work").exists()


def test_a_postgresql_url_where_nothing_listens_is_exit_4_without_its_password(work):
    with socket.socket() as probe:  # a port nothing listens on (freed again at once)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://kopt:hunter2secret@127.0.0.1:{port}/kopt"
    proc, document = run_kopt("search", "work.py", "--ref", "ref.py", f"--N={N}", "--storage", url, cwd=work)
    assert proc.returncode == 4 and document["error"]["type"] == "ConfigError"
    message = document["error"]["message"]
    assert message.startswith("cannot open the study storage") and f"kopt:***@127.0.0.1:{port}" in message
    assert "hunter2secret" not in proc.stdout + proc.stderr


def unshare_uts() -> list[str]:
    """The command prefix that runs a process in a UTS namespace of its own (root: its own; otherwise
    with a user namespace, where one may set a host name); skips the test where neither is permitted."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    prefix = ["unshare", "--uts"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--uts"]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import socket; socket.sethostname('x')"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot run a process under another host name here ({' '.join(prefix)}): {probe.stderr}")
    return prefix


def test_a_worker_on_another_host_killed_mid_trial_is_retried_through_its_silent_heartbeat(
    work, postgres_url
):
    prefix = unshare_uts()
    trials = 8
    args = [str(CHILD), "space.py", postgres_url, "shared", str(trials)]
    first = start([sys.executable, *args, "first"], work, "first")
    workers = [first]
    try:
        wait_until(lambda: study_exists(postgres_url, "shared"), "study made by the first worker", workers)
        second = start([*prefix, sys.executable, *args, "join", OTHER_HOST], work, "second")
        workers.append(second)
        study = open_study(postgres_url, "shared")
        # its owner names another host: the first worker cannot check its pid, only hear its heartbeat
        wait_until(
            lambda: in_flight(study, lambda host, p: host == OTHER_HOST), "trial on the other host", workers
        )
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(timeout=30)
        first.wait(timeout=180)
    finally:
        stop(workers)
    err = (work / "first.err").read_text()
    assert first.returncode == 0, err
    said = json.loads((work / "first.out").read_text())
    assert said["evaluated"] == trials and said["stop_reason"] == "trial budget"

    study = open_study(postgres_url, "shared")
    trials_now = study.get_trials()
    counts = evaluations(study)
    assert sum(counts.values()) == trials and set(counts.values()) == {1}, counts
    result = load_study_result(postgres_url, "shared")
    assert len(result.trials) == trials and result.interrupted == 1
    cut = [t for t in trials_now if host_pid(t)[0] == OTHER_HOST and cut_short(t)]
    assert len(cut) == 1, [(t.number, t.state, t.user_attrs) for t in trials_now]
    killed = cut[0]
    assert killed.user_attrs.get(STATUS) != "interrupted"  # failed by Optuna for its heartbeat, no pid check
    (again,) = [t for t in trials_now if t.system_attrs.get("failed_trial") == killed.number]
    assert again.user_attrs[STATUS] == "ok" and host_pid(again)[0] == socket.gethostname()
    assert again.user_attrs[REQUEUED_FROM] == killed.number
    assert counts[killed.user_attrs[CONFIG_ID]] == 1


# --- the race, step by step: two sessions of run_study's engine on one study, in one process ---------

RACE = "// kopt:space X = [0, 1, 2]\n__global__ void k(float* out) { out[0] = X; }\n"


def racing(tmp_path: Path, budget: int | None) -> list[_Session]:
    """Two workers' sessions on one SQLite study, both synced before either asks: each has seen nothing
    of what the other is about to propose."""
    space = parse_cu_space(RACE, "race.cu")
    storage = _open_storage(f"sqlite:///{tmp_path / 'race.db'}")
    sessions = []
    for _ in range(2):
        study = optuna.create_study(storage=storage, study_name="race", load_if_exists=True)
        session = _Session(space, study, storage, "values", grid=False, seed=0)
        session.check_study()
        session.budget = budget
        session.sync()
        sessions.append(session)
    return sessions


def asked(session: _Session, config: dict) -> optuna.Trial:
    session.study.enqueue_trial(config)
    return session.study.ask(session.distributions)


QUIET = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning", "ignore::UserWarning")


@QUIET
def test_two_workers_proposing_one_configuration_at_once_evaluate_it_once(tmp_path):
    first, second = racing(tmp_path, budget=None)
    earlier = asked(first, {"X": 0})  # asked, its configuration not named by the first worker yet
    assert second._propose(asked(second, {"X": 0})) is None  # the later trial yields to the earlier one
    assert first._propose(earlier) is not None  # which goes on
    later = second.study.get_trials()[1]
    assert later.state == TrialState.PRUNED and later.user_attrs[STATUS] == "duplicate"
    assert later.user_attrs[DUPLICATE_OF] == earlier.number


@QUIET
def test_two_workers_asking_for_the_budgets_last_evaluation_at_once_evaluate_one(tmp_path):
    first, second = racing(tmp_path, budget=1)
    assert first._propose(asked(first, {"X": 0})) is not None
    assert second._propose(asked(second, {"X": 1})) is None and second.full
    trials = second.study.get_trials()
    surplus = trials[1]
    assert surplus.state == TrialState.FAIL and surplus.user_attrs[STATUS] == "surplus"
    # its configuration is not lost: enqueued again, for a larger budget or a worker whose trial dies
    (again,) = [t for t in trials if t.state == TrialState.WAITING]
    assert (
        again.system_attrs["fixed_params"] == {"X": 1} and again.user_attrs[REQUEUED_FROM] == surplus.number
    )
    assert load_study_result(f"sqlite:///{tmp_path / 'race.db'}", "race").interrupted == 0


@QUIET
def test_a_trial_failed_for_its_heartbeat_after_its_worker_set_its_status_counts_as_interrupted(tmp_path):
    worker = racing(tmp_path, budget=None)[0]
    trial = asked(worker, {"X": 2})
    assert worker._propose(trial) is not None
    trial.set_user_attr(STATUS, "ok")  # its worker set the status, and died before telling it
    worker.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)  # as Optuna fails it
    result = load_study_result(f"sqlite:///{tmp_path / 'race.db'}", "race")
    assert result.trials == () and result.interrupted == 1  # no evaluation without a time
    # the copy Optuna's retry enqueues holds the configuration, not the dead worker's owner or status
    retry = getattr(worker.storage, "get_heartbeat_stale_trial_callback", None)
    retry = retry() if retry is not None else worker.storage.get_failed_trial_callback()
    retry(worker.study, worker.study.get_trials()[-1])
    (copy,) = [t for t in worker.study.get_trials() if t.state == TrialState.WAITING]
    assert set(copy.user_attrs) == {CONFIG_ID, CONFIG, REQUEUED_FROM}
    assert (
        copy.user_attrs[REQUEUED_FROM] == trial.number and copy.system_attrs["failed_trial"] == trial.number
    )
