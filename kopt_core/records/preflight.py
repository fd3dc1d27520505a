"""The static contract check of a kernel file against its dims and reference."""

from __future__ import annotations

from attrs import field, frozen

from kopt_core.records.fields import as_tuple
from kopt_core.records.kernel import KernelInterface


@frozen
class PreflightReport:
    backend: str
    interface: KernelInterface | None = None
    problems: tuple[str, ...] = field(default=(), converter=as_tuple)  # each one makes the contract fail
    warnings: tuple[str, ...] = field(default=(), converter=as_tuple)

    @property
    def ok(self) -> bool:
        return not self.problems
