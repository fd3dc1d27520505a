"""The executor seam's registry: every executor the installed plugins register, found by name, with its
options checked before a command spends anything on it, and opened into a pool of workers.

What an executor registers is a record (``kopt_core.records.executor.ExecutorInfo``); what it opens is a
``kopt_core.bench.pool.WorkerPool``. ``local``, the default, is the core's own and always there (``LOCAL``);
``gpus`` is in ``kopt_core.execute.builtin``, registered through an entry point exactly as a third party's
executors are; kopt-ray registers ``ray``.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from attrs import frozen

from kopt_core.errors import ConfigError, HardwareError
from kopt_core.hardware import detect_gpus
from kopt_core.plugins import check_plugin_options, registered_by_plugins
from kopt_core.records.executor import ExecutorInfo

if TYPE_CHECKING:
    from kopt_core.bench.pool import WorkerPool
    from kopt_core.plugins import PluginManager

DEFAULT_EXECUTOR = "local"


def _open_local(options: dict[str, str]) -> WorkerPool:
    from kopt_core.bench.pool import SingleWorkerPool

    return SingleWorkerPool()


# The default executor: the process's one shared worker, as every command had before executors existed.
LOCAL = ExecutorInfo(
    name=DEFAULT_EXECUTOR,
    description="one bench worker on this host (the default): everything timed on one GPU",
    open=_open_local,
)


@frozen
class ExecutorRegistry:
    """Every registered executor and the plugin that registered it; a name two plugins register is a
    clash, usable by neither."""

    executors: dict[str, ExecutorInfo]
    owners: dict[str, str]
    clashes: tuple[str, ...]

    @classmethod
    def from_plugins(cls, pm: PluginManager) -> ExecutorRegistry:
        """What the plugins register, and ``local``, the core's own: it is there whatever plugins a
        manager loads (a manager built without entry points, ``KOPT_PLUGINS``), and no plugin may take its
        name."""
        unique, clashes = registered_by_plugins(pm, "kopt_register_executors")
        executors = {name: info for name, (_, info) in unique.items() if name != LOCAL.name}
        owners = {name: owner for name, (owner, _) in unique.items() if name != LOCAL.name}
        return cls(
            executors={LOCAL.name: LOCAL, **executors},
            owners={LOCAL.name: "kopt_core", **owners},
            clashes=tuple(name for name in clashes if name != LOCAL.name),
        )

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.executors))

    def get(self, name: str) -> ExecutorInfo:
        if name in self.clashes:
            raise ConfigError(
                f"executor {name!r} is registered by more than one installed plugin",
                hint="keep one: set KOPT_PLUGINS to the entry-point names to load (kopt plugins lists them)",
            )
        if name not in self.executors:
            known = ", ".join(self.names()) or "none installed"
            hint = "pick one with --executor, or install the package that provides it"
            if name == "ray":
                hint = "pip install ./kopt_ray (it brings Ray), or pick another with --executor"
            elif os.environ.get("KOPT_PLUGINS") is not None:
                hint += "; KOPT_PLUGINS restricts which plugins load: add the executor's entry point"
            raise ConfigError(f"unknown executor {name!r} (installed: {known})", hint=hint)
        return self.executors[name]


def check_executor_options(info: ExecutorInfo, options: dict[str, str]) -> None:
    """Refuse an option ``info`` does not read, then let it check the values (ConfigError, exit 4)."""
    check_plugin_options("executor", info, options)


def executor_for(pm: PluginManager, name: str, options: dict[str, str] | None = None) -> ExecutorInfo:
    """The executor ``name`` with ``options`` checked: an unknown name or a bad option is a ConfigError
    (exit 4) naming the installed executors, before anything is built or timed."""
    info = ExecutorRegistry.from_plugins(pm).get(name)
    check_executor_options(info, dict(options or {}))
    return info


def open_pool(
    pm: PluginManager, name: str = DEFAULT_EXECUTOR, options: dict[str, str] | None = None
) -> WorkerPool:
    """The pool of executor ``name`` (not entered yet: enter it to start its workers)."""
    options = dict(options or {})
    return executor_for(pm, name, options).open(options)


# --- this host's GPUs ------------------------------------------------------------------------------

DEVICES_HELP = (
    "the GPUs to use, as CUDA_VISIBLE_DEVICES numbers them, comma-separated (e.g. 0,1; default: every GPU "
    "listed)"
)


def parse_devices(text: str) -> tuple[str, ...]:
    """``0,1`` -> ("0", "1"); ConfigError (exit 4) for anything but distinct non-negative integers."""
    items = tuple(part.strip() for part in text.split(","))
    if not all(re.fullmatch(r"\d+", item) for item in items):
        raise ConfigError(f"executor option devices={text!r}: give GPU numbers separated by commas, e.g. 0,1")
    if len(set(items)) != len(items):
        raise ConfigError(f"executor option devices={text!r} names a GPU twice: each gets one worker")
    return items


def visible_devices() -> tuple[str, ...]:
    """Every GPU this host lists (within a numeric CUDA_VISIBLE_DEVICES); HardwareError (exit 3) for none."""
    gpus, reason = detect_gpus()
    if not gpus:
        raise HardwareError(
            f"found no GPU to put a worker on: {reason}",
            hint="run on a host with NVIDIA GPUs, or name them with --executor-option devices=0,1",
        )
    return tuple(str(gpu.index) for gpu in gpus)


def host_devices(options: dict[str, str]) -> tuple[str, ...]:
    """The GPUs of this host that a command spreads over: ``devices=`` when given, else every one listed."""
    return parse_devices(options["devices"]) if "devices" in options else visible_devices()
