"""Run folders and records for the step layer's in-process tests (tests/run/test_*_mutants.py).

A run folder is made by ``init_run`` and left as seed and ``iter open`` leave it, without their ncu
profiles and their timing: the state's noise threshold and best time are written in. The kernels are the
example PyTorch backend's, through ``Picky``, a backend plugin that takes them as they are except for a
file that says it does not build. Checking and timing is answered at the executor seam
(``kopt_core.bench.executor.Executor``) by ``RecordedExecutor``, with records built here as data: a
BenchResult per kernel, a PairedMeasurement per pairing, so that every median, every block and every
verdict is known exactly (the worker that makes such records is tested in tests/bench and
tests/test_harness_cpu.py; the loop through it in tests/run/test_loop_cpu.py)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import attrs

import kopt_example_backend
from kopt_core import hookimpl
from kopt_core.errors import KoptError, ValidationError
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BenchResult, KernelResources, TimingStats, to_data
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.records.paired import PairedBlock, PairedMeasurement
from kopt_core.records.state import Env
from kopt_core.run.candidates import write_candidates
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.store import RunStore

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"
N = 4096
M1, M2, M3 = "compute.loop_unrolling", "latency.launch_overhead_reduction", "latency.ilp"
METHODS = (M1, M2)  # none of them calls for a sanitizer
NO_BUILD = "# does not build"
SHARED = "# shared memory"
CACHED = "# from the build cache"

KERNEL = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""
BROKEN = "import torch\n\ndef solve(x, y, N:\n    pass\n"  # fails its static contract
UNBUILT = KERNEL + NO_BUILD + "\n"  # passes its contract, fails its build
RACY = KERNEL + SHARED + "\n"  # its build reports shared memory: racecheck applies


class Picky:
    """The example PyTorch backend under the name "picky", whose build fails for a file with NO_BUILD in
    it (a ValidationError, as a compiler error reaches kopt), and reports its one kernel's resources as
    ptxas would: no shared memory and no barrier (so no sanitizer applies), or 1 KiB of shared memory for
    a file with SHARED in it (racecheck applies); a file with CACHED in it comes from the build cache;
    each build takes ``compile_s``; ``needs_gpu`` as asked. Its ``kopt_bench`` (the hook a
    backend implements to measure in its own way) answers with the record ``bench`` when one is given."""

    name = "picky"

    def __init__(self, needs_gpu: bool = False, bench: BenchResult | None = None, compile_s: float = 0.0):
        self.needs_gpu = needs_gpu
        self.answer = bench  # what its kopt_bench answers (None: kopt's own worker benches)
        self.benched: list = []
        self.compile_s = compile_s  # how long a build takes
        self.compiled: list = []  # every candidate built, in the order the builds started

    @hookimpl
    def kopt_bench(self, request):
        if self.answer is None:
            return None
        self.benched.append(request)
        return attrs.evolve(self.answer, kernel=request.artifact.source)

    @hookimpl
    def kopt_register_backends(self, register):
        register(
            attrs.evolve(
                _registered(), name=self.name, needs_gpu=self.needs_gpu, priority=0, claims=("def solve(",)
            )
        )

    @hookimpl
    def kopt_probe(self):
        return attrs.evolve(kopt_example_backend.kopt_probe(), backend=self.name)

    @hookimpl
    def kopt_preflight(self, candidate):
        return attrs.evolve(kopt_example_backend.kopt_preflight(candidate), backend=self.name)

    @hookimpl
    def kopt_compile(self, candidate):
        import time

        self.compiled.append(candidate)
        time.sleep(self.compile_s)
        if NO_BUILD in Path(candidate.path).read_text():
            raise ValidationError(f"{candidate.path}: error: the test says it does not build")
        shared = 1024 if SHARED in Path(candidate.path).read_text() else 0
        resources = (KernelResources(name="solve", shared_bytes=shared, barriers=0),)
        return attrs.evolve(
            kopt_example_backend.kopt_compile(candidate),
            backend=self.name,
            resources=resources,
            cache_hit=CACHED in Path(candidate.path).read_text(),
        )


def _registered():
    infos = []
    kopt_example_backend.kopt_register_backends(infos.append)
    return infos[0]


def timing(median_ms: float, samples: Sequence[float] | None = None, mean_ms: float | None = None):
    """A kernel's timing whose median, mean and samples are what the test says (the mean differs from
    the median unless given)."""
    samples = tuple(samples) if samples is not None else (median_ms,) * 5
    return TimingStats(
        mode="per_launch",
        l2="cold",
        clock="host",
        launches_per_sample=1,
        n=len(samples),
        median_ms=median_ms,
        p95_ms=max(samples),
        mean_ms=mean_ms if mean_ms is not None else median_ms * 3 + 1,
        min_ms=min(samples),
        max_ms=max(samples),
        stddev_ms=0.1,
        cv=0.05,
        median_ci_rel=0.004,
        stop_reason="time budget",
        warmup_ms=1.0,
        warmup_launches=3,
        samples_ms=samples,
    )


def bench_record(
    kernel: str,
    median_ms: float | None = 1.0,
    *,
    status: str = "ok",
    correct: bool = True,
    valid: bool = True,
    samples: Sequence[float] | None = None,
    mean_ms: float | None = None,
    error: str | None = None,
    stage: str | None = None,
    violation: str | None = None,
    dims: dict | None = None,
) -> BenchResult:
    return BenchResult(
        kernel=kernel,
        backend="picky",
        status=status,
        correctness_pass=correct,
        timing_valid=valid,
        error=error,
        error_stage=stage,
        violation=violation,
        dims=dims if dims is not None else {"N": N},
        kernel_timing=timing(median_ms, samples, mean_ms) if median_ms is not None else None,
    )


def blocks(a_ms: Sequence[float], b_ms: Sequence[float]) -> tuple[PairedBlock, ...]:
    return tuple(
        PairedBlock(index=i, order="AB" if i % 2 == 0 else "BA", a_ms=a, b_ms=b)
        for i, (a, b) in enumerate(zip(a_ms, b_ms, strict=True))
    )


def pairing(a_ms: Sequence[float] = (), b_ms: Sequence[float] = (), **fields) -> PairedMeasurement:
    """A pairing's record with blocks of these per-launch medians (and fields such as status)."""
    return PairedMeasurement(a="a", b="b", mode="per_launch", blocks=blocks(a_ms, b_ms), **fields)


def speedup_blocks(ratio: float, count: int = 12, base: float = 1.0) -> tuple[list[float], list[float]]:
    """A's and B's block times where A takes ``ratio`` times as long as B, with a little spread."""
    b = [base * (1 + 0.001 * ((i * 7) % 5 - 2)) for i in range(count)]
    return [x * ratio for x in b], b


class RecordedExecutor:
    """An executor that answers with records: ``bench(request)`` from ``benches`` (the kernel's folder
    name -> a BenchResult, or a KoptError to raise), ``paired`` from ``pairings`` in turn (a
    PairedMeasurement or a KoptError). Every request is kept, in order: ("bench", (kernel folder name,)),
    ("paired", (A's source, B's source))."""

    def __init__(
        self,
        benches: dict[str, BenchResult | KoptError] | None = None,
        pairings: Sequence[PairedMeasurement | KoptError] = (),
        bench_s: float = 0.0,
    ):
        self.benches = dict(benches or {})
        self.bench_s = bench_s  # how long each bench takes
        self.benched: list = []  # each bench request
        self.pairings = list(pairings)
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.requests: list[tuple] = []  # each pairing's (a, b)
        self.plans: list = []  # each pairing's plan
        self.started = self.entered = self.closed = 0

    def __call__(self) -> RecordedExecutor:  # the ExecutorFactory: one executor per step
        self.entered += 1
        return self

    def start(self) -> None:
        self.started += 1

    def bench(self, request) -> BenchResult:
        import time

        name = Path(request.artifact.source).parent.name
        self.calls.append(("bench", (name,)))
        self.benched.append(request)
        time.sleep(self.bench_s)
        answer = self.benches[name]
        if isinstance(answer, KoptError):
            raise answer
        return attrs.evolve(answer, kernel=request.artifact.source)

    def paired(self, a, b, plan) -> PairedMeasurement:
        self.calls.append(("paired", (a.artifact.source, b.artifact.source)))
        self.requests.append((a, b))
        self.plans.append(plan)
        answer = self.pairings.pop(0)
        if isinstance(answer, KoptError):
            raise answer
        return attrs.evolve(answer, a=a.artifact.source, b=b.artifact.source)

    def close(self) -> None:
        self.closed += 1

    def __enter__(self) -> RecordedExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def new_run(pm, tmp_path: Path, *, baseline: str = KERNEL, backend: str = "picky") -> RunStore:
    """A run just initialised (backend ``backend``), with the example saxpy reference."""
    (tmp_path / "kernel.py").write_text(baseline)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend=backend, generation_allowed=True, attempts=1)))
    return init_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims={"N": N},
        env_path=tmp_path / "env.json",
        backend=backend,
    )


def opened_run(
    pm, tmp_path: Path, *, noise: float | None = 0.02, methods: Sequence[str] = METHODS, **state
) -> tuple[RunStore, Path]:
    """A run as seed and iter open leave it (best time 2.0 ms, the noise threshold ``noise``), with
    iterv1/methods.json selecting ``methods``."""
    store = new_run(pm, tmp_path)
    store.update(
        **{"run_status": "running", "best_metric_ms": 2.0, "noise_threshold": noise, **state},
    )
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="exact", evidence="test") for m in methods
    )
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="picky",
        numerics_mode="reference",
        bound="latency",
        budget={},
        selected=picked,
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return store, iterv1


def write_kernels(
    store: RunStore,
    iterv1: Path,
    branches: dict[str, str],
    ablations: dict[str, str] | None = None,
    methods: Sequence[str] = METHODS,
) -> None:
    """iterv1/branches/<id>/kernel.py, iterv1/ablations/<method>/kernel.py and candidates.json; the run's
    branch count becomes the number written."""
    if branches and len(branches) != store.load().branches:
        store.update(branches=len(branches))
    specs, ablation_specs = [], []
    for branch_id, code in branches.items():
        (iterv1 / "branches" / branch_id).mkdir(parents=True)
        (iterv1 / "branches" / branch_id / "kernel.py").write_text(code)
        specs.append(BranchSpec(id=branch_id, file=f"branches/{branch_id}/kernel.py", methods=tuple(methods)))
    for method, code in (ablations or {}).items():
        (iterv1 / "ablations" / method).mkdir(parents=True)
        (iterv1 / "ablations" / method / "kernel.py").write_text(code)
        ablation_specs.append(AblationSpec(method=method, file=f"ablations/{method}/kernel.py"))
    write_candidates(
        iterv1,
        Candidates(
            iteration=1,
            generator="test",
            methods=tuple(methods),
            branches=tuple(specs),
            ablations=tuple(ablation_specs),
        ),
    )


class Said:
    """A progress reporter (``kopt_core.progress.install``) that keeps every step's message."""

    def __init__(self):
        self.messages: list[str] = []

    def __call__(self, message: str):
        from contextlib import nullcontext

        self.messages.append(message)
        return nullcontext()
