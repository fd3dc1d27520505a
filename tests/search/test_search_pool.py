"""A search on a pool of two workers (the gpus executor's, on the CPU with the example backend): the
trials are spread over both workers at once, each trial names the worker that timed it, and the best is
named by timing the leaders again on the ranking worker alone; the same search on one worker names its
best from its own times."""

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


def test_a_search_on_one_worker_names_its_best_from_its_own_times(pm, work):
    outcome = search_kernel(
        pm,
        work / "chunks.py",
        work / "ref.py",
        {"N": 1 << 14},
        out_dir=work / "out",
        trials=3,
        sampler="grid",
        pool=SingleWorkerPool(WorkerExecutor),
        progress=False,
    )
    assert len({t.worker for t in outcome.result.trials}) == 1
    assert outcome.ranking == ()
    assert json.loads((work / "out" / "best.json").read_text())["ranked_on"] is None
