"""kopt-ray's entry point: registers the ``ray`` executor (``kopt_ray.pool.RayPool``); docs/executors.md."""

from __future__ import annotations

from collections.abc import Callable

from kopt_core.plugins import hookimpl
from kopt_core.records.executor import ExecutorInfo
from kopt_ray.pool import OPTIONS, check_options, open_pool


@hookimpl
def kopt_register_executors(register: Callable[[ExecutorInfo], None]) -> None:
    register(
        ExecutorInfo(
            name="ray",
            description="one bench worker actor per GPU of a Ray cluster; files move by content key",
            open=open_pool,
            options=dict(OPTIONS),
            check=check_options,
            remote=True,
        )
    )
