"""The metric registry (``references/metric_registry.json``) and resolving its keys in a kernel profile.

The registry maps each canonical kopt key ("sm_throughput_pct", "warp_stall_long_scoreboard_pct", ...)
to the Nsight Compute metric names that give it (the primary name, then aliases of other ncu versions
and sets), its unit after kopt's normalisation (see ``kopt_core.ncu.parse``), its axis (compute, memory,
latency, info), whether a high or a low value is the bad one, and which ncu sets collect it. It is
validated against ``references/schemas/v1/metric_registry.schema.json`` when loaded.

``resolve`` looks each key up in a KernelProfile:
  * the first name of ``ncu_names`` that the profile carries with a value (and a unit that agrees with
    the registry's, or no unit) is used: status "measured";
  * ``derive: {"kind": "share_of", "group": G}``: when the matched name is a member of one of group G's
    families (e.g. ncu's stall ratios, cycles per issued instruction), the value is
    100 * member / total, where total is the family's ``total`` metric when the profile has it, else the
    sum of every member of that family in the profile: status "derived". A matched name outside the
    families (an older ncu's ready-made ".pct") is measured as it is.
  * ``derive: ratio_of`` (scale * numerator / denominator) and ``sum_of`` (the sum of the terms) are
    used only when no name of ``ncu_names`` is present, and only when every input is: status "derived";
  * otherwise status "unknown" with value None: a missing metric is unknown, never zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path

import attrs
from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.records.fields import as_tuple
from kopt_core.records.profile import KernelProfile, MetricValue
from kopt_core.refdata import load_document

REGISTRY_FILE = "metric_registry.json"
SCHEMA_FILE = "schemas/v1/metric_registry.schema.json"
AXES = ("compute", "memory", "latency", "info")
STATUSES = ("measured", "derived", "unknown")


@frozen
class GroupFamily:
    """One naming scheme of a metric group: members matched by a glob, an optional total metric."""

    members: str  # e.g. "smsp__average_warps_issue_stalled_*_per_issue_active.ratio"
    exclude: tuple[str, ...] = field(default=(), converter=as_tuple)
    total: str | None = None

    def contains(self, name: str) -> bool:
        return fnmatchcase(name, self.members) and not any(
            fnmatchcase(name, pattern) for pattern in self.exclude
        )


@frozen
class MetricGroup:
    name: str
    families: tuple[GroupFamily, ...] = field(converter=as_tuple)
    description: str = ""

    def family_of(self, name: str) -> GroupFamily | None:
        return next((family for family in self.families if family.contains(name)), None)


@frozen
class Derive:
    """How a metric is computed when ncu does not report it as such (see the module docstring)."""

    kind: str  # share_of | ratio_of | sum_of
    group: str | None = None  # share_of
    numerator: str | None = None  # ratio_of
    denominator: str | None = None  # ratio_of
    scale: float = 1.0  # ratio_of
    terms: tuple[str, ...] = field(default=(), converter=as_tuple)  # sum_of


@frozen
class MetricSpec:
    """One registry entry."""

    key: str
    ncu_names: tuple[str, ...] = field(converter=as_tuple)
    unit: str
    axis: str  # compute | memory | latency | info
    bad_when: str  # high | low | neither
    sets: tuple[str, ...] = field(converter=as_tuple)  # basic, full
    missing: str  # always "unknown"
    description: str
    derive: Derive | None = None
    # "no_events": an average over events (branches, global loads or stores) that ncu reports as exactly 0
    # when the kernel had none of them; 0 then means unknown, never "0% efficient"
    zero: str | None = None

    def eventless(self, value: float | None) -> bool:
        """Whether ``value`` is this metric's reading of no events at all (``zero: no_events``, exactly 0)."""
        return self.zero == "no_events" and value == 0.0


@frozen
class Resolved:
    """A registry key's value in one profile."""

    key: str
    value: float | None
    unit: str
    ncu_name: str | None  # the name (or the derivation's inputs) it came from; None when unknown
    status: str  # measured | derived | unknown

    @property
    def known(self) -> bool:
        return self.value is not None


def _index(registry: MetricRegistry) -> dict[str, MetricSpec]:
    return {spec.key: spec for spec in registry.metrics}


@frozen
class MetricRegistry:
    schema_version: int
    ncu_versions_checked: tuple[str, ...] = field(converter=as_tuple)
    metrics: tuple[MetricSpec, ...] = field(converter=as_tuple)
    groups: dict = field(factory=dict)  # name -> MetricGroup
    source: str = ""  # the file it was read from
    _by_key: dict = field(init=False, repr=False, eq=False, default=attrs.Factory(_index, takes_self=True))

    def get(self, key: str) -> MetricSpec | None:
        return self._by_key.get(key)

    def keys(self) -> tuple[str, ...]:
        return tuple(spec.key for spec in self.metrics)

    def by_axis(self, axis: str) -> tuple[MetricSpec, ...]:
        if axis not in AXES:
            raise ValueError(f"unknown axis {axis!r}; one of {', '.join(AXES)}")
        return tuple(spec for spec in self.metrics if spec.axis == axis)


# --------------------------------------------------------------------------------------------- loading


def _check_consistency(document: dict, where: str) -> None:
    """What the JSON Schema cannot say: unique keys and ncu names, known groups, reachable derivations."""
    groups = document["groups"]
    keys: dict[str, int] = {}
    names: dict[str, str] = {}
    for index, entry in enumerate(document["metrics"]):
        path = f"$.metrics[{index}]"
        if entry["key"] in keys:
            raise ConfigError(
                f"{where}: {path}.key: {entry['key']!r} is already the key of $.metrics[{keys[entry['key']]}]"
            )
        keys[entry["key"]] = index
        for position, name in enumerate(entry["ncu_names"]):
            if name in names:
                raise ConfigError(
                    f"{where}: {path}.ncu_names[{position}]: {name!r} is already a name of {names[name]!r}"
                )
            names[name] = entry["key"]
        derive = entry.get("derive")
        if derive and derive["kind"] == "share_of":
            group = derive["group"]
            if group not in groups:
                raise ConfigError(f"{where}: {path}.derive.group: no group {group!r} in $.groups")
            families = [
                GroupFamily(members=f["members"], exclude=f.get("exclude", ()))
                for f in groups[group]["families"]
            ]
            if not any(family.contains(name) for family in families for name in entry["ncu_names"]):
                raise ConfigError(
                    f"{where}: {path}.derive: none of ncu_names is a member of group {group!r}, "
                    "so the share would never be taken"
                )


def _build(document: dict, where: str) -> MetricRegistry:
    groups = {
        name: MetricGroup(
            name=name,
            description=group.get("description", ""),
            families=[
                GroupFamily(members=f["members"], exclude=f.get("exclude", ()), total=f.get("total"))
                for f in group["families"]
            ],
        )
        for name, group in document["groups"].items()
    }
    metrics = []
    for entry in document["metrics"]:
        derive = entry.get("derive")
        metrics.append(
            MetricSpec(
                key=entry["key"],
                ncu_names=entry["ncu_names"],
                unit=entry["unit"],
                axis=entry["axis"],
                bad_when=entry["bad_when"],
                sets=entry["sets"],
                missing=entry["missing"],
                description=entry["description"],
                zero=entry.get("zero"),
                derive=None
                if derive is None
                else Derive(
                    kind=derive["kind"],
                    group=derive.get("group"),
                    numerator=derive.get("numerator"),
                    denominator=derive.get("denominator"),
                    scale=float(derive.get("scale", 1.0)),
                    terms=derive.get("terms", ()),
                ),
            )
        )
    return MetricRegistry(
        schema_version=document["schema_version"],
        ncu_versions_checked=document["ncu_versions_checked"],
        metrics=metrics,
        groups=groups,
        source=where,
    )


def load_registry(path: Path | str | None = None) -> MetricRegistry:
    """The metric registry at ``path`` (default: the one packaged with kopt), validated against the v1
    schema. Raises ConfigError naming the file and the JSON path of the first error."""
    document, where = load_document(
        path, default=REGISTRY_FILE, schema_file=SCHEMA_FILE, what="metric registry"
    )
    _check_consistency(document, where)
    return _build(document, where)


# ------------------------------------------------------------------------------------------- resolving


def _value(metrics: Mapping[str, MetricValue], name: str | None) -> float | None:
    metric = metrics.get(name) if name else None
    return None if metric is None else metric.value


def _units_agree(expected: str, got: str) -> bool:
    return got == expected or got == "" or expected == ""


def _family_total(family: GroupFamily, metrics: Mapping[str, MetricValue]) -> float | None:
    total = _value(metrics, family.total)
    if total is not None and total > 0:
        return total
    members = [
        metric.value for name, metric in metrics.items() if metric.value is not None and family.contains(name)
    ]
    return math.fsum(members) if members else None


def resolve_metric(
    registry: MetricRegistry, spec: MetricSpec, metrics: Mapping[str, MetricValue]
) -> Resolved:
    """One registry key in a profile's metrics (rules: module docstring)."""
    resolved = _resolve_metric(registry, spec, metrics)
    if spec.eventless(resolved.value):
        return Resolved(spec.key, None, spec.unit, None, "unknown")  # an average over no events
    return resolved


def _resolve_metric(
    registry: MetricRegistry, spec: MetricSpec, metrics: Mapping[str, MetricValue]
) -> Resolved:
    derive = spec.derive
    for name in spec.ncu_names:
        metric = metrics.get(name)
        if metric is None or metric.value is None:
            continue
        if derive is not None and derive.kind == "share_of":
            family = registry.groups[derive.group].family_of(name)
            if family is not None:
                total = _family_total(family, metrics)
                if total is None or total <= 0:
                    continue
                return Resolved(spec.key, 100.0 * metric.value / total, spec.unit, name, "derived")
        if not _units_agree(spec.unit, metric.unit):
            continue  # a name reported in another unit is not this metric
        return Resolved(spec.key, metric.value, spec.unit, name, "measured")
    if derive is not None and derive.kind == "ratio_of":
        numerator, denominator = _value(metrics, derive.numerator), _value(metrics, derive.denominator)
        if numerator is not None and denominator not in (None, 0.0):
            return Resolved(
                spec.key,
                derive.scale * numerator / denominator,
                spec.unit,
                f"{derive.numerator} / {derive.denominator}",
                "derived",
            )
    if derive is not None and derive.kind == "sum_of":
        terms = [_value(metrics, term) for term in derive.terms]
        known = [term for term in terms if term is not None]
        if terms and len(known) == len(terms):
            return Resolved(spec.key, math.fsum(known), spec.unit, " + ".join(derive.terms), "derived")
    return Resolved(spec.key, None, spec.unit, None, "unknown")


def without_eventless_zeros(registry: MetricRegistry, values: Mapping[str, float | None]) -> dict:
    """``values`` (registry key -> value) with each ``zero: no_events`` metric that reads exactly 0 made
    unknown: evidence written before that rule (an older ncu_top.json) reads as a new analysis would."""
    specs = {spec.key: spec for spec in registry.metrics}
    return {
        key: (None if key in specs and specs[key].eventless(value) else value)
        for key, value in values.items()
    }


def resolve(registry: MetricRegistry, profile: KernelProfile) -> dict[str, Resolved]:
    """Every registry key in ``profile`` (a kernel or the aggregate), in registry order."""
    return {spec.key: resolve_metric(registry, spec, profile.metrics) for spec in registry.metrics}


def values(resolved: Mapping[str, Resolved]) -> dict[str, float | None]:
    """key -> value (None when unknown), the form the roofline's gap computation takes."""
    return {key: item.value for key, item in resolved.items()}
