"""``kopt gate``: step 0 of a run (docs/loop.md), the strict hardware gate, written to env.json.

No evidence, no generation. The gate authorises generation only when every required check passed:

* the tools the backend needs are found (cuda / cutlass: nvcc, cuobjdump and ncu; triton and others: ncu,
  with Triton's own cuobjdump taken from its backend probe); compute-sanitizer is recorded, never required;
* nvidia-smi lists an NVIDIA GPU, and a CUDA context can be created and a kernel run on it (in a
  subprocess: the gate's own process never initialises CUDA);
* the backend's dependencies resolve (``BackendRegistry.probe``);
* ncu reads real counters: it profiles one small torch kernel and at least one metric must parse to a
  number (ERR_NVGPUCTRPERM is named, with its fix);
* the device ceilings are measured (``python -m kopt_core.roofline.ceilings``), unless the caller skips it.

Discovery (tools, GPU, CUDA context, backend probe) is retried up to ``attempts`` times, stopping at the
first attempt where all of it passes, and only while every problem is one that another attempt could change
(nvidia-smi or the CUDA check timing out, a busy or failing device): a missing nvidia-smi, no driver, a
missing tool, a CPU-only PyTorch or an unusable backend stay as they are, so they are reported after one
attempt. Without a driver the CUDA context is not tried (it cannot exist), and each cause is reported once:
a check that could not run because of a problem already listed adds no line of its own. The counter check
and the ceilings run once, after discovery; a kernel is never retried.
``diagnostic`` runs everything and reports it, but never authorises generation. env.json is written on
failure too: it is the evidence of why generation is refused.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import field, frozen

from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.hardware import discover_gpus
from kopt_core.jsonio import write_json
from kopt_core.ncu.parse import parse_raw_csv
from kopt_core.process import run_in_group
from kopt_core.records import ProbeResult, from_data, read_document, to_data
from kopt_core.records.fields import as_tuple
from kopt_core.records.roofline import Ceilings
from kopt_core.records.state import Env, EnvGpu, ToolFound
from kopt_core.tools import find_tool, tool_folders

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

MAX_ATTEMPTS = 3
TOOLS = ("nvcc", "cuobjdump", "ncu", "compute-sanitizer")
TOOL_HINTS = {
    "nvcc": "install the CUDA toolkit or set CUDA_HOME",
    "cuobjdump": "it ships with the CUDA toolkit (package cuda-cuobjdump); install it or set CUDA_HOME",
    "ncu": "install Nsight Compute or put ncu on PATH",
    "compute-sanitizer": "it ships with the CUDA toolkit (package cuda-sanitizer)",
}

VERSION_TIMEOUT_S = 20.0
CONTEXT_TIMEOUT_S = 120.0
COUNTERS_TIMEOUT_S = 300.0
CEILINGS_TIMEOUT_S = 600.0
COUNTER_METRICS = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed")
MARKER = "KOPT_GATE "
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_FIX = (
    "run as root, or set the nvidia module option NVreg_RestrictProfilingToAdminUsers=0 (e.g. "
    "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/, then reload the driver "
    "or reboot)"
)

# Creates a CUDA context, runs a kernel whose result is checked, and prints what the device is.
CONTEXT_SCRIPT = r"""
import json, sys
try:
    import torch
    torch.cuda.init()
    index = torch.cuda.current_device()
    x = torch.full((1 << 20,), 2.0, device="cuda", dtype=torch.float32)
    total = float((x * 3.0).sum().item())
    torch.cuda.synchronize()
    if total != 6.0 * (1 << 20):
        raise RuntimeError(f"a test kernel computed {total}, not {6.0 * (1 << 20)}")
    props = torch.cuda.get_device_properties(index)
    free, _ = torch.cuda.mem_get_info(index)
    print("KOPT_GATE " + json.dumps({
        "ok": True, "name": props.name, "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory,
        "free_memory_bytes": free, "device_index": index, "device_count": torch.cuda.device_count(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda or "",
    }), flush=True)
except BaseException as exc:
    print("KOPT_GATE " + json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    sys.exit(1)
"""

# One small kernel for ncu to profile.
COUNTER_SCRIPT = (
    "import torch\n"
    "x = torch.ones(1 << 20, device='cuda')\n"
    "y = x * 2.0\n"
    "torch.cuda.synchronize()\n"
    "print('KOPT_GATE kernel ran', flush=True)\n"
)


# ---------------------------------------------------------------------------------------------- running


def _marker_json(stdout: str) -> dict | None:
    import json

    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER) :])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


# ------------------------------------------------------------------------------------------------ tools

_VERSION_LINE = re.compile(r"(release|version)\s*v?\d", re.IGNORECASE)


def tool_version(path: str) -> str:
    """A one-line version of a tool from ``--version``: the first line that names a version or release
    (nvcc, cuobjdump and ncu put it below a banner), else the first line; "" when it cannot be asked."""
    ran = run_in_group([path, "--version"], timeout_s=VERSION_TIMEOUT_S)
    if ran.returncode != 0:
        return ""
    lines = [line.strip() for line in ran.stdout.splitlines() if line.strip()]
    return next((line for line in lines if _VERSION_LINE.search(line)), lines[0] if lines else "")[:200]


def _searched(tool: str) -> tuple[str, ...]:
    return ("PATH", *tool_folders(tool))


def find_tools(backend: str, probe: ProbeResult, versions: dict[str, str]) -> list[ToolFound]:
    """Every tool the gate knows, found or not, with where it was looked for. A tool the backend's probe
    names in its details (the Triton wheel's cuobjdump) is the one that backend uses; ``versions`` caches
    ``--version``."""
    found = []
    for name in TOOLS:
        path = find_tool(name)
        searched = _searched(name)
        from_probe = (probe.details or {}).get(name)
        if isinstance(from_probe, str) and from_probe:
            path, searched = from_probe, (f"the {backend} backend's probe", *searched)
        version = ""
        if path:
            if path not in versions:
                versions[path] = tool_version(path)
            version = versions[path]
        found.append(ToolFound(name=name, path=path, version=version, searched=searched))
    return found


def _tool_problem(tool: ToolFound) -> str:
    where = ", ".join(tool.searched) or "PATH"
    return f"{tool.name} not found (looked in: {where}); {TOOL_HINTS.get(tool.name, 'install it')}"


# ------------------------------------------------------------------------------------- GPU and context


def cuda_context(timeout_s: float = CONTEXT_TIMEOUT_S) -> tuple[dict | None, str]:
    """(what the CUDA context reports, "") or (None, why no context could be created). In a subprocess."""
    ran = run_in_group([sys.executable, "-c", CONTEXT_SCRIPT], timeout_s=timeout_s)
    if ran.error:
        return None, f"CUDA context could not be created: the check could not start ({ran.error})"
    if ran.timed_out:
        return None, f"CUDA context could not be created: the check timed out after {timeout_s:g} s"
    answer = _marker_json(ran.stdout)
    if answer is not None and answer.get("ok") and ran.returncode == 0:
        answer.pop("ok", None)
        return answer, ""
    why = answer.get("error") if answer else f"exit {ran.returncode}: {ran.tail()}"
    if "not compiled with CUDA" in str(why):
        why = f"{why} (this PyTorch is a CPU-only build: install a CUDA build of torch)"
    elif "No module named 'torch'" in str(why):
        why = f"{why} (PyTorch is not installed; the benchmark needs it)"
    return None, f"CUDA context could not be created: {why}"


# What a CUDA context that could not be created says when another attempt cannot help: no driver or no
# device, a CPU-only PyTorch or none. Anything else (a timeout, a busy device, an unknown error) may pass.
_CONTEXT_LASTING = (
    "not compiled with CUDA",
    "No module named 'torch'",
    "no CUDA GPUs are available",
    "Found no NVIDIA driver",
    "no CUDA-capable device is detected",
    "CUDA driver version is insufficient",
)


def context_lasting(problem: str) -> bool:
    """Whether a failed CUDA context (``cuda_context``'s reason) would fail again however often asked."""
    return any(words in problem for words in _CONTEXT_LASTING)


def _gpu_data(gpus: list, context: dict | None) -> EnvGpu | None:
    data: dict = {}
    if gpus:
        first = gpus[0]
        data = {
            "name": first.name,
            "capability": first.capability,
            "driver": first.driver,
            "memory_mib": first.memory_mib,
            "index": first.index,
            "count": len(gpus),
            "source": "nvidia-smi",
        }
    if context:
        data.update(context)
        data["source"] = "cuda context" + (" and nvidia-smi" if gpus else "")
    return from_data(data, EnvGpu) if data else None


# ---------------------------------------------------------------------------------------------- counters


def check_counters(ncu: str, timeout_s: float = COUNTERS_TIMEOUT_S) -> tuple[dict[str, float], str]:
    """Profile one small torch kernel with ncu: ({metric: value} parsed, "") or ({}, why not)."""
    command = [
        ncu,
        "--clock-control",
        "none",
        "--metrics",
        ",".join(COUNTER_METRICS),
        "--csv",
        "--page",
        "raw",
        "--target-processes",
        "all",
        sys.executable,
        "-c",
        COUNTER_SCRIPT,
    ]
    ran = run_in_group(command, timeout_s=timeout_s)
    if ran.error:
        return {}, f"ncu could not be started ({ran.error})"
    if PERMISSION_ERROR in ran.stdout or PERMISSION_ERROR in ran.stderr:
        return {}, (
            f"ncu cannot read the GPU's performance counters: the driver forbids counters for this user "
            f"({PERMISSION_ERROR}); to fix: {PERMISSION_FIX}"
        )
    if ran.timed_out:
        return {}, f"ncu did not finish profiling a small test kernel within {timeout_s:g} s"
    try:
        report = parse_raw_csv(ran.stdout, source="ncu's output for the gate's test kernel")
    except HardwareError as exc:
        return {}, f"ncu read no counters (exit {ran.returncode}): {exc.message}; ncu said: {ran.tail()}"
    values = {
        name: metric.value
        for kernel in report.kernels
        for name, metric in kernel.metrics.items()
        if name in COUNTER_METRICS and metric.value is not None
    }
    if not values:
        return {}, (
            f"ncu profiled the test kernel but no counter parsed to a number (exit {ran.returncode}); "
            f"ncu said: {ran.tail()}"
        )
    return values, ""


# ---------------------------------------------------------------------------------------------- ceilings


def measure_device_ceilings(timeout_s: float = CEILINGS_TIMEOUT_S) -> tuple[Ceilings | None, str]:
    """``python -m kopt_core.roofline.ceilings`` in a subprocess: (Ceilings, "") or (None, why)."""
    with tempfile.TemporaryDirectory(prefix="kopt_gate_") as folder:
        path = Path(folder) / "ceilings.json"
        ran = run_in_group(
            [sys.executable, "-m", "kopt_core.roofline.ceilings", str(path)], timeout_s=timeout_s
        )
        if ran.error:
            return None, f"device ceilings could not be measured: {ran.error}"
        if ran.timed_out:
            return None, f"device ceilings could not be measured: timed out after {timeout_s:g} s"
        if ran.returncode != 0 or not path.is_file():
            return None, f"device ceilings could not be measured (exit {ran.returncode}): {ran.tail()}"
        try:
            return read_document(path, Ceilings, "ceilings"), ""
        except (OSError, ValueError) as exc:
            return None, f"device ceilings could not be read back: {exc}"


# --------------------------------------------------------------------------------------------- discovery


@frozen
class Discovery:
    """One attempt's findings: tools, GPUs, the CUDA context and the backend probe; ``problems``, each
    cause in words once, and ``lasting``, those of them another attempt cannot change."""

    tools: tuple[ToolFound, ...] = field(converter=as_tuple)
    gpus: list
    context: dict | None
    probe: ProbeResult
    problems: tuple[str, ...] = field(converter=as_tuple)
    lasting: tuple[str, ...] = field(default=(), converter=as_tuple)

    def tool(self, name: str) -> ToolFound | None:
        return next((t for t in self.tools if t.name == name), None)

    @property
    def worth_retrying(self) -> bool:
        """Whether another attempt could pass: every problem is one a retry can change."""
        return bool(self.problems) and not self.lasting


def discover(
    pm: PluginManager, registry: BackendRegistry, backend: str, versions: dict[str, str]
) -> Discovery:
    """Tools, GPU, CUDA context and backend probe, each failure in words once. Without an NVIDIA driver
    the CUDA context is not tried; with no GPU listed, a failed context is part of that one problem."""
    problems: list[str] = []
    lasting: list[str] = []

    def problem(text: str, *, retry_can_change: bool) -> None:
        problems.append(text)
        if not retry_can_change:
            lasting.append(text)

    gpu = discover_gpus()
    gpus = gpu.gpus
    context, context_problem = (None, "") if gpu.driver is False else cuda_context()
    if not gpus:
        # one cause: no GPU; what the CUDA check then says is part of it, not a problem of its own
        text = f"no NVIDIA GPU: {gpu.reason}" + (f"; {context_problem}" if context_problem else "")
        problem(text, retry_can_change=gpu.retryable)
    elif context_problem:
        problem(context_problem, retry_can_change=not context_lasting(context_problem))
    findings = {
        "tools": {name: find_tool(name) for name in TOOLS},
        "gpus": [{"index": g.index, "name": g.name, "capability": g.capability} for g in gpus],
        "cuda_context": context is not None,
    }
    probe = registry.probe(backend, findings)
    tools = find_tools(backend, probe, versions)
    required = registry.get(backend).required_tools
    for tool in tools:
        if tool.name in required and not tool.path:
            problem(_tool_problem(tool), retry_can_change=False)
    if not probe.available:
        problem(
            f"backend {backend} is not usable here: {probe.reason or 'its probe says unavailable'}",
            retry_can_change=False,
        )
    return Discovery(tools=tools, gpus=gpus, context=context, probe=probe, problems=problems, lasting=lasting)


# -------------------------------------------------------------------------------------------------- gate


def run_gate(
    pm: PluginManager,
    *,
    backend: str,
    attempts: int = MAX_ATTEMPTS,
    diagnostic: bool = False,
    measure: bool = True,
    out: Path | None = None,
    retry_delay_s: float = 1.0,
    on_progress: Callable[[str], None] | None = None,
) -> Env:
    """The strict hardware gate (module docstring). Writes env.json to ``out`` (also when it refuses)
    and returns the Env. Raises ConfigError only for a bad request (unknown backend, attempts out of
    range)."""
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise ConfigError(f"attempts must be between 1 and {MAX_ATTEMPTS}, not {attempts}")
    registry = BackendRegistry.from_plugins(pm)
    registry.get(backend)  # an unknown backend is the user's mistake (exit 4), not the machine's

    def say(message: str) -> None:
        if on_progress is not None:
            on_progress(message)

    versions: dict[str, str] = {}
    attempt = 0
    found: Discovery | None = None
    for attempt in range(1, attempts + 1):
        say(
            f"attempt {attempt}/{attempts}: looking for tools, the GPU, a CUDA context and the {backend} "
            "backend"
        )
        found = discover(pm, registry, backend, versions)
        if not found.problems or attempt == attempts:
            break
        if not found.worth_retrying:
            say(
                f"attempt {attempt} failed ({len(found.problems)} problem(s)); not retrying: another attempt "
                "cannot change " + ("it" if len(found.problems) == 1 else "them")
            )
            break
        say(f"attempt {attempt} failed ({len(found.problems)} problem(s)); retrying discovery")
        time.sleep(retry_delay_s)
    assert found is not None

    problems = list(found.problems)
    ncu = found.tool("ncu")
    counters: dict[str, float] = {}
    if ncu is not None and ncu.path and found.context is not None:
        say("profiling a small kernel with ncu to prove it reads counters")
        counters, why = check_counters(ncu.path)
        if why:
            problems.append(why)
    elif (ncu is None or not ncu.path) and "ncu" not in registry.get(backend).required_tools:
        problems.append("ncu's counters were not checked: ncu was not found")
    # else the reason the counters were not checked is listed already: ncu missing (a tool the backend
    # requires), or no CUDA context (no GPU, or the context's own problem)

    ceilings = None
    if measure and not problems:
        say("measuring the device ceilings (bandwidth and matmul throughput)")
        ceilings, why = measure_device_ceilings()
        if why:
            problems.append(why)

    env = Env(
        backend=backend,
        generation_allowed=not problems and not diagnostic,
        diagnostic=diagnostic,
        attempts=attempt,
        gpu=_gpu_data(found.gpus, found.context),
        cuda_context=found.context is not None,
        can_read_counters=bool(counters),
        tools=found.tools,
        backend_probe=found.probe,
        ceilings=ceilings,
        problems=problems,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if out is not None:
        write_json(out, to_data(env))
    return env


@frozen
class GateOutcome:
    """What ``kopt gate`` ends with: env.json, and the gate's word on it. ``warning``: a diagnostic run,
    which never authorises generation; ``failure``: the refusal (exit 3), with the problems."""

    env: Env
    warning: str | None = None
    failure: HardwareError | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.failure is None else self.failure.exit_code


def passed_checks(env: Env) -> list[str]:
    """What the gate found working, in words: the GPU, the CUDA context, the counters, each tool found and
    the backend's toolchain."""
    found = []
    if env.gpu is not None and env.gpu.name:
        found.append(f"the GPU ({env.gpu.name})")
    if env.cuda_context:
        found.append("a CUDA context")
    if env.can_read_counters:
        found.append("ncu's counters")
    found += [tool.name + (f" ({tool.version})" if tool.version else "") for tool in env.tools if tool.path]
    if env.backend_probe is not None and env.backend_probe.available:
        found.append(f"the {env.backend} backend's toolchain")
    return found


def refusal_headline(env: Env, out: str | Path | None = None, passed: str = "") -> str:
    """The refusal's first line: ``passed`` (what a caller checked before the gate, e.g. the kernel's
    contract and build), what the gate found working, then that it refuses generation."""
    evidence = f"; evidence in {out}" if out is not None else ""
    found = passed_checks(env)
    return (
        (f"{passed}; " if passed else "")
        + (f"found {', '.join(found)}; " if found else "")
        + f"the hardware gate refuses generation ({env.attempts} attempt(s){evidence})"
    )


def refusal(
    env: Env, out: str | Path | None = None, passed: str = "", hint: str | None = None
) -> HardwareError:
    """The gate's refusal (exit 3) of ``env``: ``refusal_headline``, then each problem on a line of its
    own. ``kopt optimize`` passes what its preflight checked as ``passed``, so the message says what
    passed before it says what is missing."""
    problems = "".join(f"\n  - {problem}" for problem in env.problems)
    return HardwareError(f"{refusal_headline(env, out, passed)}, missing:{problems}", hint=hint)


def gate_verdict(env: Env, out: str | Path) -> GateOutcome:
    """Exit 0 when ``env`` allows generation, or (with a warning) when it was a diagnostic run; else the
    refusal, naming the evidence ``out``, what passed and every problem."""
    if env.generation_allowed:
        return GateOutcome(env)
    problems = "".join(f"\n  - {problem}" for problem in env.problems)
    if env.diagnostic:
        return GateOutcome(
            env, warning=f"diagnostic run: generation is never authorised; wrote {out}{problems}"
        )
    return GateOutcome(env, failure=refusal(env, out))


def gate_outcome(
    pm: PluginManager,
    *,
    backend: str,
    attempts: int = MAX_ATTEMPTS,
    diagnostic: bool = False,
    measure: bool = True,
    out: str | Path,
    on_progress: Callable[[str], None] | None = None,
) -> GateOutcome:
    """``kopt gate``: ``run_gate`` writing env.json to ``out``, then ``gate_verdict``."""
    env = run_gate(
        pm,
        backend=backend,
        attempts=attempts,
        diagnostic=diagnostic,
        measure=measure,
        out=Path(out),
        on_progress=on_progress,
    )
    return gate_verdict(env, out)
