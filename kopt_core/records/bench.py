"""What one benchmark asks for and what it found (bench.json)."""

from __future__ import annotations

import os
from typing import Any, Literal

from attrs import field, frozen

from kopt_core.records.build import Artifact
from kopt_core.records.fields import as_tuple
from kopt_core.records.versions import BENCH_SCHEMA_VERSION, read_document

TimingMode = Literal["auto", "per_launch", "graph", "batched"]
L2Mode = Literal["cold", "warm"]
Status = Literal["ok", "failed", "error"]

# Why a kernel failed, in one word: what bench.json, paired.json and explore.json say as ``violation``.
# docs/measurement.md ("What a cheating kernel meets") says what catches each.
VIOLATIONS: dict[str, str] = {
    "wrong_output": "its outputs differ from the reference's on a checked launch",
    "wrote_inputs": "it wrote into an input buffer",
    "replay": "it skipped or replayed work on inputs it had already seen",
    "audit_failed": "a timed launch, picked at random after it ran, was wrong on its own inputs",
    "wrong_after_timing": "after timing, with fresh inputs, its outputs no longer match",
    "escaped_stream": "GPU work ran outside the timed stream or after solve returned",
    "threads_left": "threads it started were still running",
    "patched_code": "its code changed a timing function, a check, kopt's own code or the reference",
    "precision_switch": "its code changed a PyTorch precision switch (TF32, reduced-precision reductions)",
    "persisting_l2": "it set aside persisting L2, which a flush between launches does not clear",
    "inputs_not_fresh": "its setup() gives the same inputs for different seeds",
    "exited": "it ended the worker process or told it to exit",
    "launch_failed": "it could not be launched or failed while running",
}


@frozen
class BenchOptions:
    """How to check and time. The defaults are explained in docs/measurement.md."""

    seeds: tuple[int, ...] = field(default=(0, 1, 2), converter=as_tuple)
    recheck_seed: int = 1_000_003  # fresh inputs after the timed loop
    l2: L2Mode = "cold"
    mode: TimingMode = "auto"
    warmup_ms: float = 200.0  # warm up by time, so clocks settle
    budget_s: float = 3.0  # time budget for timed samples, per timed function
    rel_precision: float = 0.005  # stop when the median's 95% interval is within +-0.5%
    min_samples: int = 30
    max_samples: int = 2000
    tiny_us: float = 20.0  # below this per-launch time, time as graph replays / batches
    batch_target_ms: float = 2.0  # a graph or batch runs at least this long per sample
    timeout_s: float = 300.0  # the whole worker, wall clock
    time_reference: bool = True
    atol: float | None = None  # override the reference's tolerances
    rtol: float | None = None


# How the steps after the seed check and time a kernel (explore, the pairings of promotion, ablation and
# the A/A noise, the search): every check bench makes, a shorter timing budget, and never the reference
# again (the seed timed it). The paired comparison, not a single median, decides what is faster.
LOOP_OPTIONS = BenchOptions(budget_s=1.0, warmup_ms=100.0, time_reference=False)


@frozen
class Defences:
    """What one timed function met on its way to a time (docs/measurement.md, "What a cheating kernel
    meets"): fresh inputs for every timed launch, audits, the repeat trap, the stream check, and what
    its code had to leave as it found it."""

    fresh_inputs: str  # how each timed launch got inputs it had not seen, or why it could not
    launches: int = 0  # timed launches, each on fresh inputs with its outputs poisoned
    audits: int = 0  # timed launches checked against the reference after they ran
    audited: tuple[int, ...] = field(default=(), converter=as_tuple)  # which (0-based, in order)
    repeat_median_ms: float | None = None  # the repeat trap: per launch, on inputs seen just before
    fresh_median_ms: float | None = None  # the same function's median on fresh inputs
    residue_ms: float | None = None  # GPU time left after solve returned (least of three launches)
    profiled_ms: float | None = None  # every kernel's GPU time per launch, all streams (when measured)
    stream_note: str = ""
    persisting_l2: str = ""  # reset before every timed launch, or why it could not be
    watched: str = ""  # what the kernel's code had to leave alone, and how often it was looked at
    cost_s: float = 0.0  # wall seconds the defences took, outside the timed windows
    cost_ms_per_launch: float = 0.0


@frozen
class BenchRequest:
    """Everything a worker process needs to check and time one artifact."""

    artifact: Artifact
    reference: str  # path of ref.py
    dims: dict[str, Any] = field(factory=dict)
    options: BenchOptions = field(factory=BenchOptions)


@frozen
class TimingStats:
    """Samples of one timed function and their statistics, all per launch, in milliseconds."""

    mode: str  # per_launch | graph | batched
    l2: str  # cold | warm, and how ("flush 240 MiB" / "rotate 32 input sets")
    clock: str  # cuda_events | host
    launches_per_sample: int
    n: int
    median_ms: float
    p95_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    stddev_ms: float
    cv: float  # stddev / mean
    median_ci_rel: float  # half-width of the median's 95% interval over the median
    stop_reason: str  # "precision reached" | "time budget" | "max samples"
    warmup_ms: float
    warmup_launches: int
    host_median_ms: float | None = None  # host wall time per sample over launches (escape check)
    samples_ms: tuple[float, ...] = field(default=(), converter=as_tuple)
    note: str = ""


@frozen
class Mismatch:
    buffer: str
    index: tuple[int, ...] = field(converter=as_tuple)
    got: float | None
    expected: float | None


@frozen
class BufferCheck:
    buffer: str
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatches: int = 0
    numel: int = 0
    nan_count: int = 0
    worst: Mismatch | None = None
    note: str = ""


@frozen
class CorrectnessCheck:
    """One run of the kernel against the reference on fresh inputs."""

    seed: int
    phase: str  # "before_timing" | "after_timing"
    output_init: str  # "poisoned" | "zeroed"
    passed: bool
    inputs_unchanged: bool
    buffers: tuple[BufferCheck, ...] = field(default=(), converter=as_tuple)
    message: str = ""


@frozen
class BufferReport:
    name: str
    dtype: str
    role: str
    requested_shape: tuple[int, ...] = field(converter=as_tuple)
    realised_shape: tuple[int, ...] = field(converter=as_tuple)
    init: str
    sized_by: str
    bytes: int


@frozen
class Tolerance:
    atol: float
    rtol: float
    source: str  # "reference file" | "dtype default (float32)" | "command line"


@frozen
class DeviceInfo:
    name: str = ""
    capability: str = ""
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    driver: str = ""
    torch: str = ""


@frozen
class Workload:
    """What the reference's workload_model says the kernel must do, and the rates its median reaches."""

    flops: float
    bytes_min: float
    tflops: float | None = None  # achieved: flops / kernel median
    tbytes_per_s: float | None = None  # achieved: bytes_min / kernel median


@frozen
class BenchResult:
    """bench.json: everything that was checked and measured for one kernel."""

    kernel: str
    backend: str
    status: Status  # ok: correct and timed; failed: the kernel failed a check; error: could not run
    correctness_pass: bool = False
    timing_valid: bool = False
    error: str | None = None
    error_stage: str | None = None  # load | reference | correctness | timing | recheck | worker
    violation: str | None = None  # why it failed, one of VIOLATIONS (None: it did not fail)
    schema_version: int = BENCH_SCHEMA_VERSION
    reference_file: str = ""
    dims: dict[str, Any] = field(factory=dict)
    device: DeviceInfo = field(factory=DeviceInfo)
    build: Artifact | None = None
    buffers: tuple[BufferReport, ...] = field(default=(), converter=as_tuple)
    tolerance: Tolerance | None = None
    outputs_must_start_zeroed: bool = False
    correctness: tuple[CorrectnessCheck, ...] = field(default=(), converter=as_tuple)
    kernel_timing: TimingStats | None = None
    reference_timing: TimingStats | None = None
    defences: Defences | None = None  # the kernel timing's (None: not timed, or timed before v2)
    speedup_vs_reference: float | None = None
    workload: Workload | None = None
    options: BenchOptions = field(factory=BenchOptions)
    # what the backend's launcher reports (pinned configs, cubins)
    backend_notes: dict[str, Any] = field(factory=dict)
    worker_seconds: float | None = None
    created_at: str = ""
    kopt_version: str = ""


def read_bench_result(path: str | os.PathLike[str]) -> BenchResult:
    """A bench.json; OSError or ValueError when it cannot be read as one."""
    return read_document(path, BenchResult, "bench")
