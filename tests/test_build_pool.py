"""The compile pool (kopt_core.steps.build_pool): how many builds at once, which failures are retried
alone, and many candidates built through their backends' compile hooks, with real nvcc where present."""

from __future__ import annotations

import shutil
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import kopt_cuda.plugin
import kopt_example_backend
from kopt_core import hookimpl, progress
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.records import Artifact, BackendInfo, Candidate, Toolchain
from kopt_core.steps import build_pool
from kopt_core.steps.build_pool import (
    BuildJob,
    BuildOutcome,
    CompilePlan,
    available_cpus,
    available_memory_bytes,
    build_all,
    is_resource_failure,
    plan_compile_jobs,
)
from kopt_cuda.build import find_nvcc

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
CUDA = BackendInfo(name="cuda", suffixes=(".cu",), compile_memory_gib=2.0)
CUTLASS = BackendInfo(name="cutlass", suffixes=(".cu", ".cuh"), compile_memory_gib=4.0, priority=10)


def gib(value: float) -> int:
    """Bytes a little above ``value`` GiB, so the tenth shown is ``value`` itself (it is rounded down)."""
    return int((value + 0.01) * GIB)


# ------------------------------------------------------------------------------------ plan_compile_jobs


def test_auto_on_a_big_machine_is_four_workers():
    plan = plan_compile_jobs("auto", [CUDA], cpus=16, available_bytes=gib(100))

    assert plan == CompilePlan(
        4,
        "auto: 4 workers = min(half of 16 CPUs, 4, memory 100.0 GiB free - 2 GiB reserve / 2 GiB per CUDA "
        "job)",
    )


def test_auto_on_two_cpus_is_one_worker():
    plan = plan_compile_jobs("auto", [CUDA], cpus=2, available_bytes=gib(100))

    assert plan.workers == 1
    assert plan.reason.startswith("auto: 1 worker = min(half of 2 CPUs, 4, memory 100.0 GiB free")


def test_auto_half_the_cpus_is_the_bound():
    plan = plan_compile_jobs("auto", [CUDA], cpus=4, available_bytes=gib(9.8))

    assert plan == CompilePlan(
        2,
        "auto: 2 workers = min(half of 4 CPUs, 4, memory 9.8 GiB free - 2 GiB reserve / 2 GiB per CUDA job)",
    )


def test_auto_memory_is_the_bound():
    plan = plan_compile_jobs("auto", [CUDA], cpus=16, available_bytes=gib(7.9))

    # (7.9 - 2) / 2 = 2.95: two jobs fit, not three.
    assert plan == CompilePlan(
        2,
        "auto: 2 workers = min(half of 16 CPUs, 4, memory 7.9 GiB free - 2 GiB reserve / 2 GiB per CUDA job)",
    )


def test_the_text_never_promises_more_than_the_number():
    # 7.99 GiB is shown as 7.9 (rounded down), and the workers follow the figure shown: (7.9 - 2) / 2 -> 2.
    plan = plan_compile_jobs("auto", [CUDA], cpus=16, available_bytes=int(7.99 * GIB))

    assert plan.workers == 2 and "memory 7.9 GiB free" in plan.reason


def test_auto_cutlass_jobs_take_four_gib():
    cuda = plan_compile_jobs("auto", [CUDA], cpus=16, available_bytes=gib(13.5))
    cutlass = plan_compile_jobs("auto", [CUTLASS], cpus=16, available_bytes=gib(13.5))

    assert cuda.workers == 4  # (13.5 - 2) / 2 = 5.75
    assert cutlass == CompilePlan(
        2,
        "auto: 2 workers = min(half of 16 CPUs, 4, memory 13.5 GiB free - 2 GiB reserve / 4 GiB per CUTLASS "
        "job)",
    )


def test_auto_a_mixed_set_is_charged_its_heaviest_backend():
    plan = plan_compile_jobs("auto", [CUDA, CUTLASS, CUDA], cpus=16, available_bytes=gib(13.5))

    assert plan.workers == 2
    assert "4 GiB per CUTLASS job" in plan.reason


def test_auto_never_goes_below_one_worker():
    plan = plan_compile_jobs("auto", [CUTLASS], cpus=4, available_bytes=gib(3))

    assert plan == CompilePlan(
        1,
        "auto: 1 worker, the minimum (min(half of 4 CPUs, 4, memory 3.0 GiB free - 2 GiB reserve / 4 GiB per "
        "CUTLASS job) = 0)",
    )
    assert plan_compile_jobs("auto", [CUDA], cpus=1, available_bytes=gib(100)).workers == 1


def test_auto_with_no_backend_named_is_charged_the_default():
    plan = plan_compile_jobs("auto", [], cpus=16, available_bytes=gib(5))

    assert plan.workers == 1 and "/ 2 GiB per job)" in plan.reason


def test_explicit_n_is_used_as_given():
    assert plan_compile_jobs(3, [CUDA], cpus=2, available_bytes=gib(100)) == CompilePlan(
        3, "--compile-jobs 3: 3 workers as given"
    )
    assert plan_compile_jobs("1", [CUTLASS], cpus=16, available_bytes=gib(100)).workers == 1


def test_explicit_n_beyond_memory_says_so():
    plan = plan_compile_jobs(8, [CUDA], cpus=16, available_bytes=gib(9.8))

    assert plan == CompilePlan(
        8,
        "--compile-jobs 8: 8 workers as given, more than memory allows (3 = memory 9.8 GiB free - 2 GiB "
        "reserve / 2 GiB per CUDA job); a build that runs out of memory is retried once, alone",
    )


def test_unknown_memory_is_said_and_not_a_limit(monkeypatch, tmp_path):
    monkeypatch.setattr(build_pool, "MEMINFO", tmp_path / "no-meminfo")

    auto = plan_compile_jobs("auto", [CUTLASS], cpus=16)
    explicit = plan_compile_jobs(6, [CUTLASS], cpus=16)

    assert auto == CompilePlan(
        4,
        "auto: 4 workers = min(half of 16 CPUs, 4); available memory unknown (no MemAvailable), not limited "
        "by it",
    )
    assert explicit == CompilePlan(
        6, "--compile-jobs 6: 6 workers as given (available memory unknown, so not checked against it)"
    )


@pytest.mark.parametrize("setting", [0, -1, "0", "two", "", "2.5", True])
def test_a_bad_setting_is_a_config_error(setting):
    with pytest.raises(ConfigError, match="--compile-jobs must be 'auto' or a positive integer"):
        plan_compile_jobs(setting, [CUDA], cpus=4, available_bytes=gib(100))


def test_machine_figures(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       32768000 kB\nMemFree:         1000000 kB\nMemAvailable:   10276044 kB\n"
    )

    assert available_memory_bytes(meminfo) == 10276044 * 1024
    meminfo.write_text("MemTotal:       32768000 kB\n")  # kernels before 3.14 have no MemAvailable
    assert available_memory_bytes(meminfo) is None
    assert available_cpus() >= 1
    here = plan_compile_jobs("AUTO", [CUDA])
    assert 1 <= here.workers <= 4 and here.reason.startswith("auto: ")


# ---------------------------------------------------------------------------------- is_resource_failure

NVCC_SYNTAX_ERROR = """\
/src/b3/kernel.cu: nvcc could not build this file (exit 2); fix it and retry:
/src/b3/kernel.cu(19): error: expected an expression
      if (i < n) { int x = ;
                           ^

/src/b3/kernel.cu(20): error: identifier "killed" is undefined
          y[i] = killed * x[i];
                 ^

2 errors detected in the compilation of "/src/b3/kernel.cu"."""


@pytest.mark.parametrize(
    "text",
    [
        # cicc SIGKILLed (the OOM killer): nvcc runs it through sh, which says "Killed"; nvcc exits 137.
        "/src/b1/kernel.cu: nvcc could not build this file (exit 137); fix it and retry:\nKilled",
        # nvcc itself SIGKILLed: Python's subprocess gives -9 and there is no output.
        "/src/b1/kernel.cu: nvcc could not build this file (exit -9); fix it and retry:\n",
        # The host compiler SIGKILLed.
        "/src/b1/kernel.cu: nvcc could not build this file (exit 1); fix it and retry:\n"
        "gcc: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.",
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
        # Under a memory limit (ulimit -v), as seen with nvcc 13.0 here.
        "/src/b1/kernel.cu: nvcc could not build this file (exit 4); fix it and retry:\n"
        "/usr/include/c++/12/bits/stl_iterator_base_funcs.h(189): catastrophic error: out of memory\n"
        '1 catastrophic error detected in the compilation of "/src/b1/kernel.cu".',
        "/src/b1/kernel.cu: nvcc could not build this file (exit 1); fix it and retry:\n"
        "virtual memory exhausted: Cannot allocate memory",
        "/src/b1/kernel.cu: nvcc could not build this file (exit 139); fix it and retry:\n",
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc",
        "ptxas fatal   : Memory allocation failure",
        "LLVM ERROR: out of memory",
        "MemoryError: ",  # a Python backend's compile, captured as an unexpected exception
        "OSError: [Errno 12] Cannot allocate memory",
        "BlockingIOError: [Errno 11] Resource temporarily unavailable",
    ],
)
def test_resource_failures_are_recognised(text):
    assert is_resource_failure(text)


@pytest.mark.parametrize(
    "text",
    [
        NVCC_SYNTAX_ERROR,
        "/src/b2/kernel.cu: nvcc could not build this file (exit 255); fix it and retry:\n"
        "ptxas error   : Entry function '_Z6kernelPf' uses too much shared data (0x10000 bytes, 0xc000 max)",
        "/src/b2/kernel.cu: nvcc could not build this file (exit 1); fix it and retry:\n"
        "/usr/bin/ld: kernel.o: in function `solve': undefined reference to `helper(float)'",
        "nvcc building /src/b2/kernel.cu did not finish within 600 s; simplify the kernel (fewer template "
        "instantiations or unrolled loops) or raise the build timeout.",
        "nvcc not found (looked on PATH, in $CUDA_HOME/bin): install the CUDA toolkit or set CUDA_HOME",
        "/src/b2/kernel.cu: nvcc could not build this file (exit 1370); fix it and retry:\n",
        "",
    ],
)
def test_ordinary_failures_are_not_resource_failures(text):
    assert not is_resource_failure(text)


# ------------------------------------------------------------------------ build_all with a test double


class StarvedBackendTestDouble:
    """A test double: a backend plugin whose compile does what the candidate file says ("ok",
    "oom-once", "oom-always", "syntax", "crash"), recording each call with how many builds were in flight.
    The first ``meet`` calls wait for each other at a barrier, which proves they ran at the same time."""

    NAME = "starved_test_double"

    def __init__(self, meet: int = 0) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, int]] = []  # (start|end, key, builds in flight at that moment)
        self.in_flight = 0
        self.calls: dict[str, int] = {}
        self.barrier = threading.Barrier(meet, timeout=30) if meet else None
        self.meet = meet

    @hookimpl
    def kopt_register_backends(self, register):
        register(BackendInfo(name=self.NAME, suffixes=(".td",), needs_gpu=False, compile_memory_gib=1.0))

    @hookimpl
    def kopt_preflight(self, candidate):
        raise AssertionError("the pool builds; it never runs the static contract")

    @hookimpl
    def kopt_compile(self, candidate, build_dir, toolchain):
        key = candidate.name
        with self.lock:
            self.in_flight += 1
            self.calls[key] = self.calls.get(key, 0) + 1
            attempt = self.calls[key]
            order = sum(self.calls.values())
            self.events.append(("start", key, self.in_flight))
        try:
            if self.barrier is not None and order <= self.meet:
                self.barrier.wait()
            time.sleep(0.02)
            return self.behave(Path(candidate.path).read_text().strip(), candidate, build_dir, attempt)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.events.append(("end", key, self.in_flight))

    def behave(self, what: str, candidate, build_dir: Path, attempt: int) -> Artifact:
        assert build_dir.is_dir() and build_dir.name == candidate.name
        if what == "oom-always" or (what == "oom-once" and attempt == 1):
            raise ConfigError(
                f"{candidate.path}: nvcc could not build this file (exit 137); fix it and retry:\nKilled"
            )
        if what == "syntax":
            raise ConfigError(f"{candidate.path}(3): error: expected a ';'")
        if what == "crash":
            raise RuntimeError("the plugin tripped over its own feet")
        (build_dir / "build.log").write_text(f"attempt {attempt}\n")
        return Artifact(
            backend=self.NAME,
            source=candidate.path,
            path=str(build_dir / "build.log"),
            launcher="m:f",
        )


def double_jobs(tmp_path: Path, behaviours: dict[str, str], backend: str = StarvedBackendTestDouble.NAME):
    jobs = []
    for key, what in behaviours.items():
        source = tmp_path / "src" / key / "kernel.td"
        source.parent.mkdir(parents=True)
        source.write_text(what)
        jobs.append(BuildJob(key, Candidate(path=str(source), backend=backend, name=key)))
    return jobs


def build(pm, jobs, tmp_path: Path, workers: int) -> list[BuildOutcome]:
    return build_all(
        pm,
        jobs,
        toolchain=Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache")),
        plan=CompilePlan(workers, "test"),
        build_root=tmp_path / "builds",
    )


def test_resource_failures_are_retried_once_alone_after_the_pool(make_pm, tmp_path):
    double = StarvedBackendTestDouble(meet=2)
    pm = make_pm(double)
    jobs = double_jobs(
        tmp_path,
        {"b1": "oom-once", "b2": "ok", "b3": "oom-always", "b4": "syntax", "b5": "crash", "b6": "ok"},
    )

    outcomes = build(pm, jobs, tmp_path, workers=2)

    assert [outcome.key for outcome in outcomes] == ["b1", "b2", "b3", "b4", "b5", "b6"]
    by_key = {outcome.key: outcome for outcome in outcomes}
    assert by_key["b1"].compile_pass and by_key["b1"].retried_serially and by_key["b1"].error is None
    assert by_key["b1"].artifact is not None and by_key["b1"].artifact.path.endswith("b1/build.log")
    assert by_key["b2"].compile_pass and not by_key["b2"].retried_serially and not by_key["b2"].cache_hit
    assert not by_key["b3"].compile_pass and by_key["b3"].retried_serially
    assert by_key["b3"].artifact is None and "(exit 137)" in (by_key["b3"].error or "")
    assert not by_key["b4"].compile_pass and not by_key["b4"].retried_serially
    assert by_key["b4"].error == f"{jobs[3].candidate.path}(3): error: expected a ';'"
    assert not by_key["b5"].compile_pass and not by_key["b5"].retried_serially
    assert by_key["b5"].error == "RuntimeError: the plugin tripped over its own feet"
    assert all(outcome.seconds > 0 for outcome in outcomes)
    # Once in the pool each, and a second time, alone, only the two that ran out of resources.
    assert double.calls == {"b1": 2, "b2": 1, "b3": 2, "b4": 1, "b5": 1, "b6": 1}
    pool, retries = double.events[:12], double.events[12:]
    assert max(in_flight for _, _, in_flight in pool) == 2  # two at a time, never more
    assert retries == [("start", "b1", 1), ("end", "b1", 0), ("start", "b3", 1), ("end", "b3", 0)]
    assert sorted((tmp_path / "builds").iterdir()) == [tmp_path / "builds" / key for key in by_key]


def test_one_worker_builds_one_at_a_time(make_pm, tmp_path):
    double = StarvedBackendTestDouble()
    jobs = double_jobs(tmp_path, {"b1": "ok", "b2": "ok", "b3": "ok"})

    outcomes = build(make_pm(double), jobs, tmp_path, workers=1)

    assert all(outcome.compile_pass for outcome in outcomes)
    assert [event for event, _, _ in double.events] == ["start", "end"] * 3
    assert max(in_flight for _, _, in_flight in double.events) == 1


def test_each_candidate_goes_to_its_own_backend(make_pm, tmp_path):
    double = StarvedBackendTestDouble()
    pm = make_pm(double, kopt_example_backend)
    saxpy = REPO / "examples" / "kopt_example_backend" / "kernels" / "saxpy.py"
    jobs = [
        *double_jobs(tmp_path, {"b1": "ok"}),
        BuildJob("b2", Candidate(path=str(saxpy), backend="pytorch", name="b2")),
        BuildJob("b3", Candidate(path=str(saxpy), backend="nonexistent", name="b3")),
    ]

    first, second, third = build(pm, jobs, tmp_path, workers=4)

    assert first.compile_pass and first.artifact is not None and first.artifact.backend == double.NAME
    assert second.compile_pass and second.artifact is not None and second.artifact.backend == "pytorch"
    assert second.artifact.launcher == "kopt_example_backend:load"
    assert not third.compile_pass and "unknown backend 'nonexistent'" in (third.error or "")
    assert double.calls == {"b1": 1}


def test_a_hardware_error_is_that_candidates_failure(make_pm, tmp_path):
    class NoCompiler(StarvedBackendTestDouble):
        def behave(self, what, candidate, build_dir, attempt):
            raise HardwareError("nvcc not found", hint="install the CUDA toolkit")

    (outcome,) = build(make_pm(NoCompiler()), double_jobs(tmp_path, {"b1": "ok"}), tmp_path, workers=2)

    assert not outcome.compile_pass and outcome.error == "nvcc not found\n  -> install the CUDA toolkit"


class Recorder:
    """A progress reporter that records what it was asked to show."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.shown: list[str] = []

    @contextmanager
    def __call__(self, message: str):
        with self.lock:
            self.shown.append(message)
        yield


def test_the_status_line_counts_the_builds(make_pm, tmp_path):
    jobs = double_jobs(tmp_path, {"b1": "ok", "b2": "oom-once", "b3": "ok", "b4": "ok"})
    recorder = Recorder()

    with progress.reporting(recorder):
        build(make_pm(StarvedBackendTestDouble()), jobs, tmp_path, workers=2)
        assert progress.current() is recorder  # the pool's own reporter is gone again

    # Not "building kernel.td" (BackendHooks.compile's own step) four times over: the pool's count.
    counts = [message.partition(" (")[0] for message in recorder.shown[:4]]
    keys = [message.partition(" (")[2] for message in recorder.shown[:4]]
    assert counts == ["building 1/4", "building 2/4", "building 3/4", "building 4/4"]
    assert sorted(keys) == ["b1)", "b2)", "b3)", "b4)"]
    assert recorder.shown[4:] == ["building b2 again, alone (1/1): it ran out of resources"]


def test_pools_in_two_threads_at_once_leave_the_reporter_installed(make_pm, tmp_path):
    """Two pools whose builds overlap, the first to start ending first (explore screening on two workers):
    each shows its own count, and afterwards the reporter is the one installed, not a pool's."""

    class Overlapping(StarvedBackendTestDouble):
        def __init__(self) -> None:
            super().__init__()
            self.second_started, self.first_done = threading.Event(), threading.Event()

        def behave(self, what, candidate, build_dir, attempt):
            if what == "first":
                assert self.second_started.wait(30)
            else:
                self.second_started.set()
                assert self.first_done.wait(30)
            return super().behave("ok", candidate, build_dir, attempt)

    double = Overlapping()
    pm = make_pm(double)
    first = double_jobs(tmp_path / "a", {"a1": "first"})
    second = double_jobs(tmp_path / "b", {"b1": "second"})
    recorder = Recorder()
    results: dict[str, list[BuildOutcome]] = {}

    def pool(name, jobs, then=None):
        results[name] = build(pm, jobs, tmp_path / name, workers=1)
        if then is not None:
            then.set()

    threads = [
        threading.Thread(target=pool, args=("a", first, double.first_done)),
        threading.Thread(target=pool, args=("b", second)),
    ]
    with progress.reporting(recorder):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert progress.current() is recorder

    assert [outcome.compile_pass for name in "ab" for outcome in results[name]] == [True, True]
    assert sorted(recorder.shown) == ["building 1/1 (a1)", "building 1/1 (b1)"]


def test_the_callers_mistakes_raise(make_pm, tmp_path):
    pm = make_pm(StarvedBackendTestDouble())
    (job,) = double_jobs(tmp_path, {"b1": "ok"})

    assert build(pm, [], tmp_path, workers=4) == []
    with pytest.raises(ValueError, match="unique"):
        build(pm, [job, job], tmp_path, workers=2)
    for key in ("", "../b1", "a/b", ".hidden"):
        with pytest.raises(ValueError, match="plain folder names"):
            build(pm, [BuildJob(key, job.candidate)], tmp_path, workers=2)


# ---------------------------------------------------------------------------------- build_all with nvcc

KERNEL = """\
__global__ void scale(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * FACTOR;
}

extern "C" void solve(const float* input, float* output, int N) {
    scale<<<(N + 255) / 256, 256>>>(input, output, N);
}
"""


def cuda_job(tmp_path: Path, key: str, text: str, folder: str | None = None) -> BuildJob:
    source = tmp_path / "src" / (folder or key) / "kernel.cu"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(text)
    return BuildJob(key, Candidate(path=str(source), backend="cuda", name=key))


@pytest.mark.nvcc
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
class TestWithNvcc:
    @pytest.fixture
    def pm(self, make_pm):
        return make_pm(kopt_cuda.plugin)

    @pytest.fixture
    def toolchain(self, tmp_path):
        return Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache"))

    def test_three_good_one_broken_in_order_then_cache_hits(self, pm, toolchain, tmp_path):
        jobs = [
            cuda_job(tmp_path, "b1", KERNEL.replace("FACTOR", "2.0f")),
            cuda_job(tmp_path, "b2", KERNEL.replace("FACTOR", "")),  # "in[i] * ;"
            cuda_job(tmp_path, "b3", KERNEL.replace("FACTOR", "3.0f")),
            cuda_job(tmp_path, "b4", KERNEL.replace("FACTOR", "4.0f")),
        ]
        plan = CompilePlan(2, "test")

        outcomes = build_all(pm, jobs, toolchain=toolchain, plan=plan, build_root=tmp_path / "builds")

        assert [outcome.key for outcome in outcomes] == ["b1", "b2", "b3", "b4"]
        good = [outcomes[0], outcomes[2], outcomes[3]]
        for outcome in good:
            assert outcome.compile_pass and outcome.error is None and not outcome.retried_serially
            assert outcome.artifact is not None and Path(outcome.artifact.path).is_file()
            assert outcome.artifact.source == jobs[int(outcome.key[1]) - 1].candidate.path
            assert not outcome.cache_hit and outcome.seconds > 0
            assert "ptxas info" in (tmp_path / "builds" / outcome.key / "build.log").read_text()
        assert len({outcome.artifact.cache_key for outcome in good if outcome.artifact}) == 3
        broken = outcomes[1]
        assert not broken.compile_pass and broken.artifact is None and not broken.retried_serially
        assert broken.error is not None and not is_resource_failure(broken.error)
        assert broken.error.startswith(f"{jobs[1].candidate.path}: nvcc could not build this file (exit")
        assert f"{jobs[1].candidate.path}(3): error: expected an expression" in broken.error

        # Built again, the same bytes are found by content, wherever the file lives now.
        again = [jobs[0], cuda_job(tmp_path, "b3_copy", KERNEL.replace("FACTOR", "3.0f"), folder="elsewhere")]
        first, copy = build_all(pm, again, toolchain=toolchain, plan=plan, build_root=tmp_path / "builds2")

        assert first.compile_pass and first.cache_hit and copy.compile_pass and copy.cache_hit
        assert first.artifact is not None and outcomes[0].artifact is not None
        assert first.artifact.cache_key == outcomes[0].artifact.cache_key
        assert copy.artifact is not None and outcomes[2].artifact is not None
        assert copy.artifact.path == outcomes[2].artifact.path
        assert copy.artifact.source == again[1].candidate.path

    def test_a_build_starved_of_memory_is_retried_alone(self, pm, tmp_path):
        """Real nvcc behind a wrapper that runs its first build (not ``--version``, not ``-M``) under a
        100 MB address-space limit: nvcc fails for lack of memory in the pool and builds on the retry."""
        nvcc = shutil.which(find_nvcc() or "nvcc")
        assert nvcc is not None
        marker = tmp_path / "limited-once"
        wrapper = tmp_path / "tools" / "nvcc"
        wrapper.parent.mkdir()
        wrapper.write_text(
            "#!/bin/sh\n"
            "# Test double around the real nvcc: the first build runs starved of memory.\n"
            'case " $* " in\n'
            '  *" --version "*|*" -M "*) ;;\n'
            f'  *) if mkdir "{marker}" 2>/dev/null; then ulimit -v 100000; fi ;;\n'
            "esac\n"
            f'exec "{nvcc}" "$@"\n'
        )
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        toolchain = Toolchain(arch="sm_90a", tools={"nvcc": str(wrapper)}, cache_dir=str(tmp_path / "cache"))
        job = cuda_job(tmp_path, "b1", KERNEL.replace("FACTOR", "5.0f"))

        (outcome,) = build_all(
            pm, [job], toolchain=toolchain, plan=CompilePlan(2, "test"), build_root=tmp_path / "builds"
        )

        assert marker.is_dir()  # the limited build did run
        assert outcome.retried_serially
        assert outcome.compile_pass and outcome.error is None and outcome.artifact is not None
        assert Path(outcome.artifact.path).is_file()
