"""The ``ray`` executor (kopt-ray) on Ray's real local cluster, on the CPU: the cluster declares two GPUs
(``address=local``, ``num_gpus=2``) so the pool has two actors, each pinned by Ray to one "GPU", each
hosting kopt's local executor; the kernels are the example PyTorch backend's, which run on the CPU.

What is shown: the registry finds ``ray`` and refuses bad options (exit 4) and unreachable or GPU-less
clusters (exit 3); each slot benches correctly; a bench runs on the copy its node unpacked by content key
(and the next one reuses it without another upload); a failing kernel is a failed record, sent once; an
actor killed in the middle of a bench costs only that attempt (the command is sent again and its record
comes back); builds run as Ray tasks and come home where the steps look; a search and an explore run
through the pool. Nothing of Ray is mocked.
"""

from __future__ import annotations

import inspect
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import attrs
import pytest

import kopt_example_backend
import kopt_ray.plugin
from kopt_core.backends import backend_hooks
from kopt_core.bench.executor import PairedPlan
from kopt_core.errors import ConfigError
from kopt_core.execute.base import ExecutorRegistry, check_executor_options, executor_for
from kopt_core.plugins import get_plugin_manager
from kopt_core.records import BenchOptions, BenchRequest, Candidate, Toolchain
from kopt_core.steps.build_pool import BuildJob, CompilePlan, build_all
from kopt_ray import content

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
FAST = BenchOptions(seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=120)
N = 4096
LOCAL = {"address": "local", "num_gpus": "2", "num_cpus": "2", "builds": "cluster"}

# A saxpy that notes each load: the process that loaded it and the file it was loaded from.
NOTING = '''"""saxpy, noting where it was loaded ({tag})."""

import os
import time

import torch

with open({log!r}, "a") as _log:
    _log.write(f"{{os.getpid()}} {{__file__}}\\n")
time.sleep({sleep})


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha={alpha})
'''

CHUNKS = '''"""y += 2 x in chunks of CHUNK elements: the fewer the chunks, the faster."""

import torch

kopt_space = {"CHUNK": [256, 1024, 4096, 16384]}
CHUNK = 256


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, CHUNK):
        y[start : start + CHUNK].add_(x[start : start + CHUNK], alpha=2.0)
'''


@pytest.fixture(scope="module")
def pm():
    return get_plugin_manager(autoload=False, plugins=(kopt_example_backend, kopt_ray.plugin))


@pytest.fixture(scope="module")
def pool(pm):
    """One local Ray cluster for the module: two declared GPUs, two CPUs, builds as Ray tasks."""
    with executor_for(pm, "ray", LOCAL).open(dict(LOCAL)) as opened:
        yield opened


def write_kernel(folder: Path, *, sleep: float = 0.0, alpha: float = 2.0) -> tuple[Path, Path]:
    """A noting saxpy of its own content (a fresh tag: no cache holds it yet) and its log."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "loads.log"
    kernel = folder / "kernel.py"
    kernel.write_text(NOTING.format(tag=uuid.uuid4().hex, log=str(log), sleep=sleep, alpha=alpha))
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "ref.py")
    return kernel, log


def request_for(pm, kernel: Path, options: BenchOptions = FAST) -> BenchRequest:
    """The bench request a step makes for ``kernel`` (the example backend's compile: the module itself)."""
    candidate = Candidate(path=str(kernel), backend="pytorch")
    artifact = backend_hooks(pm, "pytorch").compile(
        candidate, kernel.parent / "build", Toolchain(arch="sm_90a")
    )
    return BenchRequest(
        artifact=artifact, reference=str(kernel.parent / "ref.py"), dims={"N": N}, options=options
    )


def loads(log: Path) -> list[tuple[int, str]]:
    if not log.exists():
        return []
    return [(int(pid), path) for pid, path in (line.split(" ", 1) for line in log.read_text().splitlines())]


# ------------------------------------------------------------------------------- (a) the registry


def test_the_installed_entry_point_registers_ray(monkeypatch):
    monkeypatch.setenv("KOPT_PLUGINS", "kopt_ray")
    registry = ExecutorRegistry.from_plugins(get_plugin_manager())
    info = registry.get("ray")
    assert registry.owners["ray"] == "kopt_ray" and info.remote is True
    assert set(info.options) == {"address", "num_gpus", "num_cpus", "builds"}


@pytest.mark.parametrize(
    "options, words",
    [
        ({"address": "nowhere"}, "not a Ray address"),
        ({"address": "head:99999"}, "not a Ray address"),
        ({"address": "ray//head:10001"}, "not a Ray address"),
        ({"address": "local", "num_gpus": "0"}, "positive whole number"),
        ({"address": "local", "num_cpus": "two"}, "positive whole number"),
        ({"num_gpus": "2"}, "only applies to address=local"),
        ({"address": "head:6379", "num_cpus": "4"}, "only applies to address=local"),
        ({"builds": "elsewhere"}, "auto, cluster or local"),
        ({"devices": "0,1"}, "has no option devices"),
    ],
)
def test_bad_options_are_config_errors_before_anything_starts(pm, options, words):
    info = ExecutorRegistry.from_plugins(pm).get("ray")
    with pytest.raises(ConfigError, match=words) as caught:
        check_executor_options(info, options)
    assert caught.value.exit_code == 4 and caught.value.hint


@pytest.mark.parametrize(
    "options",
    [{"address": "auto"}, {"address": "ray://head.example:10001"}, {"address": "10.0.0.7:6379"}, LOCAL],
)
def test_good_options_pass(pm, options):
    check_executor_options(ExecutorRegistry.from_plugins(pm).get("ray"), dict(options))


def test_a_cluster_nobody_runs_or_one_without_gpus_is_a_hardware_error(tmp_path):
    """In a child process (this module's own cluster is up in this one): a port nothing listens on, then a
    local cluster that declares no GPU (this machine has none)."""
    script = textwrap.dedent(
        """
        import socket, sys
        from kopt_core.errors import HardwareError
        from kopt_ray.pool import RayPool, parse_options

        probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
        for options in ({"address": f"127.0.0.1:{port}"}, {"address": "local", "num_cpus": "1"}):
            try:
                with RayPool(parse_options(options)):
                    print("entered", options)
            except HardwareError as exc:
                print("exit", exc.exit_code, exc.message.splitlines()[0])
        """
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # Ray must find no GPU, whatever this machine has
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("exit", "entered"))]
    assert len(lines) == 2, proc.stdout + proc.stderr
    assert lines[0].startswith("exit 3 could not reach the Ray cluster at address=127.0.0.1:")
    assert lines[1].startswith("exit 3 the Ray cluster at address=local declares no GPU")


# ---------------------------------------------------------------------------- (b) slots and benches


def test_two_slots_one_per_declared_gpu_each_benching_correctly(pm, pool, tmp_path):
    assert pool.name == "ray" and len(pool.slots) == 2 and len(set(pool.slots)) == 2
    places = pool.places
    assert all(slot.startswith("ray:") and "/gpu" in slot for slot in pool.slots)
    assert sorted(gpu for place in places for gpu in place["gpu_ids"]) == ["0", "1"]
    for slot, place in zip(pool.slots, places, strict=True):  # Ray pinned each actor to its own GPU
        assert place["cuda_visible_devices"] == ",".join(place["gpu_ids"])
        assert slot.endswith(f"/gpu{','.join(place['gpu_ids'])}") and place["node_ip"] in slot
    kernel, _ = write_kernel(tmp_path)
    request = request_for(pm, kernel)
    for index in range(2):
        result = pool.worker(index).bench(request)
        assert result.status == "ok", result.error
        assert result.correctness_pass and result.timing_valid and result.violation is None
        assert result.kernel_timing.n >= 10 and result.kernel_timing.median_ms > 0
        assert result.kernel == str(kernel) and result.build == request.artifact  # the driver's paths
        assert result.reference_file == request.reference
        assert pool.worker(index).last_slot == index


def test_a_wrong_kernel_is_a_failed_record_sent_once(pm, pool, tmp_path):
    kernel, log = write_kernel(tmp_path, alpha=3.0)
    pid = pool.places[1]["pid"]
    result = pool.worker(1).bench(request_for(pm, kernel))
    assert result.status == "failed" and result.violation == "wrong_output" and not result.correctness_pass
    assert len(loads(log)) == 1  # not retried: the worker turned it into its record
    assert pool.places[1]["pid"] == pid  # and the actor was not touched


def test_a_paired_command_runs_on_a_slot(pm, pool, tmp_path):
    kernel, _ = write_kernel(tmp_path)
    request = request_for(pm, kernel)
    measurement = pool.worker(0).paired(request, request, PairedPlan(blocks=4, samples_per_block=3))
    assert measurement.status == "ok", measurement.error
    assert measurement.a == measurement.b == str(kernel) and len(measurement.blocks) == 4


# ------------------------------------------------------------------------- (c) files by content key


def test_a_bench_runs_on_the_copy_its_node_unpacked_by_content_key(pm, pool, tmp_path):
    kernel, log = write_kernel(tmp_path)
    request = request_for(pm, kernel)
    key = content.content_key(kernel)
    uploads = pool.uploads
    worker = pool.worker(0)
    first = worker.bench(request)
    assert first.status == "ok", first.error
    placed = worker.last_placement[str(kernel)]
    copy = Path(placed["copy"])
    assert placed["key"] == key and placed["fetched"] is True
    assert (
        copy == Path(pool.places[0]["cache"]) / key / "kernel.py" and copy.read_bytes() == kernel.read_bytes()
    )
    assert [path for _, path in loads(log)] == [str(copy)]  # the bench worker loaded the copy, not kernel.py
    assert key in __import__("ray").get(pool.actor(0).cached.remote())
    assert pool.uploads == uploads + 1  # the kernel's bundle (the reference's key was put before)

    second = pool.worker(1).bench(request)  # another actor of the same node: the node's copy, reused
    assert second.status == "ok", second.error
    again = pool.worker(1).last_placement[str(kernel)]
    assert again == {"key": key, "copy": str(copy), "fetched": False}
    assert [path for _, path in loads(log)] == [str(copy), str(copy)]
    assert pool.uploads == uploads + 1  # nothing put again

    kernel.write_text(kernel.read_text().replace("alpha=2.0", "alpha=2.0 * 1.0"))  # new bytes, new key
    third = worker.bench(request_for(pm, kernel))
    assert third.status == "ok", third.error
    assert worker.last_placement[str(kernel)]["key"] != key and worker.last_placement[str(kernel)]["fetched"]
    assert pool.uploads == uploads + 2


# ------------------------------------------------------------------------------ (d) a lost actor


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_an_actor_killed_in_the_middle_of_a_bench_costs_only_that_attempt(pm, pool, tmp_path):
    kernel, log = write_kernel(tmp_path, sleep=4.0)  # every load takes 4 s: time to kill the actor
    request = request_for(pm, kernel)
    before = pool.places[0]["pid"]
    outcome: dict = {}

    def bench() -> None:
        try:
            outcome["result"] = pool.worker(0).bench(request)
        except BaseException as exc:  # shown by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=bench)
    thread.start()
    deadline = time.monotonic() + 120
    while not loads(log) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loads(log), "the kernel was never loaded"
    os.kill(before, signal.SIGKILL)  # the actor's process, while its bench worker is loading the kernel
    thread.join(timeout=300)
    assert not thread.is_alive() and "error" not in outcome, outcome
    result = outcome["result"]
    assert result.status == "ok", result.error  # the record came back: the command was sent again
    # to the restarted actor, or to the other worker when it was free first
    assert pool.worker(0).last_slot == 1 or pool.places[0]["pid"] != before
    (lost_worker, _), (second_worker, _) = loads(log)  # loaded twice, by two bench workers
    assert lost_worker != second_worker
    # The lost command's worker did not linger: the dead actor's watchdog killed it (else the restarted
    # actor would have, before anything else; kopt_ray.watchdog).
    assert not _alive(lost_worker)


def _fake_worker() -> subprocess.Popen:
    """A process whose command line names the bench worker's module, in a group of its own as the real
    one is started."""
    code = "import time; time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code, "kopt_core.bench.worker"], start_new_session=True)


def test_the_watchdog_kills_the_recorded_worker_once_its_actor_is_gone(tmp_path):
    from kopt_ray import watchdog

    worker = _fake_worker()
    pidfile = tmp_path / "actor.1.pid"
    watchdog.note(pidfile, worker.pid)
    guard = subprocess.Popen([sys.executable, "-m", "kopt_ray.watchdog", str(pidfile)], stdin=subprocess.PIPE)
    time.sleep(0.5)
    assert worker.poll() is None and guard.poll() is None  # the "actor" lives: nothing happens
    guard.stdin.close()  # the actor's end of the pipe closes, as it does when the actor dies
    assert guard.wait(timeout=30) == 0
    assert worker.wait(timeout=30) == -signal.SIGKILL and not pidfile.exists()


def test_a_pid_file_kills_only_the_process_it_recorded(tmp_path):
    from kopt_ray import watchdog

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    worker = _fake_worker()
    try:
        pidfile = tmp_path / "a.pid"
        watchdog.note(pidfile, other.pid)  # not a bench worker
        assert watchdog.kill_recorded(pidfile) is None and other.poll() is None
        pidfile.write_text(f"{worker.pid} 1\n")  # a bench worker, but another start time: a reused pid
        assert watchdog.kill_recorded(pidfile) is None and worker.poll() is None
        watchdog.note(pidfile, worker.pid)
        assert watchdog.kill_recorded(pidfile) == worker.pid and worker.wait(timeout=30) == -signal.SIGKILL
        assert watchdog.kill_recorded(pidfile) is None  # the file is gone with it
    finally:
        for process in (other, worker):
            process.kill()
            process.wait()


def test_commands_from_threads_run_side_by_side_one_per_worker(pm, pool, tmp_path):
    """As a step on the pool sends them (kopt_core.bench.pool.Leases): four benches from two threads."""
    from concurrent.futures import ThreadPoolExecutor

    from kopt_core.bench.pool import Leases

    requests = [request_for(pm, write_kernel(tmp_path / f"k{i}")[0]) for i in range(4)]
    leases = Leases(pool)

    def run(request: BenchRequest) -> tuple[str, str, float, float]:
        with leases.take() as (index, worker):
            started = time.monotonic()
            result = worker.bench(request)
            return pool.slots[index], result.status, started, time.monotonic()

    with ThreadPoolExecutor(max_workers=len(leases)) as threads:
        ran = list(threads.map(run, requests))
    assert [status for _, status, _, _ in ran] == ["ok"] * 4
    assert {slot for slot, _, _, _ in ran} == set(pool.slots)
    first, second = ([(start, end) for used, _, start, end in ran if used == slot] for slot in pool.slots)
    assert any(a0 < b1 and b0 < a1 for a0, a1 in first for b0, b1 in second)  # the two ran side by side


LOSING_EVERY_WORKER = """
import shutil, sys
from pathlib import Path

import ray

import kopt_example_backend
from kopt_core.backends import backend_hooks
from kopt_core.errors import HardwareError
from kopt_core.plugins import get_plugin_manager
from kopt_core.records import BenchOptions, BenchRequest, Candidate, Toolchain
from kopt_ray.pool import RayPool, parse_options

folder = Path(sys.argv[1])
shutil.copy(sys.argv[2] + "/saxpy.py", folder / "saxpy.py")
shutil.copy(sys.argv[2] + "/saxpy_ref.py", folder / "ref.py")
pm = get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
candidate = Candidate(path=str(folder / "saxpy.py"), backend="pytorch")
artifact = backend_hooks(pm, "pytorch").compile(candidate, folder, Toolchain(arch="sm_90a"))
options = BenchOptions(seeds=(0,), warmup_ms=5, budget_s=0.1, min_samples=5, timeout_s=120)
request = BenchRequest(artifact=artifact, reference=str(folder / "ref.py"), dims={"N": 1024}, options=options)
with RayPool(parse_options({"address": "local", "num_gpus": "2", "num_cpus": "1"})) as pool:
    ray.kill(pool.actor(1), no_restart=True)  # gone for good: its slot's commands go to the other worker
    worker = pool.worker(1)
    print("lost one:", worker.bench(request).status, "on slot", worker.last_slot)
    ray.kill(pool.actor(0), no_restart=True)
    try:
        worker.bench(request)
    except HardwareError as exc:
        print("lost both: exit", exc.exit_code, exc.message)
"""


def test_a_worker_lost_for_good_hands_its_commands_on_and_none_left_is_a_hardware_error(tmp_path):
    """In a child process with a cluster of its own (this module's pool must keep its workers)."""
    proc = subprocess.run(
        [sys.executable, "-c", LOSING_EVERY_WORKER, str(tmp_path), str(KERNELS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = [line for line in proc.stdout.splitlines() if line.startswith("lost")]
    assert said[:1] == ["lost one: ok on slot 0"], proc.stdout + proc.stderr
    assert len(said) == 2 and said[1].startswith("lost both: exit 3 every worker of the ray pool is lost")


# ------------------------------------------------------------------------------------ builds


def test_builds_run_as_ray_tasks_and_come_home_where_the_steps_look(pm, pool, tmp_path):
    good, _ = write_kernel(tmp_path / "b1")
    broken = tmp_path / "b2" / "kernel.py"
    broken.parent.mkdir()
    broken.write_text("import torch\n\ndef not_solve(x, y, N: int):\n    pass\n")
    jobs = [
        BuildJob("b1", Candidate(path=str(good), backend="pytorch", name="b1")),
        BuildJob("b2", Candidate(path=str(broken), backend="pytorch", name="b2")),
        BuildJob("b3", Candidate(path=str(tmp_path / "b3" / "kernel.py"), backend="pytorch", name="b3")),
    ]
    called: list = []
    outcomes = pool.build_all(jobs, lambda js: called.append(js) or [])
    assert not called  # builds=cluster: none in this host's compile pool
    assert [o.key for o in outcomes] == ["b1", "b2", "b3"]
    first, second, third = outcomes
    assert first.compile_pass and first.error is None and first.artifact.path == str(good)
    assert first.artifact.source == str(good) and first.artifact.interface.source == str(good)
    assert not second.compile_pass and second.artifact is None and "no top-level `def solve" in second.error
    assert not third.compile_pass and "could not ship" in third.error  # a missing kernel: its own failure
    uploads = pool.uploads
    result = pool.worker(1).bench(BenchRequest(first.artifact, str(good.parent / "ref.py"), {"N": N}, FAST))
    assert result.status == "ok", result.error
    # nothing put: the kernel's bytes came into the store with its build, the reference's with earlier tests
    assert pool.uploads == uploads
    assert pool.worker(1).last_placement[str(good)]["key"] == content.content_key(good)

    expected = build_all(
        pm, jobs[:2], toolchain=Toolchain(arch="sm_90a"), plan=CompilePlan(1, "test"), build_root=tmp_path
    )
    assert [attrs.evolve(o, seconds=0.0) for o in outcomes[:1]] == [attrs.evolve(expected[0], seconds=0.0)]


def test_auto_builds_on_this_host_when_every_worker_is_on_this_node(pm, pool, tmp_path):
    kernel, _ = write_kernel(tmp_path)
    jobs = [BuildJob("k", Candidate(path=str(kernel), backend="pytorch"))]
    sentinel: list = []
    settings = pool.settings
    pool.settings = attrs.evolve(settings, builds="auto")
    try:
        assert not pool.on_other_nodes()
        assert pool.build_all(jobs, lambda js: sentinel.append(list(js)) or sentinel) is sentinel
    finally:
        pool.settings = settings
    assert sentinel[0] == jobs


# ---------------------------------------------------------------------------- (e) a search, (f) explore


def _takes_pool(function) -> bool:
    return "pool" in inspect.signature(function).parameters


def test_a_search_spreads_its_trials_over_the_pool(pm, pool, tmp_path):
    from kopt_core.steps.search import search_kernel

    if not _takes_pool(search_kernel):
        pytest.skip("awaits kopt_core.steps.search.search_kernel(pool=)")
    with pool:
        slots_when_open = pool.slots
    (tmp_path / "chunks.py").write_text(CHUNKS)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    outcome = search_kernel(
        pm,
        tmp_path / "chunks.py",
        tmp_path / "ref.py",
        {"N": 1 << 14},
        out_dir=tmp_path / "out",
        trials=4,
        sampler="grid",
        pool=pool,
        progress=False,
    )
    trials = outcome.result.trials
    assert len(trials) == 4 and all(t.status == "ok" for t in trials), [t.detail for t in trials]
    assert {t.worker for t in trials} <= set(outcome.slots) and all(t.worker for t in trials)
    assert outcome.slots == slots_when_open
    assert outcome.best is not None and outcome.best_file is not None and outcome.best_file.is_file()


CHUNKED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, {chunk}):
        y[start : start + {chunk}].add_(x[start : start + {chunk}], alpha=2.0)
"""
VECTORISED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""
METHODS = ("memory.vectorized_access", "latency.launch_overhead_reduction")
LOOP_N = 1 << 14


def seeded_run(pm, folder: Path):
    """A run as seed and iter open leave it without their profiles (as tests/run/test_loop_cpu.py sets it
    up): the baseline benched, its A/A noise measured, iterv1/ with methods.json."""
    from kopt_core.jsonio import write_json
    from kopt_core.knowledge.select import Picked, Selection
    from kopt_core.records import to_data
    from kopt_core.records.state import Env
    from kopt_core.run.init import init_run
    from kopt_core.run.layout import iteration_dir
    from kopt_core.run.prepare import prepare_in_run
    from kopt_core.run.seed import measure_noise
    from kopt_core.steps.bench import run_bench

    (folder / "kernel.py").write_text(CHUNKED.format(chunk=256))
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "ref.py")
    write_json(folder / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=1)))
    store = init_run(
        pm,
        baseline=folder / "kernel.py",
        ref=folder / "ref.py",
        dims={"N": LOOP_N},
        env_path=folder / "env.json",
    )
    prepared = prepare_in_run(pm, store.load(), "seed")
    baseline = store.run_dir / "baseline"
    bench = run_bench(pm, prepared, BenchOptions(seeds=(0,), warmup_ms=20, budget_s=0.3, time_reference=True))
    assert bench.status == "ok", bench.error
    write_json(baseline / "bench.json", to_data(bench))
    threshold = measure_noise(prepared, baseline, plan=PairedPlan(blocks=12, seed=7))
    store.update(
        run_status="running",
        best_metric_ms=bench.kernel_timing.median_ms,
        noise_threshold=threshold,
        noise_evidence=str(baseline / "noise_aa.json"),
    )
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="exact", evidence="test") for m in METHODS
    )
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="pytorch",
        numerics_mode="reference",
        bound="latency",
        budget={},
        selected=picked,
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return store, iterv1


def write_branches(iterv1: Path, branches: dict[str, str]) -> None:
    from kopt_core.records.loop import BranchSpec, Candidates
    from kopt_core.run.candidates import write_candidates

    specs = []
    for branch_id, code in branches.items():
        (iterv1 / "branches" / branch_id).mkdir(parents=True)
        (iterv1 / "branches" / branch_id / "kernel.py").write_text(code)
        specs.append(BranchSpec(id=branch_id, file=f"branches/{branch_id}/kernel.py", methods=METHODS))
    write_candidates(
        iterv1, Candidates(iteration=1, generator="test", methods=METHODS, branches=tuple(specs))
    )


def test_explore_runs_on_the_pool(pm, pool, tmp_path):
    from kopt_core.run.explore import explore_iteration

    if not _takes_pool(explore_iteration):
        pytest.skip("awaits kopt_core.run.explore.explore_iteration(pool=)")
    store, iterv1 = seeded_run(pm, tmp_path)
    wrong = VECTORISED.replace("alpha=2.0", "alpha=3.0")
    write_branches(iterv1, {"b1": CHUNKED.format(chunk=128), "b2": VECTORISED, "b3": wrong})
    store.update(branches=3)
    record = explore_iteration(pm, store, 1, plan=PairedPlan(blocks=12, seed=7), pool=pool)
    by_id = {branch.id: branch for branch in record.branches}
    assert record.champion == "b2" and by_id["b1"].passed and by_id["b2"].passed
    assert by_id["b3"].compile_pass and not by_id["b3"].correctness_pass
    assert (iterv1 / "kernel.py").read_text() == VECTORISED
