"""The run's state (state.json, schema v7), its environment (env.json) and how a run stopped (stop.json).

docs/loop.md lists the fields. state.json is rewritten atomically by every step; a killed step leaves
the previous state readable and can be run again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from attrs import field, frozen

from kopt_core.records.backend import ProbeResult
from kopt_core.records.fields import as_tuple
from kopt_core.records.roofline import DEFAULT_CEILINGS, Ceilings, Roofline
from kopt_core.records.versions import ENV_SCHEMA_VERSION, STATE_SCHEMA_VERSION, STOP_SCHEMA_VERSION

# compute-sanitizer's limit per tool and branch (state.sanitizer_timeout_s). A 2048^3 register-tiled SGEMM
# needed 30 s under racecheck on the H200; another needed more than 385 s under four tools at once.
SANITIZER_TIMEOUT_S = 120.0


@frozen
class ToolFound:
    name: str  # nvcc | cuobjdump | ncu | compute-sanitizer
    path: str | None
    version: str = ""
    searched: tuple[str, ...] = field(default=(), converter=as_tuple)


@frozen
class EnvGpu:
    """The GPU the gate found: nvidia-smi's answer, completed by what a CUDA context on it reports."""

    name: str = ""
    capability: str = ""  # "9.0"
    driver: str = ""
    memory_mib: int | None = None  # nvidia-smi's total
    index: int | None = None  # nvidia-smi's index of the first visible GPU
    count: int | None = None  # GPUs nvidia-smi lists
    sm_count: int | None = None
    memory_bytes: int | None = None  # the CUDA context's total
    free_memory_bytes: int | None = None
    device_index: int | None = None
    device_count: int | None = None
    torch: str = ""
    torch_cuda: str = ""
    source: str = ""  # nvidia-smi | cuda context | cuda context and nvidia-smi


@frozen
class Env:
    """env.json: what the hardware gate found, and whether it allows generation."""

    backend: str
    generation_allowed: bool
    diagnostic: bool = False
    attempts: int = 1
    gpu: EnvGpu | None = None  # None: no GPU was found
    cuda_context: bool = False
    can_read_counters: bool = False
    tools: tuple[ToolFound, ...] = field(default=(), converter=as_tuple)
    backend_probe: ProbeResult | None = None  # None: the backend was not probed
    ceilings: Ceilings | None = None  # None: not measured
    problems: tuple[str, ...] = field(default=(), converter=as_tuple)  # why generation is not allowed
    created_at: str = ""
    schema_version: int = ENV_SCHEMA_VERSION


def _pair_or_none(value: Iterable[float] | None) -> tuple[float, float] | None:
    """An interval (low, high) from the list JSON holds; anything but two numbers is an error."""
    if value is None:
        return None
    pair = tuple(value)
    if len(pair) != 2:
        raise ValueError(f"an interval is [low, high], not {len(pair)} numbers")
    return (pair[0], pair[1])


@frozen
class HistoryEntry:
    """One closed iteration, as the update step recorded it (docs/loop.md, "State-update rules"). The
    fields after ``note`` came with schema v7; an entry of an older document leaves them unknown."""

    iteration: int
    kernel: str  # the champion, relative to the run folder ("iterv1/kernel.cu"); "" when there was none
    best_ms: float | None  # the run's best time after this iteration
    methods: tuple[str, ...] = field(default=(), converter=as_tuple)
    verified: bool = False
    note: str = ""
    champion: str | None = None  # the champion's branch id
    champion_ms: float | None = None  # its median in explore
    promotion: str | None = None  # the paired verdict: faster | not_faster | slower | invalid
    promoted: bool | None = None  # it became the best; None: not recorded (before v7)
    speedup: float | None = None  # best_ms before / champion, paired (>1: the champion is faster)
    speedup_ci: tuple[float, float] | None = field(default=None, converter=_pair_or_none)
    methods_effective: tuple[str, ...] = field(default=(), converter=as_tuple)
    methods_ineffective: tuple[str, ...] = field(default=(), converter=as_tuple)
    methods_implementation_failed: tuple[str, ...] = field(default=(), converter=as_tuple)
    methods_unverified: tuple[str, ...] = field(default=(), converter=as_tuple)
    # the evidence, relative to the run folder: explore, paired, attribution, sass_check -> path
    evidence: dict[str, str] = field(factory=dict)


@frozen
class RooflineHistoryEntry:
    """The verdict of one profile's roofline (iteration 0 is the baseline). The whole reading, with its
    ceilings and reasons, stays in that profile's roofline.json."""

    iteration: int | None = None  # None only in entries of v4 documents, which did not number them
    bound: str = "unknown"
    near_peak: bool = False
    delta_compute: float | None = None
    delta_memory: float | None = None
    delta_latency: float | None = None
    axis_budget: dict[str, int] = field(factory=dict)
    label: str = ""
    duration_ms: float | None = None

    @classmethod
    def of(cls, iteration: int, roofline: Roofline) -> RooflineHistoryEntry:
        return cls(
            iteration=iteration,
            bound=roofline.bound,
            near_peak=roofline.near_peak,
            delta_compute=roofline.delta_compute,
            delta_memory=roofline.delta_memory,
            delta_latency=roofline.delta_latency,
            axis_budget=dict(roofline.axis_budget),
            label=roofline.label,
            duration_ms=roofline.duration_ms,
        )


def is_positive_seconds(value: object) -> bool:
    """A positive, finite number of seconds (a bool is not one): what a time limit may be."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < math.inf


def _positive_seconds(_instance: object, attribute: Any, value: object) -> None:
    """A hand-edited state.json cannot set a limit of no time, a negative one or none at all."""
    if not is_positive_seconds(value):
        raise ValueError(f"{attribute.name} must be a positive, finite number of seconds, got {value!r}")


@frozen
class State:
    """state.json, schema v7: every field docs/loop.md lists."""

    run_dir: str
    baseline_file: str
    ref_file: str
    best_file: str
    dims: dict[str, Any]
    backend: str
    env: Env | None = None  # env.json as init read it
    best_metric_ms: float | None = None
    best_ncu_rep: str | None = None
    iterations_total: int = 3
    ncu_num: int = 5
    branches: int = 4
    # The branches per iteration from the next iteration that opens, when `kopt optimize --resume --k`
    # changed them while the open iteration's candidates were written already (they keep ``branches``).
    # None: no change pending. Absent from a state.json written before it: None.
    branches_next: int | None = None
    compile_jobs: str = "auto"
    numerics_mode: str = "reference"  # reference | strict | approximate
    # Each compute-sanitizer tool's run on a branch is stopped after this long; race_safe is then unknown
    # (explore's race check, docs/measurement.md). Absent from a state.json written before it: this default.
    sanitizer_timeout_s: float = field(default=SANITIZER_TIMEOUT_S, validator=_positive_seconds)
    selected_methods: tuple[str, ...] = field(default=(), converter=as_tuple)
    effective_methods: tuple[str, ...] = field(default=(), converter=as_tuple)
    ineffective_methods: tuple[str, ...] = field(default=(), converter=as_tuple)
    implementation_failed_methods: tuple[str, ...] = field(default=(), converter=as_tuple)
    unverified_methods: tuple[str, ...] = field(default=(), converter=as_tuple)
    history: tuple[HistoryEntry, ...] = field(default=(), converter=as_tuple)
    roofline_history: tuple[RooflineHistoryEntry, ...] = field(default=(), converter=as_tuple)
    # the correct non-champion branches; nothing reads them by key yet, so they stay as the writer wrote them
    frontier: tuple[dict[str, Any], ...] = field(default=(), converter=as_tuple)
    run_status: str = (
        "initialized"  # initialized | seeded | running | awaiting_candidates | completed | stopped
    )
    generation_allowed: bool = False
    stop_reason: str | None = None
    stop_stage: str | None = None
    hardware_attempts: int = 0
    verified_iterations: int = 0
    last_verified_iter: int | None = None
    # The smallest relative effect a paired comparison may call real, measured when the baseline was seeded
    # by pairing it with itself (A/A); noise_evidence is that pairing's paired.json. None: not measured
    # (a run seeded before v7), and then nothing is promoted or attributed until it is.
    noise_threshold: float | None = None
    noise_evidence: str | None = None
    schema_version: int = STATE_SCHEMA_VERSION

    @property
    def closed_iterations(self) -> int:
        """How many iterations were updated (verified or not): the next to open is this plus one. An
        unverified iteration is closed too; it only never counts in verified_iterations."""
        return max((entry.iteration for entry in self.history), default=0)


def ceilings_of(state: State) -> Ceilings:
    """The ceilings the gate measured (env.json), else the built-in H200 figures (docs/measurement.md)."""
    if state.env is not None and state.env.ceilings is not None:
        return state.env.ceilings
    return DEFAULT_CEILINGS


@frozen
class StopRecord:
    """stop.json: a stopped run says where, why, and with which exit code."""

    stage: str  # gate | preflight | seed | iter_open | ...
    reason: str
    exit_code: int
    iteration: int | None = None
    created_at: str = ""
    schema_version: int = STOP_SCHEMA_VERSION
