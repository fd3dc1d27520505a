"""``kopt search``: find the fastest configuration of the tunables a kernel declares, with every check of
the harness applied to every configuration.

A kernel declares its space (``kopt_core.search.space``): ``// kopt:space`` lines in a ``.cu`` file, a
``kopt_space`` dict in a ``.py`` file, an ``@triton.autotune`` list, or, for a CUTLASS GEMM, one line
naming the problem kind whose CUTLASS configurations are the space::

    // kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn

(``a``, ``b``, ``c`` and ``acc`` are cutlass_library's element names, ``layout`` A's letter then B's;
``level=N`` optionally picks CUTLASS's instantiation level.) That space is one categorical parameter,
``config``, over the ids of the SM90 configurations of that kind that fit the problem's M, N and K
(``kopt_cutlass.configs.filter_for_problem``); a configuration is written by ``emit_kernel``.

``search_kernel`` walks the space with an Optuna study (``kopt_core.search.study``). A CUTLASS space
starts a fresh study with a prior: its best-ranked configurations for the problem
(``kopt_cutlass.configs.seed_order``), ``prior_seed_count`` of them, are evaluated before the sampler
proposes anything (each trial's ``seeded`` says ``prior``); a resumed study is not seeded again. Every
trial writes the variant under ``out_dir/trials/<config id>/``, checks its static contract, builds it
through the backend (its build cache may answer), then checks it against the reference and times it in
ONE bench worker kept for the whole study, with the loop's options (``LOOP_OPTIONS``). A configuration
passes only when the worker's record is ok, correct and validly timed; its value is the kernel's median
in ms. Everything else is a failed trial with the reason (a contract problem, the compiler's first error
line, the check that failed). Nothing is carried from one trial to the next except builds.

The study is stored in ``sqlite:///<out_dir>/search.db`` unless a storage URL is given, under a name
made of the space's id and a digest of what the times depend on (the kernel without its tunables'
values, the dims, the reference, the backend): running the same search again continues it (a killed
search loses nothing and evaluates no configuration twice), and a changed kernel, reference or problem
starts a new study. At the end: ``trials.csv``/``trials.json`` (every evaluated configuration),
``best.json`` and ``best.<ext>`` (the fastest passing variant).

Order of failures, as for ``kopt bench``: the space and the kernel as given (its declared defaults) are
checked and built first, so a machine without a GPU still shows those checks (exit 4 for a bad kernel,
space, reference or dims); then a missing tool or GPU is exit 3.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
from attrs import field, frozen

from kopt_core import progress as display
from kopt_core.backends import backend_hooks
from kopt_core.bench.executor import shared_executor
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.hardware import detect_gpus
from kopt_core.jsonio import write_json, write_text_atomic
from kopt_core.records import BenchOptions, BenchRequest, Candidate, Toolchain, to_data
from kopt_core.records.fields import as_tuple
from kopt_core.search.promotion import first_error_line, judge
from kopt_core.search.space import (
    AUTOTUNE_PARAMETER,
    CU_SUFFIXES,
    SPACE_HINT,
    Config,
    Parameter,
    Space,
    parse_cu_space,
    read_space,
)
from kopt_core.search.variants import CONFIG_FILE, VARIANT_SCHEMA_VERSION, config_id, write_variant
from kopt_core.steps.bench import check_candidate, static_contract, target_arch
from kopt_core.steps.build_pool import BuildJob, CompilePlan, build_all, plan_compile_jobs

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager
    from kopt_core.search.study import SamplerName, StudyResult, TrialOutcome, TrialRecord
    from kopt_cutlass.configs import CutlassGemmConfig

SEARCH_DB = "search.db"
TRIALS_DIR = "trials"
BEST_FILE = "best.json"
BEST_SCHEMA_VERSION = 1
TOP = 5  # configurations listed in best.json and shown at the end
DEFAULT_TRIALS = 24
PRIOR_SEEDS_WITHOUT_TRIAL_BUDGET = 4  # seeds of a search bounded by time (or not at all)

CUTLASS_KEYWORD = "kopt:cutlass_gemm"
CUTLASS_KEYS = ("a", "b", "c", "acc", "layout")
CUTLASS_OPTIONAL_KEYS = ("level",)
_CUTLASS_LINE = re.compile(r"^\s*//\s*kopt:cutlass_gemm\b(?P<body>.*)$")
_CU_SPACE_LINE = re.compile(r"^\s*//\s*kopt:space\b")
# What kopt_core.search.variants adds to a .cu file: a header, one #define per parameter, a #line.
_VARIANT_HEADER = re.compile(r"^// kopt search: configuration [0-9a-f]{10}\r?\n?$")
_VARIANT_DEFINE = re.compile(r"^#define [A-Za-z_][A-Za-z0-9_]* .*\r?\n?$")
_VARIANT_LINE = re.compile(r"^#line \d+\r?\n?$")

NO_SPACE_HINT = (
    "declare the tunables in the kernel: in a .cu file `// kopt:space NAME = [v1, v2]` lines (each read "
    'as a macro), in a .py file a module-level `kopt_space = {"NAME": [v1, v2]}` (each name also a '
    "module-level assignment), or for a CUTLASS GEMM `// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 "
    "layout=tn`"
)


# --- the space as the search sees it ------------------------------------------------------------------


class SearchSource(Protocol):
    """A space the search can walk: the study's ``Space`` and how one configuration becomes a kernel."""

    @property
    def space(self) -> Space: ...

    @property
    def identity(self) -> str:
        """Text that is the same for every variant of one kernel (its source without the tunables'
        values): what a study's results belong to."""
        ...

    def write(self, config: Config, folder: Path) -> Path:
        """Write ``folder/kernel<suffix>`` and ``folder/config.json``; returns the kernel's path."""
        ...

    def label(self, config: Mapping[str, Any]) -> str:
        """One line for people."""
        ...


@frozen
class DeclaredSpace:
    """The space a kernel declares in its source; variants are ``kopt_core.search.variants``'."""

    space: Space

    @property
    def identity(self) -> str:
        from kopt_core.search.variants import render_variant

        return render_variant(self.space, self.space.point(0))

    def write(self, config: Config, folder: Path) -> Path:
        return write_variant(self.space, config, folder)

    def label(self, config: Mapping[str, Any]) -> str:
        return ", ".join(f"{name}={value}" for name, value in config.items())


@frozen
class CutlassGemmSpace:
    """The CUTLASS SM90 configurations of one GEMM kind that fit one problem: parameter ``config`` over
    their ids, each written by ``kopt_cutlass.configs.emit_kernel`` (with the declaration kept, so the
    written kernel can be searched again)."""

    space: Space
    declaration: str  # the normalised `// kopt:cutlass_gemm ...` line
    configs: tuple[CutlassGemmConfig, ...] = field(converter=as_tuple)
    problem: tuple[int, int, int] | None = None  # M, N, K: what the prior ranks the configurations for

    def prior(self, count: int) -> tuple[Config, ...]:
        """The ``count`` configurations to try first (``kopt_cutlass.configs.seed_order`` at the problem:
        best-ranked, one of each tile shape and kernel schedule before variants of one); none without a
        problem."""
        if self.problem is None or count <= 0:
            return ()
        from kopt_cutlass.configs import seed_order

        M, N, K = self.problem
        return tuple({AUTOTUNE_PARAMETER: config.id} for config in seed_order(self.configs, M, N, K)[:count])

    @property
    def identity(self) -> str:
        return self.declaration

    def config_of(self, config: Mapping[str, Any]) -> CutlassGemmConfig:
        wanted = config.get(AUTOTUNE_PARAMETER)
        for candidate in self.configs:
            if candidate.id == wanted:
                return candidate
        raise ConfigError(f"{wanted!r} is not one of the {len(self.configs)} CUTLASS configurations searched")

    def write(self, config: Config, folder: Path) -> Path:
        from kopt_cutlass.configs import emit_kernel

        chosen = self.config_of(config)
        kernel = emit_kernel(chosen, Path(folder) / "kernel.cu")
        text = kernel.read_text(encoding="utf-8")
        # at the end, so the compiler's line numbers are the emitted file's
        footer = f"\n// kopt search: CUTLASS configuration {chosen.id} of\n{self.declaration}\n"
        write_text_atomic(kernel, text.rstrip("\n") + "\n" + footer)
        write_json(
            Path(folder) / CONFIG_FILE,
            {
                "schema_version": VARIANT_SCHEMA_VERSION,
                "config_id": config_id(config),
                "config": dict(config),
                "source": self.space.source,
                "kind": "cutlass_gemm",
                "space_id": self.space.space_id,
                "cutlass": {
                    "id": chosen.id,
                    "label": chosen.label,
                    "procedural_name": chosen.procedural_name,
                    "listing": chosen.listing,
                },
            },
        )
        return kernel

    def label(self, config: Mapping[str, Any]) -> str:
        chosen = self.config_of(config)
        return f"{chosen.id}: {chosen.label}"


def _problem(dims: Mapping[str, Any], source: str) -> tuple[int, int, int]:
    values = []
    for name in ("M", "N", "K"):
        value = dims.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"{source}: a CUTLASS GEMM search needs the problem's M, N and K as positive integers, "
                f"got {name}={value!r}",
                hint="give them as dims: --M=4096 --N=4096 --K=4096",
            )
        values.append(value)
    return values[0], values[1], values[2]


def parse_cutlass_declaration(text: str, source: str = "<source>") -> dict[str, str] | None:
    """The keys of a file's one ``// kopt:cutlass_gemm`` line, or None when it has none. ConfigError
    for a second line, a missing, unknown or repeated key, or a token that is not ``key=value``."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _CUTLASS_LINE.match(line)
        if match:
            found.append((number, match.group("body")))
    if not found:
        return None
    shape = "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn"
    if len(found) > 1:
        lines = ", ".join(str(number) for number, _ in found)
        raise ConfigError(f"{source}: {len(found)} `kopt:cutlass_gemm` lines (lines {lines}); keep one")
    number, body = found[0]
    where = f"{source}:{number}"
    keys: dict[str, str] = {}
    for token in body.split():
        key, equals, value = token.partition("=")
        if not equals or not key or not value:
            raise ConfigError(f"{where}: `{token}` is not key=value", hint=f"write it as: {shape}")
        if key not in CUTLASS_KEYS + CUTLASS_OPTIONAL_KEYS:
            known = ", ".join(CUTLASS_KEYS + CUTLASS_OPTIONAL_KEYS)
            raise ConfigError(f"{where}: unknown key {key!r} (keys: {known})", hint=f"write it as: {shape}")
        if key in keys:
            raise ConfigError(f"{where}: {key} is given twice")
        keys[key] = value
    missing = [key for key in CUTLASS_KEYS if key not in keys]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}", hint=f"write it as: {shape}")
    if "level" in keys and not (keys["level"].isdigit() and int(keys["level"]) > 0):
        raise ConfigError(
            f"{where}: level={keys['level']!r} is not a positive integer (CUTLASS's instantiation level)"
        )
    return keys


def cutlass_gemm_space(
    path: str | Path, dims: Mapping[str, Any], *, text: str | None = None
) -> CutlassGemmSpace:
    """The CUTLASS configurations ``path``'s ``// kopt:cutlass_gemm`` line names that fit the problem of
    ``dims`` (M, N, K), as a space of one categorical parameter ``config``. ConfigError when the file has
    no such line or a bad one, the dims have no M, N, K, or no configuration fits."""
    from kopt_cutlass.configs import enumerate_sm90_gemms, filter_for_problem

    source = str(path)
    if text is None:
        text = _read(Path(path))
    keys = parse_cutlass_declaration(text, source)
    if keys is None:
        raise ConfigError(f"{source}: no `// kopt:cutlass_gemm` line", hint=NO_SPACE_HINT)
    if any(_CU_SPACE_LINE.match(line) for line in text.split("\n")):
        raise ConfigError(
            f"{source}: declares both `// kopt:cutlass_gemm` and `// kopt:space` lines; a search walks one",
            hint="keep the CUTLASS declaration (its configurations are the space) or the kopt:space lines",
        )
    M, N, K = _problem(dims, source)
    level = int(keys["level"]) if "level" in keys else None
    every = enumerate_sm90_gemms(
        keys["a"], keys["b"], keys["c"], keys["acc"], keys["layout"], instantiation_level=level
    )
    fitting = filter_for_problem(every, M, N, K)
    if not fitting:
        raise ConfigError(
            f"{source}: none of the {len(every)} CUTLASS SM90 configurations of this kind fits "
            f"M={M} N={N} K={K} (alignment, or clusters wider than the tile grid)",
            hint="check the dims; the configurations need e.g. K and N multiples of 8 for 16-bit inputs",
        )
    declaration = "// kopt:cutlass_gemm " + " ".join(
        f"{key}={keys[key]}" for key in CUTLASS_KEYS + CUTLASS_OPTIONAL_KEYS if key in keys
    )
    line = next(n for n, body in enumerate(text.split("\n"), start=1) if _CUTLASS_LINE.match(body))
    parameter = Parameter(AUTOTUNE_PARAMETER, tuple(config.id for config in fitting), line)
    space = Space(source=source, kind="cu_defines", parameters=(parameter,), text=declaration)
    return CutlassGemmSpace(space=space, declaration=declaration, configs=fitting, problem=(M, N, K))


def strip_variant(text: str) -> str:
    """A ``.cu`` variant's source without what ``kopt_core.search.variants`` added (its header, its
    ``#define`` lines and its ``#line``): the kernel it was written from. Other text is returned as is."""
    lines = re.split(r"(?<=\n)", text)
    for index, line in enumerate(lines):
        if not _VARIANT_HEADER.match(line):
            continue
        end = index + 1
        while end < len(lines) and _VARIANT_DEFINE.match(lines[end]):
            end += 1
        if end > index + 1 and end < len(lines) and _VARIANT_LINE.match(lines[end]):
            return "".join(lines[:index] + lines[end + 1 :])
    return text


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None


def search_space(path: str | Path, dims: Mapping[str, Any]) -> SearchSource:
    """The space ``path`` declares, as the search walks it: a CUTLASS GEMM declaration, ``// kopt:space``
    lines (also in a variant kopt wrote: its added ``#define`` lines are read past), ``kopt_space`` or an
    autotune list. ConfigError (exit 4) with how to declare one when it declares none."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"kernel file {path} does not exist", hint="pass the path of your .cu or .py kernel"
        )
    text = _read(path)
    if path.suffix in CU_SUFFIXES and parse_cutlass_declaration(text, str(path)) is not None:
        return cutlass_gemm_space(path, dims, text=text)
    try:
        if path.suffix in CU_SUFFIXES:
            return DeclaredSpace(parse_cu_space(strip_variant(text), str(path)))
        return DeclaredSpace(read_space(path))
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
    ``CutlassGemmSpace`` has); none for a source without one (declared CUDA, Triton or Python spaces)."""
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

    @property
    def best(self) -> TrialRecord | None:
        found = self.result.best(1)
        return found[0] if found else None

    def top(self, k: int = TOP) -> tuple[TrialRecord, ...]:
        return self.result.best(k)

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
            "best": None if self.best is None else _row(self.best, self.labels, self.variant(self.best)),
            "top": [_row(record, self.labels, self.variant(record)) for record in self.top()],
            "best_file": None if self.best_file is None else str(self.best_file),
            "best_json": None if self.best_json is None else str(self.best_json),
            "trials_csv": str(self.trials_csv),
            "trials_json": str(self.trials_json),
        }


def _row(record: TrialRecord, labels: Mapping[str, str], variant: Path) -> dict[str, Any]:
    return {
        "config_id": record.config_id,
        "config": dict(record.config),
        "median_ms": record.value_ms,
        "trial": record.number,
        "label": labels.get(record.config_id, ""),
        "variant": str(variant),
        "seeded": record.seeded,
    }


# --- one trial -----------------------------------------------------------------------------------------


ExecutorFactory = Callable[[], AbstractContextManager[Any]]


class _Objective:
    """One trial: write, check, build, then check and time in the study's one worker. With a
    ``batch_size`` above 1 the engine hands it a batch of proposals first (``prefetch``): their variants
    are written, checked and built together in the compile pool, then each is timed alone as before."""

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
        runner: Any,
        build_root: Path,
        plan: CompilePlan | None = None,
    ):
        self.pm, self.source, self.backend, self.arch = pm, source, backend, arch
        self.reference_path, self.reference, self.dims = reference_path, reference, dims
        self.out_dir, self.options, self.runner, self.build_root = out_dir, options, runner, build_root
        self.plan = plan or CompilePlan(1, "one trial at a time")
        self.batch_size = self.plan.workers
        self.ready: dict[str, TrialOutcome | Any] = {}  # config id -> its failure, or its BuildOutcome

    def prefetch(self, configs: list[Config]) -> None:
        """Write, check and build ``configs`` at once (the compile pool, ``plan``'s workers); ``__call__``
        then times each without building it again."""
        jobs = []
        for config in configs:
            identifier = config_id(config)
            failed, candidate = self._checked(config, identifier)
            if failed is not None:
                self.ready[identifier] = failed
            else:
                jobs.append(BuildJob(key=identifier, candidate=candidate))
        if jobs:
            builds = build_all(
                self.pm, jobs, toolchain=Toolchain(arch=self.arch), plan=self.plan, build_root=self.build_root
            )
            self.ready.update({job.key: build for job, build in zip(jobs, builds, strict=True)})

    def _checked(self, config: Config, identifier: str) -> tuple[TrialOutcome | None, Candidate]:
        from kopt_core.search.study import TrialOutcome

        kernel = self.source.write(config, self.out_dir / TRIALS_DIR / identifier)
        candidate = Candidate(path=str(kernel), backend=self.backend, name=identifier)
        try:
            check_candidate(self.pm, candidate, self.dims, self.reference)
        except ConfigError as exc:
            return TrialOutcome("failed", detail=f"contract: {first_error_line(exc.message)}"), candidate
        return None, candidate

    def __call__(self, config: Config) -> TrialOutcome:
        from kopt_core.search.study import TrialOutcome

        identifier = config_id(config)
        if identifier not in self.ready:  # not prefetched: the engine asks one at a time
            self.prefetch([config])
        build = self.ready.pop(identifier)
        if isinstance(build, TrialOutcome):
            return build
        if not build.compile_pass or build.artifact is None:
            return TrialOutcome("failed", detail=f"compile: {first_error_line(build.error)}")
        request = BenchRequest(
            artifact=build.artifact, reference=self.reference_path, dims=self.dims, options=self.options
        )
        result = self.runner.bench(request)
        write_json(self.out_dir / TRIALS_DIR / identifier / "bench.json", to_data(result))
        return judge(result)


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
    sampler: SamplerName = "tpe",
    storage: str | None = None,
    seed: int = 0,
    backend: str | None = None,
    space: SearchSource | Space | None = None,
    progress: bool = True,
    options: BenchOptions | None = None,
    executor: ExecutorFactory | None = None,
    on_warning: Callable[[str], None] | None = None,
    compile_jobs: str | int = "auto",
) -> SearchOutcome:
    """Search ``kernel``'s declared space (or ``space``) for the fastest configuration that passes every
    check against ``ref`` at ``dims``; see the module docstring. ``trials`` is the study's budget in
    total, across resumes; ``time_budget_s`` this call's. ``options`` defaults to the loop's
    (``kopt_core.run.seed.LOOP_OPTIONS``), ``executor`` to the process's shared worker
    (``shared_executor``: one for the whole study and the steps after it).
    ``compile_jobs`` (``auto`` or N, as ``kopt explore --compile-jobs``) sizes the batches: that many
    proposals are built at once in the compile pool, then timed one by one.
    Raises ConfigError (exit 4) for a kernel without a space or a bad kernel, reference, dims or budget,
    HardwareError (exit 3) when the backend's tool or the GPU it needs is missing, after the static
    checks."""
    from kopt_core.run.seed import LOOP_OPTIONS
    from kopt_core.search.study import run_study, write_results

    kernel = Path(kernel)
    dims = dict(dims)
    # 1. the space, then the kernel as given (its defaults): contract, tool, build; no GPU needed
    if space is None:
        source = search_space(kernel, dims)
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

    with (
        (executor or shared_executor)() as runner,
        tempfile.TemporaryDirectory(prefix="kopt-search-") as scratch,
    ):
        if device_ok:
            runner.start()  # Python, torch and a CUDA context take seconds: meanwhile the default builds
        with display.step(f"building {kernel.name} as given"):
            hooks.compile(candidate, Path(scratch) / "default", Toolchain(arch=arch))
        if not device_ok:
            raise HardwareError(
                f"no GPU: {no_gpu}. {kernel.name} declares {source.space.size} configurations; it passed "
                f"its contract checks and builds for {arch}; run kopt search on a machine with an NVIDIA "
                "GPU to check and time them"
            )
        out.mkdir(parents=True, exist_ok=True)
        # 2. the study, every trial through the one worker
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
            runner=runner,
            build_root=Path(scratch) / "trials",
            plan=plan_compile_jobs(compile_jobs, [info]),
        )
        with _quiet_steps(progress):
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
            )

    # 3. the record
    trials_csv, trials_json = write_results(result, out)
    labels = {record.config_id: source.label(record.config) for record in result.trials}
    outcome = SearchOutcome(
        kernel=str(kernel.resolve()),
        backend=info.name,
        arch=arch,
        dims=dims,
        out_dir=out,
        storage=storage_url,
        study_name=study_name,
        space_id=source.space.space_id,
        space_size=source.space.size,
        result=result,
        labels=labels,
        trials_csv=trials_csv,
        trials_json=trials_json,
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
            "storage": storage_url,
            "config_id": best.config_id,
            "config": dict(best.config),
            "label": labels.get(best.config_id, ""),
            "median_ms": best.value_ms,
            "trial": best.number,
            "variant": str(variant),
            "file": str(best_file),
            "top": [_row(record, labels, outcome.variant(record)) for record in outcome.top()],
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    )
    return attrs.evolve(outcome, best_json=best_json, best_file=best_file)


def _quiet_steps(bar: bool) -> AbstractContextManager[None]:
    """While the study's progress bar is shown, the steps inside a trial (a build) show nothing: two live
    displays on one terminal would overwrite each other."""
    return display.reporting(None) if bar else nullcontext()
