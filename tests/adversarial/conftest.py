"""What the corpus tests share: the catalog, and each entry point where a time decides something (bench,
a pairing as the ablations and the promotion run it, explore with its promotion, a search trial), run
on a kernel of any backend."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kopt_core.bench.executor import PairedPlan, WorkerExecutor
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BenchOptions, BenchResult, to_data
from kopt_core.records.loop import BranchOutcome, BranchSpec, Candidates, ExploreRecord
from kopt_core.records.paired import PairedMeasurement
from kopt_core.records.state import Env
from kopt_core.run.candidates import write_candidates
from kopt_core.run.explore import explore_iteration
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.prepare import prepare_in_run
from kopt_core.steps.bench import bench_kernel, prepare, run_bench
from kopt_core.steps.search import SearchOutcome, search_kernel

HERE = Path(__file__).resolve().parent
CATALOG: dict[str, Any] = json.loads((HERE / "catalog.json").read_text())
REF = HERE / CATALOG["problem"]["ref"]
PLAN = PairedPlan(blocks=4, samples_per_block=5, seed=3)
BACKEND = {"cuda": "cuda", "triton": "triton", "torch": "pytorch"}
METHOD = "memory.vectorized_access"


def expected(cheat: dict, entry: str, form: str) -> str:
    """The reason a class must be caught with at ``entry`` in ``form``: its ``expected``, unless
    ``expected_at`` names another for that entry (where an earlier check of that entry sees it first)."""
    return cheat.get("expected_at", {}).get(entry, {}).get(form) or cheat["expected"][form]


class Entries:
    """The four entry points for kernels of one form, at ``dims`` with ``options``."""

    def __init__(self, pm, tmp_path: Path, form: str, dims: dict, options: BenchOptions, require_gpu: bool):
        self.pm, self.tmp, self.form, self.backend = pm, tmp_path, form, BACKEND[form]
        self.dims, self.options, self.require_gpu = dims, options, require_gpu
        self.honest = HERE / CATALOG["control"]["kernels"][form]

    def copy(self, source: Path, name: str) -> Path:
        folder = self.tmp / name
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / source.name
        shutil.copy(source, target)
        return target

    def bench(self, kernel: Path) -> BenchResult:
        return bench_kernel(
            self.pm, self.copy(kernel, "bench"), REF, self.dims, backend=self.backend, options=self.options
        )

    def _request(self, kernel: Path, name: str):
        prepared = prepare(
            self.pm,
            self.copy(kernel, name),
            REF,
            self.dims,
            backend=self.backend,
            require_gpu=self.require_gpu,
        )
        return prepared.request(self.options)

    def paired(self, kernel: Path) -> PairedMeasurement:
        """The honest control as A (the incumbent), ``kernel`` as B."""
        with WorkerExecutor() as executor:
            return executor.paired(self._request(self.honest, "a"), self._request(kernel, "b"), PLAN)

    def explore(self, kernel: Path) -> tuple[ExploreRecord, BranchOutcome, dict]:
        """A run whose baseline is the honest control, explored with ``kernel`` as branch b1 and the
        control again as b2: the record, b1's outcome, and explore.json as written."""
        run = self.tmp / "run"
        run.mkdir()
        baseline = self.copy(self.honest, "run")
        write_json(run / "env.json", to_data(Env(backend=self.backend, generation_allowed=True, attempts=1)))
        store = init_run(
            self.pm,
            baseline=baseline,
            ref=REF,
            dims=self.dims,
            env_path=run / "env.json",
            branches=2,
            backend=self.backend,
        )
        bench = run_bench(self.pm, prepare_in_run(self.pm, store.load(), "seed"), self.options)
        assert bench.status == "ok", bench.error
        write_json(store.run_dir / "baseline" / "bench.json", to_data(bench))
        store.update(run_status="running", best_metric_ms=bench.kernel_timing.median_ms, noise_threshold=0.02)
        iterv1 = iteration_dir(store.run_dir, 1)
        iterv1.mkdir()
        picked = Picked(id=METHOD, axis="memory", priority=1, numerics="exact", evidence="test")
        selection = Selection(
            iteration=1,
            arch="any",
            backend=self.backend,
            numerics_mode="reference",
            bound="memory",
            budget={},
            selected=(picked,),
        )
        write_json(iterv1 / "methods.json", to_data(selection))
        specs = []
        for branch_id, source in (("b1", kernel), ("b2", self.honest)):
            folder = iterv1 / "branches" / branch_id
            folder.mkdir(parents=True)
            shutil.copy(source, folder / source.name)
            specs.append(
                BranchSpec(id=branch_id, file=f"branches/{branch_id}/{source.name}", methods=(METHOD,))
            )
        write_candidates(
            iterv1, Candidates(iteration=1, generator="test", methods=(METHOD,), branches=tuple(specs))
        )
        record = explore_iteration(self.pm, store, 1, options=self.options, plan=PLAN)
        written = json.loads((iterv1 / "explore.json").read_text())
        return record, {b.id: b for b in record.branches}["b1"], written

    def search(self, kernel: Path, trials: int = 1) -> tuple[SearchOutcome, list[str]]:
        """A search of ``kernel``'s declared space: the outcome and each trial's detail."""
        outcome = search_kernel(
            self.pm,
            self.copy(kernel, "search"),
            REF,
            self.dims,
            out_dir=self.tmp / "out",
            trials=trials,
            progress=False,
            options=self.options,
            backend=self.backend,
        )
        trials_data = json.loads(outcome.trials_json.read_text())
        return outcome, [t.get("detail", "") for t in trials_data["trials"]]


@pytest.fixture
def entries(tmp_path):
    def make(pm, form: str, dims: dict, options: BenchOptions, require_gpu: bool) -> Entries:
        return Entries(pm, tmp_path, form, dims, options, require_gpu)

    return make
