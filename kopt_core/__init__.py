"""kopt: make GPU kernels faster with evidence instead of guesswork.

The core is backend-agnostic: it defines the backend contract (``kopt_core.hookspecs``), the records
that are persisted (``kopt_core.records``), the measurement harness, Nsight Compute profiling, the
roofline, method selection, SASS verification, the run folder, and the ``kopt`` CLI. Backends (CUDA,
CUTLASS, Triton, third-party) are plugins registered through the ``kopt`` entry-point group.

``__all__`` is the public Python API (docs/embedding.md shows it in use). Names are imported on first
use, so ``import kopt_core`` stays cheap and has no side effects; everything else is internal and may
change between versions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kopt_core.plugins import hookimpl

__version__ = "0.1.0"

# Public name -> the module that defines it.
_PUBLIC = {
    # plugins and backends
    "PluginManager": "kopt_core.plugins",
    "get_plugin_manager": "kopt_core.plugins",
    "describe_plugins": "kopt_core.plugins",
    "BackendRegistry": "kopt_core.backends",
    "BackendHooks": "kopt_core.backends",
    "backend_hooks": "kopt_core.backends",
    "Launcher": "kopt_core.bench.launchers",
    "LaunchError": "kopt_core.bench.launchers",
    # records a backend or an embedder handles
    "Artifact": "kopt_core.records",
    "BackendInfo": "kopt_core.records",
    "BenchOptions": "kopt_core.records",
    "BenchRequest": "kopt_core.records",
    "BenchResult": "kopt_core.records",
    "Candidate": "kopt_core.records",
    "KernelInterface": "kopt_core.records",
    "Param": "kopt_core.records",
    "PreflightReport": "kopt_core.records",
    "ProbeResult": "kopt_core.records",
    "ProfileLaunch": "kopt_core.records",
    "ProfileOptions": "kopt_core.records",
    "Toolchain": "kopt_core.records",
    # records a generator plugin handles (docs/plugins.md, "Writing a generator")
    "GenerationContext": "kopt_core.records",
    "GenerationResult": "kopt_core.records",
    "GeneratorInfo": "kopt_core.records",
    "to_data": "kopt_core.records",
    "from_data": "kopt_core.records",
    # errors and exit codes
    "KoptError": "kopt_core.errors",
    "ConfigError": "kopt_core.errors",
    "HardwareError": "kopt_core.errors",
    "ValidationError": "kopt_core.errors",
    # steps: what each CLI command calls
    "bench_kernel": "kopt_core.steps.bench",
    "prepare": "kopt_core.steps.bench",
    "run_bench": "kopt_core.steps.bench",
    "preflight_kernel": "kopt_core.steps.bench",
    "exit_code": "kopt_core.steps.bench",
    "profile_standalone": "kopt_core.steps.profile",
    "profile_prepared": "kopt_core.steps.profile",
    "select_standalone": "kopt_core.steps.select",
    "check_sass": "kopt_core.steps.sass",
    "verify_artifact_sass": "kopt_core.steps.sass",
    "SassVerdict": "kopt_core.sass",
    "SassToolError": "kopt_core.sass",
    # the run folder
    "RunStore": "kopt_core.run.store",
    "init_run": "kopt_core.run.init",
    "seed_baseline": "kopt_core.run.seed",
    "open_iteration": "kopt_core.run.iteration",
    "select_in_run": "kopt_core.run.iteration",
    "run_status": "kopt_core.run.status",
}

__all__ = [
    "__version__",
    "hookimpl",
    "Artifact",
    "BackendHooks",
    "BackendInfo",
    "BackendRegistry",
    "BenchOptions",
    "BenchRequest",
    "BenchResult",
    "Candidate",
    "ConfigError",
    "GenerationContext",
    "GenerationResult",
    "GeneratorInfo",
    "HardwareError",
    "KernelInterface",
    "KoptError",
    "LaunchError",
    "Launcher",
    "Param",
    "PluginManager",
    "PreflightReport",
    "ProbeResult",
    "ProfileLaunch",
    "ProfileOptions",
    "RunStore",
    "SassToolError",
    "SassVerdict",
    "Toolchain",
    "ValidationError",
    "backend_hooks",
    "bench_kernel",
    "check_sass",
    "describe_plugins",
    "exit_code",
    "from_data",
    "get_plugin_manager",
    "init_run",
    "open_iteration",
    "preflight_kernel",
    "prepare",
    "profile_prepared",
    "profile_standalone",
    "run_bench",
    "run_status",
    "seed_baseline",
    "select_in_run",
    "select_standalone",
    "to_data",
    "verify_artifact_sass",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'kopt_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:
    from kopt_core.backends import BackendHooks, BackendRegistry, backend_hooks
    from kopt_core.bench.launchers import Launcher, LaunchError
    from kopt_core.errors import ConfigError, HardwareError, KoptError, ValidationError
    from kopt_core.plugins import PluginManager, describe_plugins, get_plugin_manager
    from kopt_core.records import (
        Artifact,
        BackendInfo,
        BenchOptions,
        BenchRequest,
        BenchResult,
        Candidate,
        GenerationContext,
        GenerationResult,
        GeneratorInfo,
        KernelInterface,
        Param,
        PreflightReport,
        ProbeResult,
        ProfileLaunch,
        ProfileOptions,
        Toolchain,
        from_data,
        to_data,
    )
    from kopt_core.run.init import init_run
    from kopt_core.run.iteration import open_iteration, select_in_run
    from kopt_core.run.seed import seed_baseline
    from kopt_core.run.status import run_status
    from kopt_core.run.store import RunStore
    from kopt_core.sass import SassToolError, SassVerdict
    from kopt_core.steps.bench import bench_kernel, exit_code, preflight_kernel, prepare, run_bench
    from kopt_core.steps.profile import profile_prepared, profile_standalone
    from kopt_core.steps.sass import check_sass, verify_artifact_sass
    from kopt_core.steps.select import select_standalone
