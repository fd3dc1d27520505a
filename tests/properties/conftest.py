"""Shared by the property tests: runs of the example PyTorch backend made as ``kopt init`` and ``kopt
iter open`` leave them, and ``Replay``, an executor that answers from records built as data.

Runs are real: ``init_run`` checks the baseline and the reference, the iteration folder holds the H200's
profile of an elementwise kernel (tests/fixtures/h200/runs/vector_scale), and every step checks and builds
the kernels it is given with the example backend. Only the one part that meets the machine, the bench
worker that checks and times kernels, answers from data: each kernel file says what its bench would
measure in a last comment line (``# replay: ms=1.2 mean=1.5``), so that two kernels can be given exactly
the same median, a mean that orders them otherwise, or a timing the worker calls invalid. A kernel without
that line is not the Replay's to answer (a KeyError names it).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import Phase, settings

import kopt_core.generate.agent
import kopt_example_backend
from kopt_core.bench.executor import PairedPlan
from kopt_core.bench.paired import block_order
from kopt_core.errors import KoptError
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BenchResult, PairedBlock, PairedMeasurement, TelemetrySample, to_data
from kopt_core.records.bench import TimingStats
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.records.state import Env, RooflineHistoryEntry
from kopt_core.run.candidates import write_candidates
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.store import RunStore
from kopt_core.steps.select import read_evidence

# scripts/planted_bugs.py wants a failure, not its smallest example: no shrinking, no saved examples
if os.environ.get("KOPT_PLANTED_BUG"):
    settings.register_profile(
        "planted", phases=(Phase.explicit, Phase.generate), database=None, print_blob=False
    )
    settings.load_profile("planted")

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
PROFILE = REPO / "tests" / "fixtures" / "h200" / "runs" / "vector_scale"
N = 4096
METHODS = ("memory.vectorized_access", "latency.launch_overhead_reduction")
PLAN = PairedPlan(blocks=12, seed=7)
NOISE = 0.01  # the runs' noise threshold, as a seed's A/A pairing would have measured it

KERNEL = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""
BROKEN = "import torch\n\n\ndef solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:\n    y.add_(\n"


def kernel(ms: float, **facts: Any) -> str:
    """A kernel whose replayed bench measures ``ms`` (its median); ``facts``: mean (ms, default ``ms``),
    correct (default yes), timed (the timing valid, default yes), status (default ok)."""
    words = " ".join(f"{key}={value}" for key, value in {"ms": ms, **facts}.items())
    return f"{KERNEL}# replay: {words}\n"


def facts_of(path: str | Path) -> dict[str, str]:
    found = re.search(r"^# replay: (.*)$", Path(path).read_text(), re.MULTILINE)
    if found is None:
        raise KeyError(f"{path} has no '# replay:' line: the Replay does not know what it would measure")
    return dict(word.split("=", 1) for word in found.group(1).split())


def timing(median: float, mean: float | None = None) -> TimingStats:
    mean = median if mean is None else mean
    samples = (median * 0.99, median, median * 1.01)
    return TimingStats(
        mode="per_launch",
        l2="cold",
        clock="host",
        launches_per_sample=1,
        n=len(samples),
        median_ms=median,
        p95_ms=max(samples),
        mean_ms=mean,
        min_ms=min(samples),
        max_ms=max(samples),
        stddev_ms=0.0,
        cv=0.0,
        median_ci_rel=0.0,
        stop_reason="time budget",
        warmup_ms=1.0,
        warmup_launches=1,
        samples_ms=samples,
    )


def replayed_bench(path: str) -> BenchResult:
    """The bench record of the kernel at ``path``, from its ``# replay:`` line."""
    facts = facts_of(path)
    correct = facts.get("correct", "yes") == "yes"
    timed = facts.get("timed", "yes") == "yes"
    status = facts.get("status", "ok" if correct and timed else "failed")
    failed = {} if status == "ok" else {"error": "replayed failure", "error_stage": "correctness"}
    if correct and not timed:
        failed = {"error": "the timing is not stable", "error_stage": "timing"}
    median = float(facts["ms"])
    return BenchResult(
        kernel=path,
        backend="pytorch",
        status=status,  # type: ignore[arg-type]
        correctness_pass=correct,
        timing_valid=timed,
        kernel_timing=timing(median, float(facts.get("mean", median))) if correct else None,
        **failed,
    )


def block_times(ms: float, plan: PairedPlan) -> np.ndarray:
    """One side's block times: ``ms`` with 0.2% scatter drawn from the plan's seed and ``ms`` alone, so
    that a kernel's blocks are the same whichever side it is timed on."""
    rng = np.random.default_rng([plan.seed, int(round(ms * 1e9))])
    return ms * (1 + rng.normal(0.0, 0.002, size=plan.blocks))


@attrs.define
class Replay:
    """An executor (``kopt_core.bench.executor.Executor``) whose records are data: ``bench`` answers with
    the kernel's ``replayed_bench``; ``paired`` with blocks of each side's ``ms`` (0.2% scatter, the
    plan's block order, steady telemetry). ``fail``: the error its next bench or pairing raises instead,
    as a worker that lost its device would. ``calls`` keeps what was asked: ("bench", kernel) and
    ("paired", a's kernel, b's kernel). ``answers``: pairings to answer with, in order, before those."""

    fail: KoptError | None = None
    fail_paired: KoptError | None = None  # the error its pairings raise, its benches answering
    answers: list[PairedMeasurement] = attrs.field(factory=list)  # given pairings, answered first
    calls: list[tuple[str, ...]] = attrs.field(factory=list)

    def __call__(self) -> Replay:  # the executor factory of explore and ablate
        return self

    def start(self) -> None:
        pass

    def bench(self, request) -> BenchResult:
        self.calls.append(("bench", request.artifact.source))
        if self.fail is not None:
            raise self.fail
        return replayed_bench(request.artifact.source)

    def paired(self, a, b, plan: PairedPlan) -> PairedMeasurement:
        self.calls.append(("paired", a.artifact.source, b.artifact.source))
        if self.fail is not None or self.fail_paired is not None:
            raise self.fail or self.fail_paired  # type: ignore[misc]
        if self.answers:
            return self.answers.pop(0)
        return paired_measurement(
            float(facts_of(a.artifact.source)["ms"]),
            float(facts_of(b.artifact.source)["ms"]),
            plan,
            a=a.artifact.source,
            b=b.artifact.source,
        )

    def close(self) -> None:
        pass

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def paired_measurement(
    a_ms: float, b_ms: float, plan: PairedPlan = PLAN, *, a: str = "a", b: str = "b"
) -> PairedMeasurement:
    order = block_order(plan.blocks, plan.seed)
    steady = (TelemetrySample(at_s=0.0, sm_clock_mhz=1980.0, throttle_reasons=0, other_processes=0),)
    blocks = tuple(
        PairedBlock(index=i, order=order[i], a_ms=float(x), b_ms=float(y), telemetry=steady)
        for i, (x, y) in enumerate(zip(block_times(a_ms, plan), block_times(b_ms, plan), strict=True))
    )
    return PairedMeasurement(a=a, b=b, seed=plan.seed, blocks=blocks, telemetry_available=True)


# ------------------------------------------------------------------------------------------------ runs


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend, kopt_core.generate.agent)


def new_run(
    pm, folder: Path, *, branches: int = 2, baseline_ms: float = 1.0, iterations: int = 3
) -> RunStore:
    """A run as ``kopt seed`` leaves it, its baseline's numbers given as data (best_metric_ms, the noise
    threshold ``NOISE``), and its iteration 1 open with METHODS selected, as ``kopt iter open`` and
    ``kopt select`` leave it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text(kernel(baseline_ms))
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "ref.py")
    write_json(folder / "env.json", to_data(Env(backend="pytorch", generation_allowed=True)))
    store = init_run(
        pm,
        baseline=folder / "kernel.py",
        ref=folder / "ref.py",
        dims={"N": N},
        env_path=folder / "env.json",
        branches=branches,
        iterations=iterations,
        compile_jobs="1",
    )
    store.update(
        run_status="seeded",
        best_metric_ms=baseline_ms,
        noise_threshold=NOISE,
        noise_evidence=str(store.run_dir / "baseline" / "noise_aa.json"),
    )
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    for name in ("roofline.json", "ncu_top.json", "profile.json", "best_input.sass"):
        shutil.copy(PROFILE / name, iterv1 / name)
    roofline, _ = read_evidence(iterv1 / "roofline.json", iterv1 / "ncu_top.json")
    state = store.load()
    store.update(
        run_status="running",
        roofline_history=(*state.roofline_history, RooflineHistoryEntry.of(1, roofline)),
    )
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="exact", evidence="test") for m in METHODS
    )
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="pytorch",
        numerics_mode="reference",
        bound=roofline.bound,
        budget={},
        selected=picked,
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return store


def write_iteration(store: RunStore, branches: list[str], ablations: dict[str, str] | None = None) -> Path:
    """Iteration 1's kernels, b1..bK in ``branches``' order and ablations by method, and its
    candidates.json; returns the iteration folder."""
    iterv1 = iteration_dir(store.run_dir, 1)
    ablations = ablations or {}
    for number, code in enumerate(branches, 1):
        (iterv1 / "branches" / f"b{number}").mkdir(parents=True, exist_ok=True)
        (iterv1 / "branches" / f"b{number}" / "kernel.py").write_text(code)
    for method, code in ablations.items():
        (iterv1 / "ablations" / method).mkdir(parents=True, exist_ok=True)
        (iterv1 / "ablations" / method / "kernel.py").write_text(code)
    write_candidates(
        iterv1,
        Candidates(
            iteration=1,
            generator="test",
            methods=METHODS,
            branches=tuple(
                BranchSpec(id=f"b{n}", file=f"branches/b{n}/kernel.py", methods=METHODS)
                for n in range(1, len(branches) + 1)
            ),
            ablations=tuple(AblationSpec(method=m, file=f"ablations/{m}/kernel.py") for m in ablations),
        ),
    )
    return iterv1
