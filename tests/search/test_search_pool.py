"""A search on a pool of two workers (the gpus executor's, on the CPU with the example backend): the
trials are spread over both workers at once, each trial names the worker that timed it, and the best is
named by timing the contenders again on the ranking worker alone; on one worker too, the best is named by
its contenders timed again with bench's sampling, which may reorder them."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import attrs
import pytest

import kopt_example_backend
from kopt_core.bench.executor import WorkerExecutor
from kopt_core.bench.pool import HostGpuPool, SingleWorkerPool
from kopt_core.records import BenchOptions
from kopt_core.steps.search import search_kernel

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"
CHUNKS = '''"""y += 2 x in chunks of CHUNK elements: the fewer the chunks, the faster."""

import torch

kopt_space = {"CHUNK": [64, 128, 256, 1024, 4096, 16384]}
CHUNK = 64


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, CHUNK):
        y[start : start + CHUNK].add_(x[start : start + CHUNK], alpha=2.0)
'''


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend)


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "chunks.py").write_text(CHUNKS)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    return tmp_path


class CountingPool(HostGpuPool):
    """The two-GPU pool, noting how many benches ran at the same moment. Its second worker reports every
    time a hundred times too fast (a GPU unlike the first): any trial it timed would look fastest, so
    only a best named from the ranking worker's times can be the right one."""

    def __init__(self, devices):
        super().__init__(devices)
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def worker(self, index):
        inner, pool = super().worker(index), self

        class Noting:
            def bench(self, request):
                with pool.lock:
                    pool.now += 1
                    pool.most = max(pool.most, pool.now)
                try:
                    result = inner.bench(request)
                    if index == 1 and result.kernel_timing is not None:
                        timing = attrs.evolve(
                            result.kernel_timing, median_ms=result.kernel_timing.median_ms / 100
                        )
                        result = attrs.evolve(result, kernel_timing=timing)
                    return result
                finally:
                    with pool.lock:
                        pool.now -= 1

            def __getattr__(self, name):
                return getattr(inner, name)

        return Noting()


def test_a_search_on_two_workers_spreads_its_trials_and_ranks_its_best_on_one(pm, work):
    pool = CountingPool(("0", "1"))
    outcome = search_kernel(
        pm,
        work / "chunks.py",
        work / "ref.py",
        {"N": 1 << 14},
        out_dir=work / "out",
        trials=6,
        sampler="grid",
        pool=pool,
        progress=False,
        compile_jobs=1,
    )
    trials = outcome.result.trials
    ranking, other = outcome.slots
    assert len(trials) == 6 and all(t.status == "ok" for t in trials), [t.detail for t in trials]
    assert {t.worker for t in trials} == {ranking, other}  # both workers timed trials
    assert pool.most == 2  # at the same time
    assert outcome.ranking and {r.worker for r in outcome.ranking} == {ranking}
    best = json.loads((work / "out" / "best.json").read_text())
    assert best["ranked_on"] == ranking and best["timed_on"] == ranking
    assert best["median_ms"] == outcome.best.value_ms
    assert best["config_id"] in {r.config_id for r in outcome.ranking}
    assert best["config"] == {"CHUNK": 16384}  # one vectorised call beats every loop, on any worker
    fastest_in_study = outcome.result.best(1)[0]
    assert fastest_in_study.worker == other  # the second worker's times look faster: never compared


class ReorderingPool(SingleWorkerPool):
    """One worker whose times depend on how it is asked to time, as a GPU's can: with the study's short
    sampling CHUNK=4096 looks 2% faster than CHUNK=16384, with bench's sampling 16384 is 10% faster.
    Every other configuration is five times slower either way. Notes each request's options."""

    STUDY = {4096: 1.00, 16384: 1.02}
    BENCH = {4096: 1.10, 16384: 1.00}

    def __init__(self):
        super().__init__(WorkerExecutor)
        self.asked: list[tuple[int, float, float]] = []  # (CHUNK, warm-up ms, budget s)

    def worker(self, index):
        inner, pool = super().worker(index), self

        class Reordering:
            def bench(self, request):
                result = inner.bench(request)
                config = json.loads((Path(request.artifact.source).parent / "config.json").read_text())
                chunk = config["config"]["CHUNK"]
                options = request.options
                pool.asked.append((chunk, options.warmup_ms, options.budget_s))
                times = pool.BENCH if options.budget_s >= BenchOptions().budget_s else pool.STUDY
                if result.kernel_timing is not None:
                    timing = attrs.evolve(result.kernel_timing, median_ms=times.get(chunk, 5.0))
                    result = attrs.evolve(result, kernel_timing=timing)
                return result

            def __getattr__(self, name):
                return getattr(inner, name)

        return Reordering()


def test_a_search_on_one_worker_names_its_best_from_its_contenders_timed_as_bench_times(pm, work):
    pool = ReorderingPool()
    outcome = search_kernel(
        pm,
        work / "chunks.py",
        work / "ref.py",
        {"N": 1 << 14},
        out_dir=work / "out",
        trials=6,
        sampler="grid",
        pool=pool,
        progress=False,
    )
    (slot,) = outcome.slots
    assert outcome.result.best(1)[0].config == {"CHUNK": 4096}  # the study's own fastest
    # the contenders, within 5% of the study's fastest, timed again with bench's sampling; nothing else
    bench = BenchOptions()
    assert sorted(c for c, warmup, budget in pool.asked if budget == bench.budget_s) == [4096, 16384]
    assert all(warmup == bench.warmup_ms for _, warmup, budget in pool.asked if budget == bench.budget_s)
    assert len(pool.asked) == 6 + 2
    assert {r.worker for r in outcome.ranking} == {slot}
    assert outcome.best.config == {"CHUNK": 16384}
    best = json.loads((work / "out" / "best.json").read_text())
    assert best["config"] == {"CHUNK": 16384} and best["ranked_on"] == slot
    assert best["median_ms"] == 1.00 and best["search_median_ms"] == 1.02
    assert best["ranked_with"] == {"warmup_ms": bench.warmup_ms, "budget_s": bench.budget_s}
    # the list keeps the contenders first by their bench times, then the study's others by its own
    assert [row["config"]["CHUNK"] for row in best["top"]][:2] == [16384, 4096]
    assert [row["median_ms"] for row in best["top"]][:3] == [1.00, 1.10, 5.0]
