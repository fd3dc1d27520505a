"""What a backend's launcher gives the worker.

A launcher is made inside the worker process by the function named in ``Artifact.launcher``
("module:function", called with the Artifact). It turns named arguments into a ready-to-call launch.
This module is the launcher contract a backend implements (see docs/plugins.md).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kopt_core.records import Artifact

if TYPE_CHECKING:
    from kopt_core.bench.timing import Clock


class Replay(Protocol):
    """A captured sequence of launches (a CUDA graph) that can be replayed as one unit."""

    launches: int  # kernel launches it holds (what a replay's time is divided by)

    def launch(self) -> None: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    """What the bench worker drives. ``Artifact.launcher`` names a factory ``"module:function"`` that the
    worker imports and calls with the Artifact, inside the worker process, to get one.

    The factory may take a keyword ``reference`` (``make_launcher``): it then also gets the path of the
    request's reference file.

    A launcher may also implement the optional protocols below (``ProvidesInputs``, ``ProvidesNotes``,
    ``ProvidesClock``); the worker checks for each with ``isinstance``.
    """

    device: str  # "cuda" or "cpu": where tensors live and which clock times them

    def bind(self, args: dict[str, Any]) -> Callable[[], None]:
        """A no-argument call that launches the kernel on ``args`` (tensors and scalars by name)."""

    def check(self) -> None:
        """Raise ``LaunchError`` if the last launches failed (bad configuration, missing symbol...)."""

    def capture(self, arg_sets: list[dict[str, Any]]) -> Replay | None:
        """Capture one launch per entry of ``arg_sets`` into a replayable unit, or None if this kernel
        cannot be captured (then the harness times batches of plain launches)."""


@runtime_checkable
class ProvidesInputs(Protocol):
    """A launcher whose kernel file makes its own arguments (Triton's ``setup()``)."""

    def inputs(self, dims: dict[str, Any], seed: int) -> tuple[dict[str, Any], Sequence[str]]:
        """``(args, outputs)``: ``args`` maps names to tensors and scalars, ``outputs`` names the tensors
        the kernel writes. The worker learns the buffers from the first call and, for every seed, copies
        the fresh inputs into its own buffers (so pointers stay fixed) and poisons the outputs."""


@runtime_checkable
class ProvidesNotes(Protocol):
    """A launcher with backend facts worth keeping in bench.json as ``backend_notes`` (Triton: the
    configuration an autotuner chose and the pinned copy; the cubins it compiled)."""

    def notes(self) -> dict[str, Any]: ...


@runtime_checkable
class ProvidesClock(Protocol):
    """A launcher whose kernels run where the default clock cannot see them exactly (kopt_cuda times on
    the stream and runtime of its own library)."""

    def clock(self) -> Clock: ...


class LaunchError(RuntimeError):
    """The kernel could not be launched or failed while running."""


def launcher_factory(artifact: Artifact) -> Callable[..., Launcher]:
    """The factory ``artifact.launcher`` names, its module imported (the backend's, not yet the kernel's:
    the worker takes what the kernel's code must leave alone between the two)."""
    module_name, _, attr = artifact.launcher.partition(":")
    factory: Callable[..., Launcher] = getattr(importlib.import_module(module_name), attr)
    return factory


def takes_reference(factory: Callable[..., Launcher]) -> bool:
    """Whether ``factory`` accepts the ``reference`` keyword: the path of the request's reference file, for
    a backend whose kernels are made from the problem the reference describes (kopt_torch builds a
    ``ModelNew`` with the problem's constructor arguments). A factory of one argument is called as before:
    factories grow by keyword, like hooks."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "reference" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def make_launcher(factory: Callable[..., Launcher], artifact: Artifact, reference: str = "") -> Launcher:
    """Call ``factory`` with the Artifact, and with ``reference`` when it takes one."""
    return factory(artifact, reference=reference) if takes_reference(factory) else factory(artifact)


def load_launcher(artifact: Artifact, reference: str = "") -> Launcher:
    """Import and call the factory ``artifact.launcher`` names."""
    return make_launcher(launcher_factory(artifact), artifact, reference)
