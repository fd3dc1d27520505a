"""kopt's own plugin executor, registered through the entry point ``kopt_executors`` like any plugin's
(``local``, the default, is the core's own: ``kopt_core.execute.base.LOCAL``):

- ``gpus``: one long-lived bench worker per GPU of this host (``devices=0,1``; by default every GPU
  nvidia-smi lists, within CUDA_VISIBLE_DEVICES), each pinned with CUDA_VISIBLE_DEVICES; builds in the
  compile pool.

What each guarantees is in docs/executors.md.
"""

from __future__ import annotations

from collections.abc import Callable

from kopt_core.bench.pool import HostGpuPool, WorkerPool
from kopt_core.execute.base import DEVICES_HELP, host_devices, parse_devices
from kopt_core.plugins import hookimpl
from kopt_core.records.executor import ExecutorInfo


def _check_gpus(options: dict[str, str]) -> None:
    if "devices" in options:
        parse_devices(options["devices"])


def _open_gpus(options: dict[str, str]) -> WorkerPool:
    return HostGpuPool(host_devices(options))


@hookimpl
def kopt_register_executors(register: Callable[[ExecutorInfo], None]) -> None:
    register(
        ExecutorInfo(
            name="gpus",
            description="one bench worker per GPU of this host, each pinned with CUDA_VISIBLE_DEVICES",
            open=_open_gpus,
            options={"devices": DEVICES_HELP},
            check=_check_gpus,
        )
    )
