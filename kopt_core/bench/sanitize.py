"""compute-sanitizer on one kernel: the evidence behind a branch's ``race_safe``.

A kernel that passes its reference on three seeds can still race on shared memory: the race shows only
under another schedule, another GPU or another size. compute-sanitizer's racecheck sees the hazard
itself, whatever the outputs were. It slows kernels 10-100x, so kopt runs it once per branch that
needs it, never inside timing: ``python -m kopt_core.bench.sanitize_target`` prepares the kernel exactly
as the bench worker does, launches it once and checks it once against the reference.

Which tools run (``choose_tools``): racecheck for any kernel that may use shared memory, and memcheck,
synccheck or initcheck where a method of the branch calls for one (``METHOD_TOOLS``). What a run says
(``SanitizerReport.status``): clean, hazards (the tool found something), failed (the kernel crashed or
was wrong under the tool), tool_error (the tool is missing, refused the device, timed out or printed no
summary; never read as clean) or not_applicable (the kernel does not run on a CUDA device).

The output formats parsed here are compute-sanitizer's own, as its user guide shows them
(https://docs.nvidia.com/compute-sanitizer/ComputeSanitizer): every line of the tool starts with
``=========``, memcheck, synccheck and initcheck end with ``ERROR SUMMARY: N errors`` ("1 error"), and
racecheck ends with ``RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)`` (singular forms for
1). docs/measurement.md ("Race and memory checks") says how the statuses are decided.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

import attrs
from attrs import field, frozen

from kopt_core.jsonio import read_json, write_json
from kopt_core.process import Ran, run_in_group
from kopt_core.records import Artifact, BenchRequest, to_data
from kopt_core.records.fields import as_tuple
from kopt_core.tools import find_tool

TOOLS = ("racecheck", "memcheck", "synccheck", "initcheck")
STATUSES = ("clean", "hazards", "failed", "tool_error", "not_applicable")

# compute-sanitizer returns this when it reported an error; otherwise it returns the target's own exit
# code (0 ran, 1 something other than the kernel failed, 2 the kernel failed: sanitize_target.py).
ERROR_EXITCODE = 86
PRINT_LIMIT = 20  # reports printed in full; the summary still counts every one
# Python and PyTorch start before the first CUDA call; the tool's default wait for the target (10 s)
# can run out on a cold machine. The whole run is bounded by ``timeout_s`` anyway.
LAUNCH_TIMEOUT_S = 120
TAIL_LINES = 40

# Methods -> the tools beyond racecheck they call for, decided by the kind of bug each method's change
# can bring in (method ids of references/method_registry.json; tests check that every id exists).
#   synccheck: barriers, arrive/wait, warp roles, cluster sync and shfl/syncwarp masks can be misused.
#   memcheck:  rewritten address arithmetic, wider or remapped accesses, tile edges, alignment.
#   initcheck: partial results in a workspace that can be read before every part was written.
METHOD_TOOLS: dict[str, tuple[str, ...]] = {
    "compute.warp_specialization": ("synccheck",),
    "compute.wgmma": ("synccheck",),
    "compute.thread_block_clusters": ("synccheck",),
    "compute.warp_shuffle_reduction": ("synccheck",),
    "memory.cp_async": ("synccheck",),
    "latency.multistage_pipeline": ("synccheck",),
    "latency.async_barriers": ("synccheck",),
    "latency.setmaxnreg": ("synccheck",),
    "memory.tma": ("memcheck", "synccheck"),
    "memory.tma_multicast": ("memcheck", "synccheck"),
    "memory.distributed_shared_memory": ("memcheck", "synccheck"),
    "memory.vectorized_access": ("memcheck",),
    "memory.coalescing": ("memcheck",),
    "memory.smem_tiling": ("memcheck",),
    "memory.bank_conflict_avoidance": ("memcheck",),
    "memory.ldmatrix": ("memcheck",),
    "memory.stmatrix": ("memcheck",),
    "memory.swizzled_tile_order": ("memcheck",),
    "compute.register_tiling": ("memcheck",),
    "compute.strength_reduction": ("memcheck",),
    "compute.packed_half2": ("memcheck",),
    "compute.persistent_kernel": ("memcheck",),
    "latency.grid_sizing": ("memcheck",),
    "compute.split_k": ("memcheck", "initcheck"),
    "compute.stream_k": ("memcheck", "initcheck"),
}

# Methods whose kernels stage data in shared memory: racecheck runs for them even when ptxas counts no
# static shared memory (dynamic ``extern __shared__`` memory is not in its count).
SHARED_MEMORY_METHODS = frozenset(
    {
        "compute.wgmma",
        "compute.register_tiling",
        "compute.warp_specialization",
        "compute.warp_shuffle_reduction",
        "compute.thread_block_clusters",
        "memory.coalescing",
        "memory.smem_tiling",
        "memory.bank_conflict_avoidance",
        "memory.cp_async",
        "memory.ldmatrix",
        "memory.stmatrix",
        "memory.tma",
        "memory.tma_multicast",
        "memory.distributed_shared_memory",
        "latency.double_buffering",
        "latency.multistage_pipeline",
        "latency.async_barriers",
    }
)


@frozen
class SanitizerReport:
    """One compute-sanitizer tool run on one kernel."""

    tool: str  # racecheck | memcheck | synccheck | initcheck
    status: str  # clean | hazards | failed | tool_error | not_applicable
    hazards: int | None = None  # racecheck: hazards displayed (errors + warnings)
    errors: int | None = None  # racecheck: hazards of error severity; other tools: the ERROR SUMMARY
    summary: str = ""  # one line for people
    log_tail: str = ""  # the last lines of the tool's log and of the target's output
    seconds: float = 0.0
    command: tuple[str, ...] = field(default=(), converter=as_tuple)
    warnings: int | None = None  # racecheck: hazards of warning severity
    timed_out: bool = False  # stopped at timeout_s (status tool_error): nothing was decided


@frozen
class ToolChoice:
    """A tool to run on a kernel, and why (for the branch's note)."""

    tool: str
    why: str


@frozen
class TargetOutcome:
    """What the sanitized process did, in its own words: ``sanitize_target`` rewrites it after each stage.

    compute-sanitizer can print a clean summary without the target having run anything (an old or
    broken install, a target that died before its first CUDA call); this is how kopt knows it ran."""

    stage: str  # prepared | launched | checked, or the stage that failed
    status: str = "running"  # running | done | failed (the kernel's fault) | error (anything else's)
    device: str = ""  # the launcher's device: cuda | cpu
    message: str = ""


@frozen
class SummaryCounts:
    """The counts compute-sanitizer printed (summed over its summary lines; None where none was printed)."""

    errors: int | None = None
    hazards: int | None = None
    warnings: int | None = None

    @property
    def found(self) -> int | None:
        counts = [n for n in (self.errors, self.hazards) if n is not None]
        return max(counts) if counts else None


# --------------------------------------------------------------------------------------- which tools


def _source_declares_shared(artifact: Artifact) -> bool:
    try:
        text = Path(artifact.source).read_text(errors="replace")
    except OSError:
        return False
    return "__shared__" in text


def choose_tools(artifact: Artifact, methods: Sequence[str] = ()) -> tuple[ToolChoice, ...]:
    """The tools to run on ``artifact`` (in ``TOOLS`` order), each with its reason.

    racecheck: when ptxas counts static shared memory or a barrier in any kernel, when the source declares
    ``__shared__`` memory (dynamic shared memory is not in ptxas's count), when a method stages data in
    shared memory, or when the resources are unknown (Triton, a backend without a ptxas report): a race
    not looked for is not a race ruled out. memcheck, synccheck, initcheck: as ``METHOD_TOOLS`` says."""
    reasons: dict[str, str] = {}
    resources = artifact.resources
    if not resources or any(r.shared_bytes is None for r in resources):
        reasons["racecheck"] = (
            f"the {artifact.backend} build reports no shared-memory use per kernel (no ptxas report), "
            "so racecheck runs anyway"
        )
    elif shared := [r.name for r in resources if (r.shared_bytes or 0) > 0]:
        reasons["racecheck"] = f"static shared memory in {', '.join(shared)}"
    elif synced := [r.name for r in resources if (r.barriers or 0) > 0]:
        reasons["racecheck"] = f"barriers in {', '.join(synced)} (dynamic shared memory is not counted)"
    elif _source_declares_shared(artifact):
        reasons["racecheck"] = "the source declares __shared__ memory (dynamic: not in ptxas's count)"
    elif staged := [m for m in methods if m in SHARED_MEMORY_METHODS]:
        reasons["racecheck"] = f"methods that stage data in shared memory: {', '.join(staged)}"
    callers: dict[str, list[str]] = {}
    for method in methods:
        for tool in METHOD_TOOLS.get(method, ()):
            callers.setdefault(tool, []).append(method)
    for tool, names in callers.items():
        reasons.setdefault(tool, f"called for by {', '.join(names)}")
    return tuple(ToolChoice(tool, reasons[tool]) for tool in TOOLS if tool in reasons)


def kernel_filter_for(artifact: Artifact) -> tuple[str, ...]:
    """compute-sanitizer's ``--kernel-name`` filters for the artifact's own kernels: one ``kns=NAME`` per
    kernel its build reports (ptxas's names, mangled as the tool sees them; the tool checks a kernel that
    matches any of them), or () when the build names none (Triton) or a name cannot be written as a filter
    value: then every kernel of the process is checked. Filtered, the reference's and torch's kernels run
    without instrumentation, which is much of a run's cost when the reference is itself a big kernel (a
    cuBLAS GEMM under racecheck). A filter that matched nothing would check nothing; the names come from
    the very build that is launched, and tests/gpu/test_sanitize_gpu.py shows a filtered racecheck finding
    a planted race."""
    names = sorted({r.name for r in artifact.resources if r.name})
    # A filter value is a comma-separated key=value list: a name with "," or "=" cannot be given exactly.
    if not names or any(c in name for name in names for c in ",= "):
        return ()
    return tuple(f"kns={name}" for name in names)


def tools_for(artifact: Artifact, methods: Sequence[str] = ()) -> tuple[str, ...]:
    """The tools ``choose_tools`` picks, without the reasons."""
    return tuple(choice.tool for choice in choose_tools(artifact, methods))


# --------------------------------------------------------------------------------------------- parsing

_LINE_PREFIX = re.compile(r"^=+ ?")
_ERROR_SUMMARY = re.compile(r"^=*\s*ERROR SUMMARY:\s*(\d+)\s+errors?\s*$", re.MULTILINE)
_RACECHECK_SUMMARY = re.compile(
    r"^=*\s*RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*"
    r"\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)",
    re.MULTILINE,
)
# The tool could not check this device or process: never a clean run, whatever else it printed.
_REFUSALS = (
    re.compile(r"device (is )?not supported|not supported on this (device|gpu|platform)", re.IGNORECASE),
    re.compile(r"\(error 999\)|\berror 999\b|CUDA_ERROR_UNKNOWN", re.IGNORECASE),
    re.compile(r"Internal Sanitizer Error", re.IGNORECASE),
    re.compile(r"No attachable process found", re.IGNORECASE),
    re.compile(r"Unable to (find|load) injection library", re.IGNORECASE),
    re.compile(r"unrecogni[sz]ed option|unknown option|invalid option", re.IGNORECASE),
)
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY")


def parse_counts(text: str) -> SummaryCounts:
    """The summary counts in compute-sanitizer's output (every process's summary, added up).

    ``ERROR SUMMARY: N errors`` is matched to the end of its line, so the follow-up line that says how
    many errors were not printed ("ERROR SUMMARY: N errors were not printed...") is not counted twice. A
    racecheck run that also prints an ERROR SUMMARY counts the larger of the two as its errors, since
    the same hazards may be in both."""
    errors = [int(m.group(1)) for m in _ERROR_SUMMARY.finditer(text)]
    races = [tuple(int(g) for g in m.groups()) for m in _RACECHECK_SUMMARY.finditer(text)]
    if races:
        return SummaryCounts(
            errors=max(sum(r[1] for r in races), sum(errors)),
            hazards=sum(r[0] for r in races),
            warnings=sum(r[2] for r in races),
        )
    return SummaryCounts(errors=sum(errors) if errors else None)


def refusal(text: str) -> str | None:
    """The line in which the tool says it could not check (unsupported device, error 999...), if any."""
    for line in text.splitlines():
        if any(pattern.search(line) for pattern in _REFUSALS):
            return _LINE_PREFIX.sub("", line.strip()).strip()
    return None


def first_finding(text: str) -> str:
    """The first report's headline (``Error: Race reported between ...``, ``Invalid __global__ read...``),
    for the one-line summary."""
    for line in text.splitlines():
        if not line.startswith("="):
            continue
        body = _LINE_PREFIX.sub("", line.rstrip())
        if body and not body[0].isspace() and not any(word in body for word in _NOT_FINDINGS):
            return body.strip()
    return ""


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------------------------- judging


def judge(
    tool: str,
    ran: Ran,
    tool_log: str,
    target_output: str,
    outcome: TargetOutcome | None,
    *,
    timeout_s: float,
) -> tuple[str, str]:
    """(status, one-line summary) from what the run left behind. The order matters, and errs towards
    "not clean": only a run whose target reported it was checked, with a summary of zero, is clean."""
    # The tool's own lines: its log, and what it wrote to the console before it could open the log (all
    # of the console when the target never ran). Not the kernel's output, which could say anything.
    console = (
        target_output
        if outcome is None
        else "\n".join(line for line in target_output.splitlines() if line.startswith("="))
    )
    counts = parse_counts(tool_log)
    code = ran.returncode
    if ran.error:
        return "tool_error", f"cannot run compute-sanitizer: {ran.error}"
    if outcome is not None and outcome.device and outcome.device != "cuda":
        return "not_applicable", (
            f"the kernel runs on {outcome.device}: compute-sanitizer checks CUDA kernels only"
        )
    if counts.found:
        finding = first_finding(tool_log)
        if tool == "racecheck":
            what = (
                f"{_plural(counts.hazards or 0, 'hazard')} "
                f"({_plural(counts.errors or 0, 'error')}, {_plural(counts.warnings or 0, 'warning')})"
            )
        else:
            what = _plural(counts.errors or 0, "error")
        return "hazards", f"{tool}: {what}" + (f"; first: {finding}" if finding else "")
    if code == ERROR_EXITCODE and counts.found is None:
        return "hazards", f"{tool}: exited with its error code {ERROR_EXITCODE} but printed no summary count"
    if refused := refusal(f"{tool_log}\n{console}"):
        return "tool_error", f"compute-sanitizer could not check this device or process: {refused}"
    if ran.timed_out:
        return "tool_error", (
            f"{tool} timed out after {timeout_s:g} s (kernels run 10-100x slower under compute-sanitizer)"
        )
    if outcome is not None and outcome.status == "failed":
        return "failed", f"the kernel failed under {tool} ({outcome.stage}): {outcome.message}"
    if outcome is not None and outcome.status == "error":
        return "tool_error", f"the check could not run ({outcome.stage}): {outcome.message}"
    if outcome is not None and outcome.status != "done" and code not in (0, None):
        return "failed", f"the target ended with exit code {code} during stage {outcome.stage} under {tool}"
    if outcome is None:
        return "tool_error", (
            f"the target never reported that it ran (exit code {code}): nothing was checked; "
            + (_tail(target_output, 1) or "no output")
        )
    if counts.found is None:
        return "tool_error", f"{tool} printed no summary (exit code {code}): the run did not finish"
    if outcome.status != "done":
        return (
            "tool_error",
            f"the target stopped at stage {outcome.stage} without a result (exit code {code})",
        )
    if code != 0:
        return "tool_error", f"compute-sanitizer exited {code} after a clean summary"
    if tool == "racecheck":
        return "clean", "racecheck: no shared-memory hazards (0 errors, 0 warnings)"
    return "clean", f"{tool}: 0 errors"


# --------------------------------------------------------------------------------------------- running


def find_sanitizer() -> str | None:
    return find_tool("compute-sanitizer")


def sanitizer_command(
    sanitizer: str,
    tool: str,
    tool_log: Path,
    target: Sequence[str],
    kernel_filter: str | Sequence[str] | None = None,
) -> list[str]:
    """compute-sanitizer's argv. The tool writes to its own log (``--log-file``), so nothing the kernel
    prints can pass for the tool's summary; ``%`` is doubled because the tool expands ``%p`` and the like
    in that name. The target's exit code is not counted as a tool error (``--check-exit-code no``): the
    target reports its own outcome. CUDA API errors are not counted either (``--report-api-errors no``):
    PyTorch's start-up probes some on purpose, and the kernel's launch errors reach the target anyway."""
    command = [
        sanitizer,
        "--tool",
        tool,
        "--error-exitcode",
        str(ERROR_EXITCODE),
        "--print-limit",
        str(PRINT_LIMIT),
        "--launch-timeout",
        str(LAUNCH_TIMEOUT_S),
        "--check-exit-code",
        "no",
        "--report-api-errors",
        "no",
        "--log-file",
        str(tool_log).replace("%", "%%"),
    ]
    if tool == "racecheck":
        # analysis: one report per pair of racing accesses, hazards grouped, each an error or a warning.
        command += ["--racecheck-report", "analysis"]
    filters = [kernel_filter] if isinstance(kernel_filter, str) else list(kernel_filter or ())
    for value in filters:  # additive: a kernel matching any of them is checked
        command += ["--kernel-name", value]
    return command + list(target)


def read_outcome(path: Path) -> TargetOutcome | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    known = {a.name for a in attrs.fields(TargetOutcome)}
    try:
        return TargetOutcome(**{k: str(v) for k, v in data.items() if k in known})
    except TypeError:
        return None


def run_sanitizer(
    request: BenchRequest,
    tool: str,
    *,
    timeout_s: float = 600,
    sanitizer: str | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    kernel_filter: str | Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> SanitizerReport:
    """Run ``tool`` on the kernel of ``request``: ``compute-sanitizer --tool TOOL ... python -m
    kopt_core.bench.sanitize_target REQUEST.json OUTCOME.json`` as an argv list (no shell), in its own
    process group, killed after ``timeout_s``. Never raises for the tool's or the kernel's failures.

    ``sanitizer``: the compute-sanitizer to run (default: found like the other CUDA tools). ``work_dir``:
    where the request, the tool's log and the target's output are kept (default: a temporary folder,
    removed afterwards; the report keeps their last lines). ``kernel_filter``: compute-sanitizer's
    ``--kernel-name`` filter (``kns=substring``, ...) or several (a kernel matching any is checked), to
    check only the candidate's kernels (``kernel_filter_for``).
    ``env``: extra environment for the target (a backend's ``ProfileLaunch.env``)."""
    if tool not in TOOLS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}; one of {', '.join(TOOLS)}")
    sanitizer = sanitizer or find_sanitizer()
    if sanitizer is None:
        return SanitizerReport(
            tool=tool,
            status="tool_error",
            summary="compute-sanitizer not found on PATH, in CUDA_HOME or the CUDA toolkit folders "
            "(it ships with the CUDA toolkit, package cuda-sanitizer)",
        )
    with ExitStack() as stack:
        if work_dir is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kopt-sanitize-")))
        else:
            folder = Path(work_dir)
            folder.mkdir(parents=True, exist_ok=True)
        request_path = write_json(folder / f"{tool}.request.json", to_data(request))
        outcome_path = folder / f"{tool}.outcome.json"
        tool_log = folder / f"{tool}.log"
        output_log = folder / f"{tool}.out"
        for stale in (outcome_path, tool_log):
            stale.unlink(missing_ok=True)
        target = [
            sys.executable,
            "-m",
            "kopt_core.bench.sanitize_target",
            str(request_path),
            str(outcome_path),
        ]
        command = sanitizer_command(sanitizer, tool, tool_log, target, kernel_filter)
        ran = run_in_group(
            command, timeout_s=timeout_s, env={**os.environ, **(env or {})}, log_path=output_log
        )
        log_text = tool_log.read_text(errors="replace") if tool_log.is_file() else ""
        output = output_log.read_text(errors="replace") if output_log.is_file() else ""
        outcome = read_outcome(outcome_path)
        status, summary = judge(tool, ran, log_text, output, outcome, timeout_s=timeout_s)
        counts = parse_counts(log_text)
        tail = _tail(log_text)
        if output.strip() and output != log_text:
            tail = f"{tail}\n--- target output ---\n{_tail(output, TAIL_LINES // 2)}".strip()
    return SanitizerReport(
        tool=tool,
        status=status,
        hazards=counts.hazards,
        errors=counts.errors,
        warnings=counts.warnings,
        summary=summary,
        log_tail=tail,
        seconds=ran.seconds,
        command=tuple(command),
        timed_out=bool(ran.timed_out) and status == "tool_error",
    )


__all__ = [
    "ERROR_EXITCODE",
    "METHOD_TOOLS",
    "SHARED_MEMORY_METHODS",
    "TOOLS",
    "SanitizerReport",
    "TargetOutcome",
    "ToolChoice",
    "choose_tools",
    "judge",
    "kernel_filter_for",
    "parse_counts",
    "run_sanitizer",
    "tools_for",
]
