"""The run's state (state.json, schema v5), its environment (env.json) and how a run stopped (stop.json).

Field names are the seed's. state.json is rewritten atomically by every step; a killed step leaves the
previous state readable and can be run again.
"""

from __future__ import annotations

from attrs import field, frozen

STATE_SCHEMA_VERSION = 5
ENV_SCHEMA_VERSION = 1

@frozen
class ToolFound:
    name: str  # nvcc | cuobjdump | ncu | compute-sanitizer
    path: str | None
    version: str = ""
    searched: tuple[str, ...] = field(default=(), converter=tuple)


@frozen
class Env:
    """env.json: what the hardware gate found, and whether it allows generation."""

    backend: str
    generation_allowed: bool
    diagnostic: bool = False
    attempts: int = 1
    gpu: dict = field(factory=dict)  # name, capability, driver, memory, sm_count (from the CUDA context)
    cuda_context: bool = False
    can_read_counters: bool = False
    tools: tuple[ToolFound, ...] = field(default=(), converter=tuple)
    backend_probe: dict = field(factory=dict)  # the backend's kopt_probe answer
    ceilings: dict | None = None  # kopt_core.roofline.records.Ceilings as data
    problems: tuple[str, ...] = field(default=(), converter=tuple)  # why generation is not allowed
    created_at: str = ""
    schema_version: int = ENV_SCHEMA_VERSION


@frozen
class HistoryEntry:
    iteration: int
    kernel: str
    best_ms: float | None
    methods: tuple[str, ...] = field(default=(), converter=tuple)
    verified: bool = False
    note: str = ""


@frozen
class State:
    """state.json, schema v5: every field the seed names."""

    run_dir: str
    baseline_file: str
    ref_file: str
    best_file: str
    dims: dict
    backend: str
    env: dict = field(factory=dict)
    best_metric_ms: float | None = None
    best_ncu_rep: str | None = None
    iterations_total: int = 3
    ncu_num: int = 5
    branches: int = 4
    compile_jobs: str = "auto"
    numerics_mode: str = "reference"  # reference | strict | approximate
    selected_methods: tuple[str, ...] = field(default=(), converter=tuple)
    effective_methods: tuple[str, ...] = field(default=(), converter=tuple)
    ineffective_methods: tuple[str, ...] = field(default=(), converter=tuple)
    implementation_failed_methods: tuple[str, ...] = field(default=(), converter=tuple)
    unverified_methods: tuple[str, ...] = field(default=(), converter=tuple)
    history: tuple[HistoryEntry, ...] = field(default=(), converter=tuple)
    roofline_history: tuple[dict, ...] = field(default=(), converter=tuple)
    frontier: tuple[dict, ...] = field(default=(), converter=tuple)
    run_status: str = "initialized"  # initialized | seeded | running | awaiting_branches | completed | stopped
    generation_allowed: bool = False
    stop_reason: str | None = None
    stop_stage: str | None = None
    hardware_attempts: int = 0
    verified_iterations: int = 0
    last_verified_iter: int | None = None
    schema_version: int = STATE_SCHEMA_VERSION


@frozen
class Stop:
    """stop.json: a stopped run says where, why, and with which exit code."""

    stage: str  # gate | preflight | seed | iter_open | ...
    reason: str
    exit_code: int
    iteration: int | None = None
    created_at: str = ""
    schema_version: int = 1
