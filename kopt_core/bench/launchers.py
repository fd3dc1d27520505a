"""What a backend's launcher gives the worker.

A launcher is made inside the worker process by the function named in ``Artifact.launcher``
("module:function", called with the Artifact). It turns named arguments into a ready-to-call launch.
"""

from __future__ import annotations

import importlib
from typing import Callable, Protocol

from kopt_core.records import Artifact


class Replay(Protocol):
    """A captured sequence of launches (a CUDA graph) that can be replayed as one unit."""

    launches: int  # kernel launches it holds (what a replay's time is divided by)

    def launch(self) -> None: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    device: str  # "cuda" or "cpu": where tensors live and which clock times them

    def bind(self, args: dict) -> Callable[[], None]:
        """A no-argument call that launches the kernel on ``args`` (tensors and scalars by name)."""

    def check(self) -> None:
        """Raise ``LaunchError`` if the last launches failed (bad configuration, missing symbol...)."""

    def capture(self, arg_sets: list[dict]) -> Replay | None:
        """Capture one launch per entry of ``arg_sets`` into a replayable unit, or None if this kernel
        cannot be captured (then the harness times batches of plain launches)."""

    # Optional: ``inputs(dims, seed) -> (args, outputs)`` when the kernel file makes its own arguments
    # (Triton's setup()): ``args`` maps names to tensors and scalars, ``outputs`` names the tensors the
    # kernel writes. The worker learns the buffers from the first call and, for every seed, copies the
    # fresh inputs into its own buffers (so pointers stay fixed) and poisons the outputs.

    # Optional: ``notes() -> dict`` of backend facts worth keeping in bench.json as ``backend_notes``
    # (Triton: the configuration an autotuner chose and the pinned copy; the cubins it compiled).

    # Optional: ``clock() -> Clock`` when the launcher's kernels run where the default clock cannot see
    # them exactly (kopt_cuda times on the stream and runtime of its own library).


class LaunchError(RuntimeError):
    """The kernel could not be launched or failed while running."""


def load_launcher(artifact: Artifact) -> Launcher:
    module_name, _, attr = artifact.launcher.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(artifact)
