"""What Nsight Compute measured, as kopt reads it (ncu CSV pages, normalised units)."""

from __future__ import annotations

from attrs import frozen, field


@frozen
class MetricValue:
    """One metric of one kernel. ``value`` is in ``unit`` after normalisation (times in ms, sizes in
    bytes, rates in bytes/second, frequencies in Hz, percentages in %); None when ncu printed no number."""

    name: str  # the ncu metric name, e.g. "gpu__time_duration.sum"
    value: float | None
    unit: str
    raw: str = ""  # the text ncu printed
    raw_unit: str = ""


@frozen
class RuleFinding:
    """A finding of ncu's own rules (details page): what it suggests and why."""

    section: str
    rule: str
    kind: str  # OPT | WRN | INF | ...
    message: str
    estimated_speedup_pct: float | None = None


@frozen
class KernelProfile:
    """One profiled kernel launch (or the duration-weighted aggregate of several)."""

    id: int
    name: str
    duration_ms: float | None = None
    grid: str = ""
    block: str = ""
    metrics: dict = field(factory=dict)  # ncu metric name -> MetricValue
    findings: tuple[RuleFinding, ...] = field(default=(), converter=tuple)


@frozen
class ProfileReport:
    """Every kernel in the profiled range and their aggregate."""

    kernels: tuple[KernelProfile, ...] = field(converter=tuple)
    aggregate: KernelProfile | None = None  # None when there are no kernels
    source: str = ""  # the file or command the CSV came from
