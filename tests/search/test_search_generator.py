"""The search as a step and as a generator, on the CPU with the example PyTorch backend: the objective
(write, check, build, then check and time in one worker), the files it leaves, the search generator in a
run, and CUTLASS configurations as a space (listed and preflighted; never built here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import attrs
import optuna
import pytest

import kopt_core.generate.search as search_generator
import kopt_cuda.plugin
import kopt_cutlass.plugin
import kopt_example_backend
from kopt_core import hookimpl
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.generate import generate_in_run, generation_context
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BackendInfo, BenchOptions, BenchResult, TimingStats, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.search import TrialOutcome
from kopt_core.records.state import Env
from kopt_core.run.candidates import load_candidates
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.search.space import read_space
from kopt_core.search.study import PRIOR, run_study
from kopt_core.search.variants import DeclaredSpace, config_id, strip_variant, write_variant
from kopt_core.steps import search as search_step
from kopt_core.steps.search import (
    PRIOR_SEEDS_WITHOUT_TRIAL_BUDGET,
    prior_points,
    prior_seed_count,
    ranking_options,
    search_kernel,
    search_space,
    study_name_for,
)
from kopt_cutlass.search import CutlassGemmSpace, parse_cutlass_declaration

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
DATA = Path(__file__).resolve().parent / "data"
PROFILE = REPO / "tests" / "fixtures" / "h200" / "runs" / "vector_scale"
N = 1 << 14  # one thread for every kernel (below PyTorch's intra-op grain), as in tests/run/test_loop_cpu.py
DIMS = {"N": N}
FAST = BenchOptions(budget_s=0.2, warmup_ms=10.0, time_reference=False)

# Three valid points: CHUNK=16384 in one call (fast), CHUNK=256 in 64 calls (slower), and ALPHA=3.0,
# which computes the wrong thing and must fail correctness. CHUNK=256 with ALPHA=3.0 breaks the constraint.
SPACE_KERNEL = '''"""y += ALPHA * x in chunks of CHUNK elements."""

import torch

kopt_space = {"CHUNK": [256, 16384], "ALPHA": [2.0, 3.0]}
kopt_constraint = "ALPHA == 2.0 or CHUNK == 16384"
CHUNK = 256
ALPHA = 2.0


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, CHUNK):
        y[start : start + CHUNK].add_(x[start : start + CHUNK], alpha=ALPHA)
'''
FASTEST = {"CHUNK": 16384, "ALPHA": 2.0}
SLOWER = {"CHUNK": 256, "ALPHA": 2.0}
WRONG = {"CHUNK": 16384, "ALPHA": 3.0}


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend, search_generator)


@pytest.fixture
def files(tmp_path) -> Path:
    (tmp_path / "kernel.py").write_text(SPACE_KERNEL)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    return tmp_path


# --- the objective, with a stand-in worker ------------------------------------------------------------------


class FakeExecutor:
    """Records what the search asks of its one worker and answers with made-up records."""

    made: list[FakeExecutor] = []

    def __init__(self, answer):
        self.answer, self.started, self.closed, self.requests = answer, 0, 0, []
        FakeExecutor.made.append(self)

    def start(self) -> None:
        self.started += 1

    def bench(self, request):
        self.requests.append(request)
        return self.answer(request)

    def close(self) -> None:
        self.closed += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _record(request, status="ok", median=1.0, correct=True, stage=None, error=None) -> BenchResult:
    timing = TimingStats(
        mode="per_launch",
        l2="cold",
        clock="host",
        launches_per_sample=1,
        n=10,
        median_ms=median,
        p95_ms=median,
        mean_ms=median,
        min_ms=median,
        max_ms=median,
        stddev_ms=0.0,
        cv=0.0,
        median_ci_rel=0.0,
        stop_reason="time budget",
        warmup_ms=0.0,
        warmup_launches=0,
    )
    return BenchResult(
        kernel=request.artifact.path,
        backend="pytorch",
        status=status,
        correctness_pass=correct,
        timing_valid=status == "ok",
        error=error,
        error_stage=stage,
        kernel_timing=timing if status == "ok" else None,
    )


def _by_chunk(request) -> BenchResult:
    """CHUNK=16384 takes 1 ms, CHUNK=256 takes 5 ms; ALPHA=3.0 fails its correctness check."""
    text = Path(request.artifact.path).read_text()
    if "ALPHA = 3.0" in text:
        return _record(request, "failed", correct=False, stage="correctness", error="seed 0: y: 16384 wrong")
    return _record(request, median=1.0 if "CHUNK = 16384" in text else 5.0)


def test_one_worker_started_once_checks_and_times_every_trial_with_the_loop_options(pm, files):
    FakeExecutor.made.clear()
    outcome = search_kernel(
        pm,
        files / "kernel.py",
        files / "ref.py",
        DIMS,
        out_dir=files / "out",
        sampler="grid",
        progress=False,
        executor=lambda: FakeExecutor(_by_chunk),
    )
    (runner,) = FakeExecutor.made
    assert (runner.started, runner.closed) == (1, 1)
    # the three trials with the loop's options, then the one contender (CHUNK=16384, the fastest by
    # five times) again with bench's sampling before it is named the best
    assert [r.options for r in runner.requests] == [LOOP_OPTIONS] * 3 + [ranking_options(LOOP_OPTIONS)]
    assert Path(runner.requests[-1].artifact.path).parent.name == config_id(FASTEST)
    assert {r.reference for r in runner.requests} == {str((files / "ref.py").resolve())}
    assert {json.dumps(r.dims) for r in runner.requests} == {json.dumps(DIMS)}
    benched = {Path(r.artifact.path).parent.name for r in runner.requests}
    assert benched == {config_id(FASTEST), config_id(SLOWER), config_id(WRONG)}
    best = outcome.best
    assert best is not None and best.config == FASTEST and best.value_ms == 1.0
    assert [t.config for t in outcome.top()] == [FASTEST, SLOWER]
    (failed,) = [t for t in outcome.result.trials if t.status == "failed"]
    assert failed.config == WRONG and failed.value_ms is None
    assert failed.detail == "correctness: seed 0: y: 16384 wrong"


def test_a_worker_that_cannot_use_the_device_is_no_verdict_and_the_configuration_is_retried(pm, files):
    def no_device(request):
        return _record(request, "error", stage="device", error="CUDA driver: no device")

    with pytest.raises(HardwareError, match="could not use the device: CUDA driver: no device"):
        search_kernel(
            pm,
            files / "kernel.py",
            files / "ref.py",
            DIMS,
            out_dir=files / "out",
            sampler="grid",
            progress=False,
            executor=lambda: FakeExecutor(no_device),
        )
    FakeExecutor.made.clear()
    outcome = search_kernel(
        pm,
        files / "kernel.py",
        files / "ref.py",
        DIMS,
        out_dir=files / "out",
        sampler="grid",
        progress=False,
        executor=lambda: FakeExecutor(_by_chunk),
    )
    assert outcome.result.interrupted == 1  # the first trial, requeued and evaluated on resume
    assert sorted(t.config_id for t in outcome.result.trials) == sorted(
        config_id(c) for c in (FASTEST, SLOWER, WRONG)
    )
    assert outcome.result.evaluated_now == 3


def test_a_variant_that_breaks_the_contract_is_a_failed_trial_never_benched(pm, files):
    text = SPACE_KERNEL.replace('"ALPHA": [2.0, 3.0]', '"ALPHA": [2.0, 3.0], "SOLVE": ["solve", "other"]')
    text = text.replace("ALPHA = 2.0\n", 'ALPHA = 2.0\nSOLVE = "solve"\n')
    (files / "kernel.py").write_text(text)
    space = read_space(files / "kernel.py")

    class Renaming(DeclaredSpace):
        """SOLVE=other renames the entry point, which the backend's preflight refuses."""

        def write(self, config, folder):
            kernel = write_variant(self.space, config, folder)
            if config["SOLVE"] == "other":
                kernel.write_text(kernel.read_text().replace("def solve(", "def other("))
            return kernel

    FakeExecutor.made.clear()
    outcome = search_kernel(
        pm,
        files / "kernel.py",
        files / "ref.py",
        DIMS,
        out_dir=files / "out",
        sampler="grid",
        progress=False,
        space=Renaming(space),
        executor=lambda: FakeExecutor(_by_chunk),
    )
    contract = [t for t in outcome.result.trials if t.detail.startswith("contract: ")]
    assert len(contract) == 3 and all(t.config["SOLVE"] == "other" for t in contract)
    assert "no top-level `def solve(...)`" in contract[0].detail
    (runner,) = FakeExecutor.made
    # only the SOLVE=solve variants reached the worker, and the fastest once more to be named the best
    assert len(runner.requests) == 3 + 1


def test_a_kernel_that_declares_no_space_is_exit_4_with_how_to_declare_one(pm, tmp_path):
    shutil.copy(KERNELS / "saxpy.py", tmp_path / "kernel.py")
    with pytest.raises(ConfigError) as error:
        search_kernel(pm, tmp_path / "kernel.py", KERNELS / "saxpy_ref.py", DIMS, out_dir=tmp_path / "o")
    assert error.value.exit_code == 4
    assert error.value.message.endswith("no kopt_space and no @triton.autotune kernel: nothing to search")
    hint = error.value.hint or ""
    assert "// kopt:space NAME = [v1, v2]" in hint
    assert 'kopt_space = {"NAME": [v1, v2]}' in hint
    assert "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn" in hint
    assert not (tmp_path / "o").exists()


class GpuTorch:
    """The example backend as if it needed a GPU."""

    @hookimpl
    def kopt_register_backends(self, register):
        register(
            BackendInfo(
                name="gputorch", suffixes=(".py",), summary="test", needs_gpu=True, claims=("def solve(",)
            )
        )

    @hookimpl
    def kopt_probe(self):
        return kopt_example_backend.kopt_probe()

    @hookimpl
    def kopt_preflight(self, candidate):
        return attrs.evolve(kopt_example_backend.kopt_preflight(candidate), backend="gputorch")

    @hookimpl
    def kopt_compile(self, candidate):
        self.compiled.append(candidate.path)
        return attrs.evolve(kopt_example_backend.kopt_compile(candidate), backend="gputorch")

    def __init__(self):
        self.compiled: list[str] = []


def test_without_a_gpu_the_static_part_runs_first_then_exit_3(make_pm, files, monkeypatch):
    monkeypatch.setattr(search_step, "detect_gpus", lambda: ([], "nvidia-smi is not on PATH"))
    backend = GpuTorch()
    pm = make_pm(backend)
    FakeExecutor.made.clear()
    with pytest.raises(HardwareError) as error:
        search_kernel(
            pm,
            files / "kernel.py",
            files / "ref.py",
            DIMS,
            out_dir=files / "out",
            progress=False,
            executor=lambda: FakeExecutor(_by_chunk),
        )
    assert error.value.exit_code == 3
    assert error.value.message == (
        "no GPU: nvidia-smi is not on PATH. kernel.py declares 4 configurations; it passed its contract "
        "checks and builds for sm_90a; run kopt search on a machine with an NVIDIA GPU to check and time them"
    )
    assert backend.compiled == [str((files / "kernel.py").resolve())]  # the kernel as given was built
    (runner,) = FakeExecutor.made
    assert runner.started == 0 and runner.requests == []
    assert not (files / "out").exists()
    # a broken reference is still exit 4 on that machine: the static checks come first
    (files / "ref.py").write_text("def buffers(N):\n    return {}\n")
    with pytest.raises(ConfigError):
        search_kernel(pm, files / "kernel.py", files / "ref.py", DIMS, out_dir=files / "out", progress=False)


# --- the search for real: one bench worker, the loop's checks -----------------------------------------------


def test_a_grid_search_finds_the_fastest_records_the_wrong_one_failed_and_writes_the_best(pm, files):
    outcome = search_kernel(
        pm,
        files / "kernel.py",
        files / "ref.py",
        DIMS,
        out_dir=files / "out",
        sampler="grid",
        progress=False,
        options=FAST,
    )
    out = files / "out"
    assert outcome.result.stop_reason == "space exhausted"
    assert outcome.result.rejected == 0 and outcome.result.evaluated_now == 3
    assert [t.config for t in outcome.top()] == [FASTEST, SLOWER]
    fast, slow = outcome.top()
    assert fast.value_ms is not None and slow.value_ms is not None
    assert slow.value_ms > 3 * fast.value_ms  # 64 calls against one
    (failed,) = [t for t in outcome.result.trials if t.status == "failed"]
    assert failed.config == WRONG
    assert failed.detail.startswith("correctness: seed 0: y: 16384/16384 elements outside atol=1e-06")
    # every trial's variant, configuration and bench record
    for trial in outcome.result.trials:
        folder = out / "trials" / trial.config_id
        assert json.loads((folder / "config.json").read_text())["config"] == trial.config
        bench = json.loads((folder / "bench.json").read_text())
        assert bench["kernel"] == str(folder / "kernel.py")
        assert bench["correctness_pass"] is (trial.status == "ok")
    best = json.loads((out / "best.json").read_text())
    assert best["config"] == FASTEST and best["config_id"] == config_id(FASTEST)
    assert best["median_ms"] == fast.value_ms
    assert best["variant"] == str(out / "trials" / config_id(FASTEST) / "kernel.py")
    assert [row["config"] for row in best["top"]] == [FASTEST, SLOWER]
    assert (out / "best.py").read_text() == Path(best["variant"]).read_text()
    assert "CHUNK = 16384\nALPHA = 2.0\n" in (out / "best.py").read_text()
    document = json.loads((out / "trials.json").read_text())
    assert sorted(t["config_id"] for t in document["trials"]) == sorted(
        config_id(c) for c in (FASTEST, SLOWER, WRONG)
    )
    assert document["best"] == [config_id(FASTEST), config_id(SLOWER)]
    assert outcome.storage == f"sqlite:///{out / 'search.db'}"
    # the best variant is searched as the same space, in the same study
    again = search_space(pm, out / "best.py", DIMS)
    assert again.space.space_id == outcome.space_id
    assert study_name_for(again, DIMS, files / "ref.py", "pytorch") == outcome.study_name


def test_batches_built_together_give_the_same_search_through_the_real_worker(pm, files, monkeypatch):
    """--compile-jobs 3: the three configurations are written, checked and built as one batch, then
    timed one by one in the one worker; the verdicts are those of one at a time."""
    from kopt_core.steps import build_pool

    built: list[list[str]] = []
    real = build_pool.build_all

    def recording(pm_, jobs, **kwargs):
        built.append([job.key for job in jobs])
        return real(pm_, jobs, **kwargs)

    monkeypatch.setattr(search_step, "build_all", recording)
    outcome = search_kernel(
        pm,
        files / "kernel.py",
        files / "ref.py",
        DIMS,
        out_dir=files / "out",
        sampler="grid",
        progress=False,
        options=FAST,
        compile_jobs=3,
    )
    # one batch of the three, then the contender rebuilt (a cache hit) to be timed again and named
    assert [sorted(batch) for batch in built] == [
        sorted(config_id(c) for c in (FASTEST, SLOWER, WRONG)),
        [config_id(FASTEST)],
    ]
    assert outcome.result.evaluated_now == 3 and outcome.result.stop_reason == "space exhausted"
    assert [t.config for t in outcome.top()] == [FASTEST, SLOWER]
    (failed,) = [t for t in outcome.result.trials if t.status == "failed"]
    assert failed.config == WRONG and failed.detail.startswith("correctness: seed 0: y: 16384/16384")
    for trial in outcome.result.trials:
        assert (files / "out" / "trials" / trial.config_id / "bench.json").is_file()


# --- reading a space back from a variant --------------------------------------------------------------------


def test_a_cu_variant_reads_back_as_the_space_and_study_of_its_kernel(make_pm, tmp_path):
    cuda = make_pm(kopt_cuda.plugin)
    source = search_space(cuda, DATA / "sgemm_tiled.cu", {"M": 64, "N": 64, "K": 64})
    config = next(source.space.valid_points())
    variant = write_variant(source.space, config, tmp_path / "v")
    assert "#define" in variant.read_text()
    assert strip_variant(variant.read_text()) == (DATA / "sgemm_tiled.cu").read_text()
    back = search_space(cuda, variant, {"M": 64, "N": 64, "K": 64})
    assert back.space.space_id == source.space.space_id
    assert back.identity == source.identity
    assert study_name_for(back, {"M": 64}, DATA / "sgemm_tiled.cu", "cuda") == study_name_for(
        source, {"M": 64}, DATA / "sgemm_tiled.cu", "cuda"
    )
    assert study_name_for(back, {"M": 128}, DATA / "sgemm_tiled.cu", "cuda") != study_name_for(
        source, {"M": 64}, DATA / "sgemm_tiled.cu", "cuda"
    )


# --- the generator in a run ---------------------------------------------------------------------------------


def _run(pm, tmp_path: Path, *, branches: int, methods: tuple[str, ...] = ()):
    (tmp_path / "kernel.py").write_text(SPACE_KERNEL)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=1)))
    store = init_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims=DIMS,
        env_path=tmp_path / "env.json",
        branches=branches,
    )
    store.update(run_status="running", best_metric_ms=1.0)
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    for name in ("roofline.json", "ncu_top.json"):  # what the brief quotes
        shutil.copy(PROFILE / name, iterv1 / name)
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="exact", evidence="test") for m in methods
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


def test_the_search_generator_writes_the_fastest_configurations_as_branches(pm, tmp_path, monkeypatch):
    monkeypatch.setenv("KOPT_PLUGINS", "pytorch")  # what the generator loads to build and check
    monkeypatch.setattr(search_step, "shared_executor", lambda: FakeExecutor(_by_chunk))
    store, iterv1 = _run(pm, tmp_path, branches=2)
    result = generate_in_run(pm, store, 1, generator="search", options={"sampler": "grid", "trials": "8"})
    assert result.status == "written", result.message
    assert (
        "3 configurations evaluated now, 3 in the study (1 failed; stopped: space exhausted)"
        in result.message
    )
    candidates = load_candidates(
        iterv1, iteration=1, methods=(), backend_suffixes=(".py",), branches_expected=2
    )
    assert result.candidates == candidates
    assert candidates.generator == "search" and candidates.methods == () and candidates.ablations == ()
    assert [(b.id, b.file, b.methods, b.hyperparameters) for b in candidates.branches] == [
        ("b1", "branches/b1/kernel.py", (), FASTEST),
        ("b2", "branches/b2/kernel.py", (), SLOWER),
    ]
    search = iterv1 / "search"
    for branch, config in (("b1", FASTEST), ("b2", SLOWER)):
        kernel = iterv1 / "branches" / branch / "kernel.py"
        assert kernel.read_text() == (search / "trials" / config_id(config) / "kernel.py").read_text()
        assert json.loads((kernel.parent / "config.json").read_text())["config"] == config
    assert (search / "search.db").is_file() and (search / "best.py").is_file()
    assert str(iterv1 / "candidates.json") in result.paths


def test_fewer_passing_configurations_than_branches_are_written_as_they_are(pm, tmp_path, monkeypatch):
    monkeypatch.setattr(search_step, "shared_executor", lambda: FakeExecutor(_by_chunk))
    store, iterv1 = _run(pm, tmp_path, branches=3)
    context = generation_context(pm, store.load(), 1, generator="search", options={"sampler": "grid"})
    result = search_generator.generate(context, pm=pm)
    assert result.status == "written"
    assert result.message.endswith(
        "wrote the 2 fastest as b1..b2; only 2 configurations passed for 3 branches"
    )
    candidates = load_candidates(
        iterv1, iteration=1, methods=(), backend_suffixes=(".py",), branches_expected=None
    )
    assert [b.hyperparameters for b in candidates.branches] == [FASTEST, SLOWER]
    assert not (iterv1 / "branches" / "b3").exists()


def test_no_passing_configuration_is_a_failed_generation(pm, tmp_path, monkeypatch):
    def all_wrong(request):
        return _record(request, "failed", correct=False, stage="correctness", error="y: all wrong")

    monkeypatch.setattr(search_step, "shared_executor", lambda: FakeExecutor(all_wrong))
    store, iterv1 = _run(pm, tmp_path, branches=2)
    context = generation_context(pm, store.load(), 1, generator="search", options={"sampler": "grid"})
    result = search_generator.generate(context, pm=pm)
    assert result.status == "failed"
    assert "no configuration passed every check" in result.message
    assert not (iterv1 / "candidates.json").exists() and not (iterv1 / "branches").exists()


def test_a_search_iteration_with_methods_selected_fails_naming_them(pm, tmp_path):
    store, iterv1 = _run(pm, tmp_path, branches=2, methods=("memory.vectorized_access", "latency.fusion"))
    context = generation_context(pm, store.load(), 1, generator="search")
    result = search_generator.generate(context, pm=pm)
    assert result.status == "failed"
    assert result.message == (
        "the search generator cannot implement methods memory.vectorized_access, latency.fusion: a "
        "parameter search adds no method, so the selection must be empty for a search iteration "
        "(iteration 1's methods.json selects 2)"
    )
    assert not (iterv1 / "search").exists() and not (iterv1 / "candidates.json").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"trials": "0"}, "option trials '0' is not a positive integer"),
        ({"trials": "many"}, "option trials 'many' is not a positive integer"),
        ({"time_budget_s": "-1"}, "option time_budget_s '-1' is not a positive number of seconds"),
        ({"sampler": "bayes"}, "option sampler 'bayes' is not one of auto, near, tpe, grid, random, cmaes"),
        ({"storage": "search.db"}, "option storage 'search.db' is not a database URL"),
        ({"trails": "3"}, "generator 'search' has no option trails"),
    ],
)
def test_bad_generator_options_are_refused_before_the_run(pm, options, message):
    from kopt_core.generate import generator_for

    with pytest.raises(ConfigError) as error:
        generator_for(pm, "search", options)
    assert error.value.message.startswith(message)


def test_the_generator_is_registered_through_its_entry_point():
    import importlib.metadata

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "kopt_core" / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["kopt"]["kopt_search"] == "kopt_core.generate.search"
    points = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="kopt")}
    if "kopt_search" not in points:
        pytest.skip("kopt-core was installed before the entry point was added (pip install -e kopt_core)")
    assert points["kopt_search"] == "kopt_core.generate.search"


# --- CUTLASS configurations as a space ----------------------------------------------------------------------

CUTLASS_REF = REPO / "examples" / "cutlass" / "gemm_sm90_tma_ws" / "ref.py"
GEMM = {"M": 4096, "N": 4096, "K": 4096}


@pytest.fixture
def cutlass(make_pm):
    """The CUDA and CUTLASS backends: a file with the CUTLASS line is CUTLASS's, a plain .cu CUDA's."""
    return make_pm(kopt_cuda.plugin, kopt_cutlass.plugin)


def _declared_gemm(
    tmp_path: Path, line: str = "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn"
) -> Path:
    kernel = tmp_path / "gemm.cu"
    kernel.write_text(
        line + "\n" + (REPO / "examples" / "cutlass" / "gemm_sm90_tma_ws" / "kernel.cu").read_text()
    )
    return kernel


def test_cutlass_configurations_are_a_space_whose_variants_pass_preflight(make_pm, tmp_path):
    pytest.importorskip("cutlass_library")
    from kopt_core.backends import BackendRegistry
    from kopt_core.records import Candidate
    from kopt_core.reference import load_reference
    from kopt_core.steps.bench import check_candidate
    from kopt_cutlass.configs import enumerate_sm90_gemms, filter_for_problem, render_kernel

    pm = make_pm(kopt_cuda.plugin, kopt_cutlass.plugin)
    source = search_space(pm, _declared_gemm(tmp_path), GEMM)
    fitting = filter_for_problem(enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn"), 4096, 4096, 4096)
    assert len(fitting) > 0
    assert source.space.names == ("config",)
    assert source.space.choices["config"] == tuple(config.id for config in fitting)
    assert source.space.size == len(fitting)
    chosen = fitting[len(fitting) // 2]
    kernel = source.write({"config": chosen.id}, tmp_path / "trial")
    assert kernel == tmp_path / "trial" / "kernel.cu"
    assert kernel.read_text() == render_kernel(chosen).rstrip("\n") + (
        f"\n\n// kopt search: CUTLASS configuration {chosen.id} of\n"
        "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn\n"
    )
    assert BackendRegistry.from_plugins(pm).detect(kernel).name == "cutlass"
    report = check_candidate(
        pm, Candidate(path=str(kernel), backend="cutlass"), GEMM, load_reference(CUTLASS_REF)
    )
    assert report.interface is not None
    assert [(p.name, p.kind) for p in report.interface.params] == [
        ("A", "buffer"),
        ("B", "buffer"),
        ("C", "buffer"),
        ("M", "scalar"),
        ("N", "scalar"),
        ("K", "scalar"),
    ]
    assert report.warnings == ()
    written = json.loads((tmp_path / "trial" / "config.json").read_text())
    assert written["cutlass"]["id"] == chosen.id and written["kind"] == "cutlass_gemm"
    # the written kernel keeps the declaration, so it is searched again as the same space
    again = search_space(pm, kernel, GEMM)
    assert again.space.space_id == source.space.space_id and again.identity == source.identity
    assert source.label({"config": chosen.id}) == f"{chosen.id}: {chosen.label}"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32", "gemm.cu:1: missing layout"),
        (
            "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn tile=128",
            "gemm.cu:1: unknown key 'tile'",
        ),
        ("// kopt:cutlass_gemm a=f16 a=bf16 b=f16 c=f16 acc=f32 layout=tn", "gemm.cu:1: a is given twice"),
        (
            "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn level",
            "gemm.cu:1: `level` is not key=value",
        ),
        (
            "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn level=x",
            "gemm.cu:1: level='x' is not a positive",
        ),
    ],
)
def test_the_cutlass_declaration_is_read_strictly(cutlass, tmp_path, line, message):
    with pytest.raises(ConfigError) as error:
        search_space(cutlass, _declared_gemm(tmp_path, line), GEMM)
    assert error.value.message.startswith(str(tmp_path / message))


def test_a_cutlass_search_needs_m_n_k_and_one_declaration(cutlass, tmp_path):
    kernel = _declared_gemm(tmp_path)
    assert parse_cutlass_declaration(kernel.read_text()) == {
        "a": "f16",
        "b": "f16",
        "c": "f16",
        "acc": "f32",
        "layout": "tn",
    }
    with pytest.raises(ConfigError, match=r"needs the problem's M, N and K as positive integers, got K=None"):
        search_space(cutlass, kernel, {"M": 4096, "N": 4096})
    kernel.write_text(kernel.read_text() + "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=nt\n")
    with pytest.raises(ConfigError, match=r"2 `kopt:cutlass_gemm` lines \(lines 1, \d+\); keep one"):
        search_space(cutlass, kernel, GEMM)


# --- the search's prior -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trials", "seeds"),
    [(None, PRIOR_SEEDS_WITHOUT_TRIAL_BUDGET), (0, 0), (1, 1), (2, 2), (3, 2), (6, 3), (48, 24)],
)
def test_the_prior_takes_half_a_trial_budget(trials, seeds):
    assert prior_seed_count(trials) == seeds


def test_a_cutlass_space_gives_its_diverse_best_ranked_configurations_and_a_declared_space_none(
    cutlass, tmp_path
):
    pytest.importorskip("cutlass_library")
    from kopt_cutlass.configs import seed_order

    source = search_space(cutlass, _declared_gemm(tmp_path), {"M": 4096, "N": 4096, "K": 4096})
    assert isinstance(source, CutlassGemmSpace) and source.problem == (4096, 4096, 4096)
    points = prior_points(source, prior_seed_count(6))
    assert points == tuple(
        {"config": config.id} for config in seed_order(source.configs, 4096, 4096, 4096)[:3]
    )
    assert prior_points(source, 0) == ()
    chosen = [source.config_of(point) for point in points]
    assert len({(config.tile_shape, config.kernel_schedule) for config in chosen}) == 3
    assert all("KernelTmaWarpSpecialized" in config.kernel_schedule for config in chosen)
    assert not any(config.tile_scheduler for config in chosen)  # 4 waves of tiles: no stream-K
    # the study over the CUTLASS space evaluates them first, whatever the sampler would have picked
    calls: list[str] = []

    def objective(config: dict) -> TrialOutcome:
        calls.append(config_id(config))
        return TrialOutcome("ok", 1.0)

    result = run_study(
        source.space,
        objective,
        storage=optuna.storages.InMemoryStorage(),
        study_name="c",
        trials=6,
        first=points,
        progress=False,
    )
    assert calls[:3] == [config_id(point) for point in points]
    assert [t.seeded for t in result.trials] == [PRIOR] * 3 + [""] * 3
    # a declared space has no prior
    assert prior_points(search_space(cutlass, DATA / "sgemm_tiled.cu", {"M": 64, "N": 64, "K": 64}), 4) == ()


def test_search_kernel_evaluates_a_sources_prior_first_and_records_it(pm, tmp_path):
    (tmp_path / "kernel.py").write_text(SPACE_KERNEL)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")

    class Prior(DeclaredSpace):
        """A declared space with a prior that ranks the wrong and the slow configurations first."""

        def prior(self, count):
            return (WRONG, SLOWER, FASTEST)[:count]

    def search(trials: int) -> tuple:
        FakeExecutor.made.clear()
        outcome = search_kernel(
            pm,
            tmp_path / "kernel.py",
            tmp_path / "ref.py",
            DIMS,
            out_dir=tmp_path / "out",
            trials=trials,
            progress=False,
            space=Prior(read_space(tmp_path / "kernel.py")),
            executor=lambda: FakeExecutor(_by_chunk),
        )
        (runner,) = FakeExecutor.made
        return outcome, [Path(r.artifact.path).parent.name for r in runner.requests]

    outcome, benched = search(2)  # prior_seed_count(2) == 2

    assert benched == [config_id(WRONG), config_id(SLOWER), config_id(SLOWER)]  # and SLOWER named
    assert [(t.config, t.seeded) for t in outcome.result.trials] == [(WRONG, "prior"), (SLOWER, "prior")]
    assert outcome.to_data()["best"]["seeded"] == "prior"
    document = json.loads((tmp_path / "out" / "trials.json").read_text())
    assert [t["seeded"] for t in document["trials"]] == ["prior", "prior"]

    outcome, benched = search(3)  # resumed: the third configuration is the sampler's, not a seed

    assert benched == [config_id(FASTEST)] * 2  # evaluated, then timed again and named
    assert [t.seeded for t in outcome.result.trials] == ["prior", "prior", ""]
