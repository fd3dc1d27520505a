"""A run whose iteration 1 is open and selected, as `kopt seed`, `kopt iter open` and `kopt select` leave
it, on the CPU with the example PyTorch backend (the way tests/run/test_loop_cpu.py builds one).

The baseline is checked and timed for real once per session (its bench.json carries the contract the
brief quotes); iterv1's profile documents are the ones `kopt iter open` wrote for examples/cuda/vector_scale
on the H200 (tests/fixtures/h200/runs/vector_scale), an elementwise kernel like this saxpy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest

import kopt_core.generate.agent
import kopt_core.generate.command
import kopt_example_backend
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BenchOptions, BenchResult, to_data
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.records.state import Env
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.prepare import prepare_in_run
from kopt_core.run.store import RunStore
from kopt_core.steps.bench import run_bench

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
PROFILE = REPO / "tests" / "fixtures" / "h200" / "runs" / "vector_scale"
N = 1 << 14
METHODS = ("memory.vectorized_access", "latency.launch_overhead_reduction")
EVIDENCE = {
    "memory.vectorized_access": "memory_throughput_pct 92.1 >= 60",
    "latency.launch_overhead_reduction": "duration_us 4.2 < 10",
}

CHUNKED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, 256):
        y[start : start + 256].add_(x[start : start + 256], alpha=2.0)
"""
VECTORISED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend, kopt_core.generate.agent, kopt_core.generate.command)


def _files(tmp: Path) -> Path:
    (tmp / "kernel.py").write_text(CHUNKED)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp / "ref.py")
    write_json(tmp / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=1)))
    return tmp


@pytest.fixture(scope="session")
def baseline_bench(tmp_path_factory) -> BenchResult:
    """The baseline checked and timed once, in a run of its own."""
    from kopt_core.plugins import get_plugin_manager

    folder = _files(tmp_path_factory.mktemp("bench"))
    pm = get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
    store = init_run(
        pm, baseline=folder / "kernel.py", ref=folder / "ref.py", dims={"N": N}, env_path=folder / "env.json"
    )
    prepared = prepare_in_run(pm, store.load(), "seed")
    bench = run_bench(pm, prepared, BenchOptions(seeds=(0,), warmup_ms=5, budget_s=0.1))
    assert bench.status == "ok", bench.error
    return bench


@attrs.frozen
class OpenedRun:
    store: RunStore
    iterv1: Path
    methods: tuple[str, ...]
    k: int

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir


def open_run(pm, tmp_path: Path, bench: BenchResult, *, branches: int = 3, methods=METHODS) -> OpenedRun:
    folder = _files(tmp_path)
    store = init_run(
        pm,
        baseline=folder / "kernel.py",
        ref=folder / "ref.py",
        dims={"N": N},
        env_path=folder / "env.json",
        branches=branches,
    )
    write_json(store.run_dir / "baseline" / "bench.json", to_data(bench))
    store.update(run_status="running", best_metric_ms=bench.kernel_timing.median_ms)
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    for name in ("roofline.json", "ncu_top.json", "profile.json", "best_input.sass"):
        shutil.copy(PROFILE / name, iterv1 / name)
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="bitwise_preserving", evidence=EVIDENCE[m])
        for m in methods
    )
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="pytorch",
        numerics_mode="reference",
        bound="memory",
        budget={"compute": 1, "memory": 1, "latency": 1},
        selected=picked,
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return OpenedRun(store=store, iterv1=iterv1, methods=tuple(methods), k=branches)


@pytest.fixture
def make_run(pm, tmp_path, baseline_bench):
    """make_run(branches=3, methods=METHODS): a run whose iteration 1 is open and selected."""
    return lambda **options: open_run(pm, tmp_path, baseline_bench, **options)


@pytest.fixture
def opened(make_run) -> OpenedRun:
    return make_run()


@pytest.fixture
def write_kernels():
    """write_kernels(run, code=VECTORISED): what an agent writes for the run's iteration 1."""
    return lambda run, code=VECTORISED: write_candidates_for(run.iterv1, run.k, run.methods, code)


def write_candidates_for(iterv1: Path, k: int, methods=METHODS, code: str = VECTORISED) -> Candidates:
    """What an agent writes: k branches, one ablation per method, candidates.json."""
    from kopt_core.run.candidates import write_candidates

    branches = []
    for n in range(1, k + 1):
        (iterv1 / "branches" / f"b{n}").mkdir(parents=True, exist_ok=True)
        (iterv1 / "branches" / f"b{n}" / "kernel.py").write_text(code)
        branches.append(BranchSpec(id=f"b{n}", file=f"branches/b{n}/kernel.py", methods=methods))
    ablations = []
    for method in methods:
        (iterv1 / "ablations" / method).mkdir(parents=True, exist_ok=True)
        (iterv1 / "ablations" / method / "kernel.py").write_text(CHUNKED)
        ablations.append(AblationSpec(method=method, file=f"ablations/{method}/kernel.py"))
    candidates = Candidates(
        iteration=1, generator="test agent", methods=methods, branches=branches, ablations=ablations
    )
    write_candidates(iterv1, candidates)
    return candidates
