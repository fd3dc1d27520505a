"""Building many candidates at once: the CPU half of explore (the GPU half benches them one at a time).

An iteration's branches and ablation kernels are built before any of them is timed. Builds are CPU and
memory work (nvcc, cicc, ptxas, the host compiler), so they run in a bounded pool: ``plan_compile_jobs``
turns ``--compile-jobs auto|N`` into a number of workers and says why in words that are shown and
persisted, and ``build_all`` runs each candidate's own backend compile hook in that many threads (the
compilers are child processes, so threads are enough: the GIL is free while they run).

A build that fails for lack of resources (the OOM killer's SIGKILL, a compiler that could not allocate)
is a property of the crowd, not of the candidate: it is retried once, alone, after the pool is done.
Every other failure is the candidate's own and final. Nothing a candidate does raises out of
``build_all``: each outcome carries its error, in the order the jobs were given.

Builds are reused only through the backends' content caches, whose key covers the effective sources,
the included files, the flags, the architecture and the compiler version; this module adds no cache of
its own.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import frozen

from kopt_core import progress
from kopt_core.backends import BackendHooks, BackendRegistry
from kopt_core.errors import ConfigError, KoptError
from kopt_core.records import Artifact, BackendInfo, Candidate, Toolchain

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

GIB = 1 << 30
MAX_AUTO_WORKERS = 4
# Memory left to everything else while the pool runs (the bench worker, the editor, the desktop).
RESERVE_GIB = 2
# What a backend that declares nothing is charged (BackendInfo's own default).
DEFAULT_JOB_GIB = 2.0
MEMINFO = Path("/proc/meminfo")


@frozen
class CompilePlan:
    """How many builds run at once, and why: ``reason`` is shown to the user and persisted with the run,
    so it spells out the arithmetic that gave ``workers``."""

    workers: int
    reason: str


@frozen
class BuildJob:
    """One candidate to build. ``key`` names it in the run ("b1", or an ablation's method id) and is its
    build folder's name under the pool's build root."""

    key: str
    candidate: Candidate


@frozen
class BuildOutcome:
    """What became of one job. ``error`` is the compiler's (or the plugin's) own words when the build
    failed; ``seconds`` covers every attempt, the serial retry included."""

    key: str
    artifact: Artifact | None
    compile_pass: bool
    error: str | None
    seconds: float
    retried_serially: bool
    cache_hit: bool


# ---------------------------------------------------------------------------------------------- the plan


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container or taskset narrows), else
    the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory_bytes(meminfo: Path | None = None) -> int | None:
    """The kernel's estimate of memory available without swapping (MemAvailable in ``meminfo``, by
    default /proc/meminfo), or None when unknown (not Linux, a kernel before 3.14, a sandbox hiding it)."""
    try:
        text = (meminfo or MEMINFO).read_text()
    except OSError:
        return None
    match = re.search(r"^MemAvailable:\s+(\d+)\s*kB\s*$", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _parse_setting(setting: str | int) -> int | None:
    """None for ``auto``, else the positive integer given (as ``kopt init`` accepts it)."""
    text = str(setting).strip().lower()
    if text == "auto":
        return None
    if isinstance(setting, bool) or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--compile-jobs must be 'auto' or a positive integer, got {setting!r}")
    return int(text)


def _gib(value: float) -> str:
    """2.0 -> "2", 1.5 -> "1.5": per-job and reserve figures as a person writes them."""
    return f"{value:g}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _memory_bound(backends: Sequence[BackendInfo], available_bytes: int) -> tuple[int, str]:
    """How many jobs memory affords, and the words for it.

    Worked in tenths of a GiB, from the free memory rounded down to the tenth that the text shows, so the
    sentence's arithmetic gives exactly the number (a sentence saying "8.0 GiB free" must not come from
    7.96 GiB and give one job fewer than it implies).
    """
    heaviest = max(backends, key=lambda info: info.compile_memory_gib, default=None)
    per_job = heaviest.compile_memory_gib if heaviest is not None else DEFAULT_JOB_GIB
    label = f"{heaviest.name.upper()} job" if heaviest is not None else "job"
    free_tenths = available_bytes * 10 // GIB
    per_job_tenths = max(1, round(per_job * 10))
    jobs = (free_tenths - RESERVE_GIB * 10) // per_job_tenths
    words = (
        f"memory {free_tenths / 10:.1f} GiB free - {_gib(RESERVE_GIB)} GiB reserve / {_gib(per_job)} GiB "
        f"per {label}"
    )
    return jobs, words


def plan_compile_jobs(
    setting: str | int,
    backends: Sequence[BackendInfo],
    *,
    cpus: int | None = None,
    available_bytes: int | None = None,
) -> CompilePlan:
    """The compile pool's size for ``--compile-jobs`` ``setting`` when building for ``backends``.

    ``auto``: half the CPUs, at most four, and no more jobs than memory affords at the heaviest backend's
    ``compile_memory_gib`` with 2 GiB kept free; never fewer than one. A CUTLASS build can take 4 GiB and
    four of them at once on a small machine invite the OOM killer, which costs more than building fewer at
    a time. An explicit N is the user's decision and is used as given; the reason says when memory would
    not allow it. ``cpus`` and ``available_bytes`` default to this machine's (affinity mask,
    /proc/meminfo's MemAvailable); when the memory is unknown the pool is not limited by it, and the
    reason says so.
    """
    explicit = _parse_setting(setting)
    cpus = available_cpus() if cpus is None else max(1, cpus)
    if available_bytes is None:
        available_bytes = available_memory_bytes()
    memory = _memory_bound(backends, available_bytes) if available_bytes is not None else None

    if explicit is not None:
        given = f"--compile-jobs {explicit}: {_plural(explicit, 'worker')} as given"
        if memory is None:
            return CompilePlan(explicit, f"{given} (available memory unknown, so not checked against it)")
        jobs, words = memory
        if explicit > jobs:
            return CompilePlan(
                explicit,
                f"{given}, more than memory allows ({max(jobs, 0)} = {words}); a build that runs out of "
                "memory is retried once, alone",
            )
        return CompilePlan(explicit, given)

    terms = [f"half of {_plural(cpus, 'CPU')}", str(MAX_AUTO_WORKERS)]
    bound = min(cpus // 2, MAX_AUTO_WORKERS)
    if memory is not None:
        jobs, words = memory
        terms.append(words)
        bound = min(bound, jobs)
    formula = f"min({', '.join(terms)})"
    unknown = "" if memory is not None else "; available memory unknown (no MemAvailable), not limited by it"
    if bound < 1:
        return CompilePlan(1, f"auto: 1 worker, the minimum ({formula} = {max(bound, 0)}){unknown}")
    return CompilePlan(bound, f"auto: {_plural(bound, 'worker')} = {formula}{unknown}")


# ---------------------------------------------------------------------------- resource failures


# How a build that died of the crowd rather than of its source shows in the error text. Seen here: nvcc
# runs cicc, cudafe++ and ptxas through ``sh -c``, so a SIGKILLed cicc shows as the shell's "Killed" and
# nvcc exits 137; a SIGKILLed host compiler as gcc's "Killed signal terminated program cc1plus"; nvcc
# itself killed as kopt_cuda's "(exit -9)"; and under a memory limit, cudafe++ reports "catastrophic
# error: out of memory", cc1plus "virtual memory exhausted: Cannot allocate memory", and nvcc itself may
# die of SIGSEGV (exit 139) when it cannot map memory. ptxas and cicc say "Memory allocation failure",
# LLVM "out of memory", C++ code "std::bad_alloc", Python backends MemoryError, fork EAGAIN "Resource
# temporarily unavailable". A crash by SIGSEGV or SIGBUS is counted too: under memory pressure it is
# one, and retrying a genuine compiler crash once, alone, costs one build and tells the two apart.
_RESOURCE_PATTERNS = (
    re.compile(r"out of memory", re.IGNORECASE),
    re.compile(r"cannot allocate memory", re.IGNORECASE),
    re.compile(r"memory (?:may be )?exhausted", re.IGNORECASE),
    re.compile(r"memory allocation failure", re.IGNORECASE),
    re.compile(r"insufficient memory", re.IGNORECASE),
    re.compile(r"std::bad_alloc"),
    re.compile(r"\bMemoryError\b"),
    re.compile(r"Resource temporarily unavailable"),
    re.compile(r"\bKilled\b"),  # sh's report of a SIGKILLed child; gcc's "Killed signal terminated program"
    re.compile(r"\b(?:Segmentation fault|Bus error)\b"),
    re.compile(r"died due to signal (?:9|11|7)\b"),  # nvcc: 'cicc' died due to signal 9 (Kill signal)
    re.compile(r"\bSIG(?:KILL|SEGV|BUS)\b"),
    # An exit status that is a signal: negative from Python's subprocess, 128 + signal from a shell.
    re.compile(r"\bexit(?: status| code)?:? ?(?:-9|-11|-7|137|139|135)(?!\d)"),
)


def is_resource_failure(error_text: str) -> bool:
    """Whether a failed build's message says it ran out of memory or was killed (the OOM killer's
    SIGKILL), rather than that the source is wrong: such a build is worth one more try, alone."""
    return any(pattern.search(error_text) for pattern in _RESOURCE_PATTERNS)


# ---------------------------------------------------------------------------------------- the pool


@frozen
class _Attempt:
    artifact: Artifact | None
    error: str | None
    seconds: float


def _safe_key(key: str) -> bool:
    """A key is a build folder's name: one path component, never ``.``/``..`` or hidden."""
    return bool(key) and "/" not in key and "\\" not in key and "\0" not in key and not key.startswith(".")


def _attempt(
    hooks: Callable[[str], BackendHooks], job: BuildJob, build_dir: Path, toolchain: Toolchain
) -> _Attempt:
    """One build of one job. A KoptError is the candidate's failure in the plugin's words; any other
    exception (a broken plugin, a full disk) is too, with its type, so one candidate never takes the
    others down."""
    started = time.perf_counter()
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        artifact = hooks(job.candidate.backend).compile(job.candidate, build_dir, toolchain)
    except KoptError as exc:
        return _Attempt(None, str(exc), time.perf_counter() - started)
    except Exception as exc:
        return _Attempt(None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
    return _Attempt(artifact, None, time.perf_counter() - started)


@contextmanager
def _announce(message: str) -> Iterator[None]:
    """The pool's own line for one build ("building 3/4 (b3)", not "building kernel.cu" four times over:
    every branch's file is kernel.cu); the steps the build announces from its pool thread show nothing.
    Steps of other threads pass through."""
    with progress.step(message), progress.muted():
        yield


def build_all(
    pm: PluginManager,
    jobs: Sequence[BuildJob],
    *,
    toolchain: Toolchain,
    plan: CompilePlan,
    build_root: Path,
) -> list[BuildOutcome]:
    """Build every job with its backend's compile hook, ``plan.workers`` at a time, each into
    ``build_root/<key>/``; the outcomes come back in the order of ``jobs``.

    A build whose error ``is_resource_failure`` is built once more after the pool has finished, alone,
    when nothing else competes for memory; every other failure is final. Raises only for the caller's own
    mistakes (duplicate or unusable keys), never for a candidate's.
    """
    keys = [job.key for job in jobs]
    if bad := [key for key in keys if not _safe_key(key)]:
        raise ValueError(f"build keys must be plain folder names, got {bad!r}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"build keys must be unique, got {keys!r}")
    if not jobs:
        return []
    build_root = Path(build_root)
    registry = BackendRegistry.from_plugins(pm)  # once: registration is a broadcast to every plugin
    resolved: dict[str, BackendHooks] = {}
    lock = threading.Lock()

    def hooks(name: str) -> BackendHooks:
        with lock:
            if name not in resolved:
                resolved[name] = registry.hooks(name)  # an unknown backend: that candidate's ConfigError
            return resolved[name]

    total = len(jobs)
    started = 0

    def run(job: BuildJob) -> _Attempt:
        nonlocal started
        with lock:
            started += 1
            ordinal = started
        with _announce(f"building {ordinal}/{total} ({job.key})"):
            return _attempt(hooks, job, build_root / job.key, toolchain)

    executor = ThreadPoolExecutor(
        max_workers=max(1, min(plan.workers, total)), thread_name_prefix="kopt-build"
    )
    try:
        attempts = [future.result() for future in [executor.submit(run, job) for job in jobs]]
    finally:
        # On an interrupt, builds not yet started never start; running ones end on their own timeout.
        executor.shutdown(wait=True, cancel_futures=True)

    retry = [
        index
        for index, attempt in enumerate(attempts)
        if attempt.error and is_resource_failure(attempt.error)
    ]
    retried: dict[int, _Attempt] = {}
    for number, index in enumerate(retry, start=1):
        job = jobs[index]
        with _announce(f"building {job.key} again, alone ({number}/{len(retry)}): it ran out of resources"):
            retried[index] = _attempt(hooks, job, build_root / job.key, toolchain)

    outcomes = []
    for index, (job, first) in enumerate(zip(jobs, attempts, strict=True)):
        final = retried.get(index, first)
        artifact = final.artifact
        outcomes.append(
            BuildOutcome(
                key=job.key,
                artifact=artifact,
                compile_pass=artifact is not None,
                error=final.error,
                seconds=first.seconds + (final.seconds if index in retried else 0.0),
                retried_serially=index in retried,
                cache_hit=bool(artifact is not None and artifact.cache_hit),
            )
        )
    return outcomes


__all__ = [
    "BuildJob",
    "BuildOutcome",
    "CompilePlan",
    "available_cpus",
    "available_memory_bytes",
    "build_all",
    "is_resource_failure",
    "plan_compile_jobs",
]
