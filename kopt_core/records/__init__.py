"""Frozen attrs records and their JSON form (one cattrs converter, ``converter.make_converter``)."""

from kopt_core.records.backend import BackendInfo, ProbeResult
from kopt_core.records.bench import (
    BENCH_SCHEMA_VERSION,
    BenchOptions,
    BenchRequest,
    BenchResult,
    BufferCheck,
    BufferReport,
    CorrectnessCheck,
    DeviceInfo,
    Mismatch,
    TimingStats,
    Tolerance,
    Workload,
)
from kopt_core.records.build import Artifact, KernelResources, Toolchain
from kopt_core.records.converter import from_data, make_converter, migrate, to_data
from kopt_core.records.kernel import BufferSpec, Candidate, KernelInterface, Param
from kopt_core.records.preflight import PreflightReport
from kopt_core.records.profile import (
    KernelProfile,
    MetricValue,
    NcuAttempt,
    ProfileLaunch,
    ProfileReport,
    RuleFinding,
)

__all__ = [
    "Artifact",
    "BENCH_SCHEMA_VERSION",
    "BackendInfo",
    "BenchOptions",
    "BenchRequest",
    "BenchResult",
    "BufferCheck",
    "BufferReport",
    "BufferSpec",
    "Candidate",
    "CorrectnessCheck",
    "DeviceInfo",
    "KernelInterface",
    "KernelProfile",
    "KernelResources",
    "MetricValue",
    "Mismatch",
    "NcuAttempt",
    "Param",
    "PreflightReport",
    "ProbeResult",
    "ProfileLaunch",
    "ProfileReport",
    "RuleFinding",
    "TimingStats",
    "Tolerance",
    "Toolchain",
    "Workload",
    "from_data",
    "make_converter",
    "migrate",
    "to_data",
]
