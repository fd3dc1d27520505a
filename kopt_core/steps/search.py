"""``kopt search``: find the fastest configuration of the tunables a kernel declares, with every check of
the harness applied to every configuration.

A kernel declares its space. Its backend reads it first (``kopt_search_space``, kopt_core/hookspecs.py:
Triton's ``@triton.autotune`` list, or for a CUTLASS GEMM one line naming the problem kind whose CUTLASS
configurations are the space, ``// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn``); otherwise
the core does (``kopt_core.search.variants.declared_space``): ``// kopt:space`` lines in a ``.cu`` file, a
``kopt_space`` dict in a ``.py`` file.

``search_kernel`` walks the space with an Optuna study (``kopt_core.search.study``). A source with a prior
(the CUTLASS one: its best-ranked configurations for the problem) starts a fresh study with
``prior_seed_count`` of them, evaluated before the sampler proposes anything (each trial's ``seeded``
says ``prior``); a resumed study is not seeded again. Every trial writes the variant under
``out_dir/trials/<config id>/``, checks its static contract, builds it through the backend (its build
cache may answer), then checks it against the reference and times it in ONE bench worker kept for the
whole study, with the loop's options (``LOOP_OPTIONS``). A configuration passes only when the worker's
record is ok, correct and validly timed; its value is the kernel's median in ms. Everything else is a
failed trial with the reason (a contract problem, the compiler's first error line, the check that
failed). Nothing is carried from one trial to the next except builds.

The study is stored in ``sqlite:///<out_dir>/search.db`` unless a storage URL is given, under a name
made of the space's id and a digest of what the times depend on (the kernel without its tunables'
values, the dims, the reference, the backend): running the same search again continues it (a killed
search loses nothing and evaluates no configuration twice), and a changed kernel, reference or problem
starts a new study. The best is then named by the contenders (each worker's fastest and its trials
within 5% of it) timed again, one by one, on one worker with bench's sampling (``ranking_options``), so
that best.json's median is what ``kopt bench`` of ``best.<ext>`` reports. At the end:
``trials.csv``/``trials.json`` (every evaluated configuration), ``best.json`` and ``best.<ext>`` (the
fastest passing variant).

Order of failures, as for ``kopt bench``: the space and the kernel as given (its declared defaults) are
checked and built first, so a machine without a GPU still shows those checks (exit 4 for a bad kernel,
space, reference or dims); then a missing tool or GPU is exit 3.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import frozen

from kopt_core import progress as display
from kopt_core.backends import BackendRegistry, backend_hooks
from kopt_core.bench.executor import shared_executor
from kopt_core.bench.pool import RANKING, Leases, SingleWorkerPool, WorkerPool
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.hardware import detect_gpus
from kopt_core.jsonio import write_json
from kopt_core.records import BenchOptions, BenchRequest, Candidate, Toolchain, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.search import (
    DEFAULT_SAMPLER,
    Config,
    SamplerName,
    SearchSource,
    Space,
    TrialOutcome,
    TrialRecord,
)
from kopt_core.records.versions import BEST_SCHEMA_VERSION
from kopt_core.search.promotion import contenders, fastest_passing, first_error_line, judge
from kopt_core.search.space import SPACE_HINT
from kopt_core.search.variants import DeclaredSpace, config_id
from kopt_core.steps.bench import BENCH_FILE, check_candidate, static_contract, target_arch
from kopt_core.steps.build_pool import BuildJob, CompilePlan, build_all, plan_compile_jobs

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager
    from kopt_core.search.study import StudyResult

SEARCH_DB = "search.db"
TRIALS_DIR = "trials"
BEST_FILE = "best.json"
TOP = 5  # configurations listed in best.json and shown at the end
PRIOR_SEEDS_WITHOUT_TRIAL_BUDGET = 4  # seeds of a search bounded by time (or not at all)

NO_SPACE_HINT = (
    "declare the tunables in the kernel: in a .cu file `// kopt:space NAME = [v1, v2]` lines (each read "
    'as a macro), in a .py file a module-level `kopt_space = {"NAME": [v1, v2]}` (each name also a '
    "module-level assignment), or for a CUTLASS GEMM `// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 "
    "layout=tn`"
)


# --- the space as the search sees it ------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None


def search_space(
    pm: PluginManager, path: str | Path, dims: Mapping[str, Any], *, backend: str | None = None
) -> SearchSource:
    """The space ``path`` declares, as the search walks it: what its backend (``backend``, else the one
    that claims the file) reads itself, a CUTLASS GEMM declaration or an autotune list, else the core's
    reading, ``// kopt:space`` lines (also in a variant kopt wrote: its added ``#define`` lines are read
    past) or ``kopt_space`` (``BackendHooks.search_space``). ConfigError (exit 4) with how to declare one
    when it declares none."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"kernel file {path} does not exist", hint="pass the path of your .cu or .py kernel"
        )
    text = _read(path)
    registry = BackendRegistry.from_plugins(pm)
    name = backend or registry.detect(path).name
    candidate = Candidate(path=str(path), backend=name)
    try:
        return registry.hooks(name).search_space(candidate, text, dict(dims))
    except ConfigError as exc:
        if exc.hint == SPACE_HINT:  # it declares nothing: say every way to declare, CUTLASS's included
            raise ConfigError(f"{exc.message}: nothing to search", hint=NO_SPACE_HINT) from None
        raise


def prior_seed_count(trials: int | None) -> int:
    """How many of a prior's configurations a fresh study evaluates first: half a trial budget (at least
    2, at most the budget), so the sampler keeps the other half; ``PRIOR_SEEDS_WITHOUT_TRIAL_BUDGET``
    when the search has no trial budget (a time budget, or a grid run to its end)."""
    if trials is None:
        return PRIOR_SEEDS_WITHOUT_TRIAL_BUDGET
    return min(trials, max(2, trials // 2))


def prior_points(source: SearchSource, count: int) -> tuple[Config, ...]:
    """The first ``count`` configurations ``source``'s prior would try (a ``prior(count)`` method, as
    kopt_cutlass's GEMM space has); none for a source without one (declared CUDA, Triton or Python
    spaces)."""
    prior = getattr(source, "prior", None)
    return tuple(prior(count)) if callable(prior) and count > 0 else ()


def study_name_for(source: SearchSource, dims: Mapping[str, Any], reference: str | Path, backend: str) -> str:
    """``search-<space id>-<digest>``: the digest covers the kernel without its tunables' values, the
    dims, the reference file and the backend, so the same search resumes its study and another does not
    reuse its times."""
    try:
        reference_bytes = Path(reference).read_bytes()
    except OSError:
        reference_bytes = b""
    context = {
        "kernel": hashlib.sha256(source.identity.encode()).hexdigest(),
        "dims": {name: dims[name] for name in sorted(dims)},
        "reference": hashlib.sha256(reference_bytes).hexdigest(),
        "backend": backend,
    }
    digest = hashlib.sha256(json.dumps(context, sort_keys=True).encode()).hexdigest()[:10]
    return f"search-{source.space.space_id}-{digest}"


def default_storage(out_dir: str | Path) -> str:
    return f"sqlite:///{Path(out_dir).resolve() / SEARCH_DB}"


# --- the outcome ------------------------------------------------------------------------------------------


@frozen
class SearchOutcome:
    """What a search found: the study's trials, the fastest passing configuration (None when none
    passed) and the files written."""

    kernel: str
    backend: str
    arch: str
    dims: dict[str, Any]
    out_dir: Path
    storage: str
    study_name: str
    space_id: str
    space_size: int
    result: StudyResult
    labels: dict[str, str]  # config id -> one line for people
    trials_csv: Path
    trials_json: Path
    best_json: Path | None = None
    best_file: Path | None = None
    executor: str = "local"
    slots: tuple[str, ...] = ()  # the pool's workers; slots[0] ranked
    # the contenders timed again on the ranking worker with bench's sampling (``_ranked``)
    ranking: tuple[TrialRecord, ...] = ()

    @property
    def best(self) -> TrialRecord | None:
        found = self.top(1)
        return found[0] if found else None

    def top(self, k: int = TOP) -> tuple[TrialRecord, ...]:
        """The ``k`` fastest passing configurations: the contenders by the ranking worker's times
        (``ranking``), then the study's other passing configurations by the study's own times."""
        ranked = fastest_passing(self.ranking, k)
        timed_again = {record.config_id for record in self.ranking}
        others = [r for r in self.result.best(len(self.result.trials)) if r.config_id not in timed_again]
        return (ranked + tuple(others))[:k]

    def variant(self, record: TrialRecord) -> Path:
        """The kernel file of an evaluated configuration."""
        return self.out_dir / TRIALS_DIR / record.config_id / f"kernel{Path(self.kernel).suffix}"

    def to_data(self) -> dict[str, Any]:
        """The --json result."""
        result = self.result
        return {
            "kernel": self.kernel,
            "backend": self.backend,
            "arch": self.arch,
            "dims": dict(self.dims),
            "out_dir": str(self.out_dir),
            "storage": self.storage,
            "study_name": self.study_name,
            "space_id": self.space_id,
            "space_size": self.space_size,
            "sampler": result.sampler,
            "stop_reason": result.stop_reason,
            "evaluated": len(result.trials),
            "evaluated_now": result.evaluated_now,
            "failures": result.failures,
            "rejected": result.rejected,
            "duplicates": result.duplicates,
            "interrupted": result.interrupted,
            "elapsed_s": result.elapsed_s,
            "trials_per_minute": result.trials_per_minute,
            "executor": self.executor,
            "workers": list(self.slots),
            "ranked_on": self.slots[0] if self.ranking else None,
            "best": None if self.best is None else _row(self.best, self.labels, self.variant(self.best)),
            "top": [_row(record, self.labels, self.variant(record)) for record in self.top()],
            "best_file": None if self.best_file is None else str(self.best_file),
            "best_json": None if self.best_json is None else str(self.best_json),
            "trials_csv": str(self.trials_csv),
            "trials_json": str(self.trials_json),
        }


def _study_median(result: StudyResult, config_id: str) -> float | None:
    """The median the study itself measured for ``config_id`` (before the ranking timed it again)."""
    return next((t.value_ms for t in result.trials if t.config_id == config_id), None)


def _row(record: TrialRecord, labels: Mapping[str, str], variant: Path) -> dict[str, Any]:
    return {
        "config_id": record.config_id,
        "config": dict(record.config),
        "median_ms": record.value_ms,
        "trial": record.number,
        "label": labels.get(record.config_id, ""),
        "variant": str(variant),
        "seeded": record.seeded,
        "worker": record.worker,
    }


# --- one trial -----------------------------------------------------------------------------------------


ExecutorFactory = Callable[[], AbstractContextManager[Any]]


class _Objective:
    """One trial: write, check, build, then check and time on a free worker of the study's pool. With a
    ``batch_size`` above 1 the engine hands it a batch of proposals first (``prefetch``): their variants
    are written, checked and built together (the compile pool, or where the pool builds), then each is
    timed alone as before. With several workers (``workers``) the engine calls it from that many threads,
    each trial taking whichever worker is free; the outcome names the worker's slot."""

    def __init__(
        self,
        pm: PluginManager,
        source: SearchSource,
        *,
        backend: str,
        arch: str,
        reference_path: str,
        reference: Any,
        dims: dict[str, Any],
        out_dir: Path,
        options: BenchOptions,
        pool: WorkerPool,
        build_root: Path,
        plan: CompilePlan | None = None,
    ):
        self.pm, self.source, self.backend, self.arch = pm, source, backend, arch
        self.reference_path, self.reference, self.dims = reference_path, reference, dims
        self.out_dir, self.options, self.pool, self.build_root = out_dir, options, pool, build_root
        self.plan = plan or CompilePlan(1, "one trial at a time")
        self.batch_size = self.plan.workers
        self.leases = Leases(pool)
        self.workers = len(self.leases)
        self.ready: dict[str, TrialOutcome | Any] = {}  # config id -> its failure, or its BuildOutcome

    def prefetch(self, configs: list[Config]) -> None:
        """Write, check and build ``configs`` at once (the compile pool, ``plan``'s workers, or the pool's
        own builds); ``__call__`` then times each without building it again."""
        jobs = []
        for config in configs:
            identifier = config_id(config)
            failed, candidate = self._checked(config, identifier)
            if failed is not None:
                self.ready[identifier] = failed
            else:
                jobs.append(BuildJob(key=identifier, candidate=candidate))
        if jobs:
            toolchain = Toolchain(arch=self.arch)

            def local(batch: Sequence[BuildJob]) -> list[Any]:
                return build_all(
                    self.pm, batch, toolchain=toolchain, plan=self.plan, build_root=self.build_root
                )

            builds = self.pool.build_all(jobs, local, toolchain=toolchain, build_root=self.build_root)
            self.ready.update({job.key: build for job, build in zip(jobs, builds, strict=True)})

    def _checked(self, config: Config, identifier: str) -> tuple[TrialOutcome | None, Candidate]:
        kernel = self.source.write(config, self.out_dir / TRIALS_DIR / identifier)
        candidate = Candidate(path=str(kernel), backend=self.backend, name=identifier)
        try:
            check_candidate(self.pm, candidate, self.dims, self.reference)
        except ConfigError as exc:
            return TrialOutcome("failed", detail=f"contract: {first_error_line(exc.message)}"), candidate
        return None, candidate

    def request(self, artifact: Any) -> BenchRequest:
        return BenchRequest(
            artifact=artifact, reference=self.reference_path, dims=self.dims, options=self.options
        )

    def __call__(self, config: Config) -> TrialOutcome:
        identifier = config_id(config)
        if identifier not in self.ready:  # not prefetched: the engine asks one at a time
            self.prefetch([config])
        build = self.ready.pop(identifier)
        if isinstance(build, TrialOutcome):
            return build
        if not build.compile_pass or build.artifact is None:
            return TrialOutcome("failed", detail=f"compile: {first_error_line(build.error)}")
        with self.leases.take() as (index, worker):
            result = worker.bench(self.request(build.artifact))
        write_json(self.out_dir / TRIALS_DIR / identifier / BENCH_FILE, to_data(result))
        return attrs.evolve(judge(result), worker=self.pool.slots[index])


# --- naming the best: the contenders timed again as bench times, on one worker ----------------------


def ranking_options(options: BenchOptions) -> BenchOptions:
    """How the contenders are timed before the best is named: the study's checks (``options``: seeds,
    tolerances, L2 policy, timeout) with bench's warm-up and sampling, so that the best's median is the
    one ``kopt bench`` of its file reports (docs/search.md, "Naming the best")."""
    bench = BenchOptions()
    return attrs.evolve(
        options,
        warmup_ms=bench.warmup_ms,
        budget_s=bench.budget_s,
        rel_precision=bench.rel_precision,
        min_samples=bench.min_samples,
        max_samples=bench.max_samples,
    )


def _ranked(objective: _Objective, result: StudyResult, options: BenchOptions) -> tuple[TrialRecord, ...]:
    """The study's contenders (``kopt_core.search.promotion.contenders``: each worker's fastest and its
    trials within ``CONTENDER_MARGIN`` of it) timed again one by one on the pool's ranking worker with
    ``options``. Each comes back as its trial's record with the ranking worker's time (or its failure
    there)."""
    leaders = {record.config_id: record for record in contenders(result.trials, TOP)}
    if not leaders:
        return ()
    objective.prefetch([dict(record.config) for record in leaders.values()])
    slot = objective.pool.slots[RANKING]
    ranked = []
    count = f"the {len(leaders)} leading configurations" if len(leaders) > 1 else "the leading configuration"
    with display.step(f"timing {count} again as bench times, on {slot}"):
        for identifier, record in leaders.items():
            build = objective.ready.pop(identifier)
            if isinstance(build, TrialOutcome):
                outcome = build
            elif not build.compile_pass or build.artifact is None:
                outcome = TrialOutcome("failed", detail=f"compile: {first_error_line(build.error)}")
            else:
                request = attrs.evolve(objective.request(build.artifact), options=options)
                outcome = judge(objective.pool.worker(RANKING).bench(request))
            ranked.append(
                attrs.evolve(
                    record,
                    status=outcome.status,
                    value_ms=outcome.value_ms,
                    detail=outcome.detail,
                    worker=slot,
                )
            )
    return tuple(ranked)


# --- the search ---------------------------------------------------------------------------------------


def search_kernel(
    pm: PluginManager,
    kernel: str | Path,
    ref: str | Path,
    dims: Mapping[str, Any],
    *,
    out_dir: str | Path,
    trials: int | None = None,
    time_budget_s: float | None = None,
    sampler: SamplerName = DEFAULT_SAMPLER,
    storage: str | None = None,
    seed: int = 0,
    backend: str | None = None,
    space: SearchSource | Space | None = None,
    progress: bool = True,
    options: BenchOptions | None = None,
    executor: ExecutorFactory | None = None,
    on_warning: Callable[[str], None] | None = None,
    compile_jobs: str | int = "auto",
    pool: WorkerPool | None = None,
    join: bool = False,
    rank_options: BenchOptions | None = None,
) -> SearchOutcome:
    """Search ``kernel``'s declared space (or ``space``) for the fastest configuration that passes every
    check against ``ref`` at ``dims``; see the module docstring. ``trials`` is the study's budget in
    total, across resumes; ``time_budget_s`` this call's. ``options`` defaults to the loop's
    (``kopt_core.records.bench.LOOP_OPTIONS``), ``executor`` to the process's shared worker
    (``shared_executor``: one for the whole study and the steps after it). ``pool`` (an executor's
    pool of workers, not entered: ``kopt_core.execute.base.open_pool``) spreads the trials over its
    workers instead. Either way the best is named by timing the contenders again one by one on the
    pool's ranking worker with ``rank_options`` (default ``ranking_options(options)``: bench's sampling),
    and its median in best.json is that time. ``join``: add this call as one more worker of a study that
    exists already in ``storage`` (another process or host started it).
    ``compile_jobs`` (``auto`` or N, as ``kopt explore --compile-jobs``) sizes the batches: that many
    proposals are built at once in the compile pool, then timed one by one.
    Raises ConfigError (exit 4) for a kernel without a space or a bad kernel, reference, dims or budget,
    HardwareError (exit 3) when the backend's tool or the GPU it needs is missing, after the static
    checks."""
    from kopt_core.search.study import run_study, shown_storage, write_results  # Optuna: by a search only

    kernel = Path(kernel)
    dims = dict(dims)
    # 1. the space, then the kernel as given (its defaults): contract, tool, build; no GPU needed
    if space is None:
        source = search_space(pm, kernel, dims, backend=backend)
    elif isinstance(space, Space):
        source = DeclaredSpace(space)
    else:
        source = space
    info, reference, candidate = static_contract(
        pm, kernel, ref, dims, backend=backend, on_warning=on_warning
    )
    if source.space.suffix not in info.suffixes:
        raise ConfigError(
            f"{kernel}: its space writes {source.space.suffix} kernels, which the {info.name} backend "
            f"does not take ({', '.join(info.suffixes)})"
        )
    hooks = backend_hooks(pm, info.name)
    probe = hooks.probe()
    if not probe.available:
        raise HardwareError(f"the {info.name} backend cannot run here: {probe.reason}")
    gpus, no_gpu = detect_gpus() if info.needs_gpu else ([], "")
    arch = target_arch(info, gpus)
    out = Path(out_dir).resolve()
    storage_url = storage or default_storage(out)
    study_name = study_name_for(source, dims, ref, info.name)
    device_ok = not (info.needs_gpu and not gpus)

    pool = pool if pool is not None else SingleWorkerPool(executor or shared_executor)
    with pool, tempfile.TemporaryDirectory(prefix="kopt-search-") as scratch:
        if device_ok:
            pool.start()  # Python, torch and a CUDA context take seconds: meanwhile the default builds
        with display.step(f"building {kernel.name} as given"):
            hooks.compile(candidate, Path(scratch) / "default", Toolchain(arch=arch))
        if not device_ok:
            raise HardwareError(
                f"no GPU: {no_gpu}. {kernel.name} declares {source.space.size} configurations; it passed "
                f"its contract checks and builds for {arch}; run kopt search on a machine with an NVIDIA "
                "GPU to check and time them"
            )
        out.mkdir(parents=True, exist_ok=True)
        # 2. the study, the trials spread over the pool's workers
        objective = _Objective(
            pm,
            source,
            backend=info.name,
            arch=arch,
            reference_path=str(Path(ref).resolve()),
            reference=reference,
            dims=dims,
            out_dir=out,
            options=options or LOOP_OPTIONS,
            pool=pool,
            build_root=Path(scratch) / "trials",
            plan=plan_compile_jobs(compile_jobs, [info]),
        )
        result = run_study(
            source.space,
            objective,
            storage=storage_url,
            study_name=study_name,
            sampler=sampler,
            trials=trials,
            time_budget_s=time_budget_s,
            seed=seed,
            progress=progress,
            first=prior_points(source, prior_seed_count(trials)),
            join=join,
            near=getattr(source, "near", None),
        )
        # 2b. the best is named by the contenders' times as bench takes them, all on one worker (times
        # from several workers are never compared)
        slots = pool.slots
        ranked_with = rank_options or ranking_options(objective.options)
        ranking = _ranked(objective, result, ranked_with)

    # 3. the record
    trials_csv, trials_json = write_results(result, out)
    labels = {record.config_id: source.label(record.config) for record in result.trials}
    outcome = SearchOutcome(
        kernel=str(kernel.resolve()),
        backend=info.name,
        arch=arch,
        dims=dims,
        out_dir=out,
        storage=shown_storage(storage_url),  # recorded without its password
        study_name=study_name,
        space_id=source.space.space_id,
        space_size=source.space.size,
        result=result,
        labels=labels,
        trials_csv=trials_csv,
        trials_json=trials_json,
        executor=pool.name,
        slots=slots,
        ranking=ranking,
    )
    best = outcome.best
    if best is None:
        return outcome
    variant = outcome.variant(best)
    if not variant.is_file():  # evaluated under another out_dir sharing the storage: write it here
        variant = source.write(dict(best.config), variant.parent)
    best_file = out / f"best{variant.suffix}"
    shutil.copyfile(variant, best_file)
    best_json = write_json(
        out / BEST_FILE,
        {
            "schema_version": BEST_SCHEMA_VERSION,
            "kernel": outcome.kernel,
            "reference": str(Path(ref).resolve()),
            "dims": dims,
            "backend": info.name,
            "arch": arch,
            "space_id": outcome.space_id,
            "study_name": study_name,
            "storage": shown_storage(storage_url),
            "config_id": best.config_id,
            "config": dict(best.config),
            "label": labels.get(best.config_id, ""),
            "median_ms": best.value_ms,
            "search_median_ms": _study_median(result, best.config_id),
            "ranked_with": {"warmup_ms": ranked_with.warmup_ms, "budget_s": ranked_with.budget_s},
            "timed_on": best.worker,
            "ranked_on": outcome.slots[0] if outcome.ranking else None,
            "trial": best.number,
            "variant": str(variant),
            "file": str(best_file),
            "top": [_row(record, labels, outcome.variant(record)) for record in outcome.top()],
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    )
    return attrs.evolve(outcome, best_json=best_json, best_file=best_file)
