"""The method registry (``references/method_registry.json``): the optimization methods kopt selects from.

Each method has a canonical id ``axis.name`` (axis: compute, memory, latency), a priority within its axis
(1 is scanned first), the backends it applies to, the architecture features it requires, a trigger (metric
keys of the metric registry compared with thresholds), skip conditions, typed relations (conflicts,
complements, a same-budget group), a numerics class and the key of its SASS signature.

Architectures are explicit capability sets: ``architectures["sm_90a"]`` lists every feature sm_90a has; a
method applies on an architecture iff every feature it requires is in that set. Nothing is inferred from
the numeric order of SM versions (sm_100 does not have sm_90a's wgmma).

``load_methods`` validates the file against ``references/schemas/v1/method_registry.schema.json``, then
checks what the schema cannot say (unknown metric keys, duplicate ids or priorities, asymmetric conflicts,
unknown related ids, undefined features, an id whose prefix disagrees with its axis), raising ConfigError
naming the file and the problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs
from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.records.fields import as_tuple
from kopt_core.records.roofline import AXES
from kopt_core.refdata import load_document

REGISTRY_FILE = "method_registry.json"
SCHEMA_FILE = "schemas/v1/method_registry.schema.json"


@frozen
class Condition:
    """A metric comparison (trigger conditions and ``kind == "metric"`` skips), or a dtype / kernel-trait
    skip condition."""

    kind: str  # metric | dtype_in | dtype_not_in | kernel_has | kernel_lacks
    metric: str | None = None
    op: str | None = None
    value: float | None = None
    dtypes: tuple[str, ...] = field(default=(), converter=as_tuple)
    tags: tuple[str, ...] = field(default=(), converter=as_tuple)
    why: str = ""

    def holds(self, value: float | None) -> bool | None:
        """The comparison on a metric value; None when the value is unknown (inconclusive, never zero)."""
        if self.kind != "metric":
            raise ValueError(f"{self.kind} is not a metric condition")
        if value is None:
            return None
        if self.op is None or self.value is None:  # the registry's schema requires both
            raise ValueError(f"the condition on {self.metric!r} has no op or no threshold")
        return {
            ">=": value >= self.value,
            "<=": value <= self.value,
            ">": value > self.value,
            "<": value < self.value,
        }[self.op]

    def reading(self, values: Mapping[str, float | None]) -> float | None:
        """This condition's metric in ``values``; None when unknown (or when it names no metric)."""
        return None if self.metric is None else values.get(self.metric)


@frozen
class AllOf:
    """A conjunction inside a trigger's ``any``: evidence that counts only in combination (a saturated L1
    *and* a high L1 hit rate mean reuse served from cache)."""

    all: tuple[Condition, ...] = field(converter=as_tuple)

    def holds(self, values: dict[str, float | None]) -> bool:
        return all(condition.holds(condition.reading(values)) for condition in self.all)


def _holds(option: Condition | AllOf, values: dict[str, float | None]) -> bool:
    return (
        bool(option.holds(values))
        if isinstance(option, AllOf)
        else bool(option.holds(option.reading(values)))
    )


@frozen
class Trigger:
    """Holds when every condition of ``all`` holds and, when ``any`` is given, one of ``any`` holds (an
    ``any`` entry is a condition or an ``AllOf`` group)."""

    all: tuple[Condition, ...] = field(default=(), converter=as_tuple)
    any: tuple[Condition | AllOf, ...] = field(default=(), converter=as_tuple)
    why: str = ""

    def conditions(self) -> tuple[Condition, ...]:
        """Every metric condition, groups flattened."""
        flat: list[Condition] = list(self.all)
        for option in self.any:
            flat.extend(option.all if isinstance(option, AllOf) else (option,))
        return tuple(flat)

    def metrics(self) -> tuple[str, ...]:
        metrics = []
        for condition in self.conditions():
            if condition.metric is None:  # the registry's schema gives every trigger condition a metric
                raise ValueError(f"a trigger condition names no metric ({self.why})")
            metrics.append(condition.metric)
        return tuple(metrics)

    def holds(self, values: dict[str, float | None]) -> bool:
        """Whether the trigger holds on ``values`` (metric key -> value or None); an unknown metric never
        satisfies a condition."""
        if not all(_holds(condition, values) for condition in self.all):
            return False
        return not self.any or any(_holds(option, values) for option in self.any)

    def met(self, values: dict[str, float | None]) -> tuple[Condition | AllOf, ...]:
        """The conditions and groups that hold: the evidence a selection quotes."""
        return tuple(option for option in (*self.all, *self.any) if _holds(option, values))


@frozen
class Relations:
    conflicts: tuple[str, ...] = field(default=(), converter=as_tuple)
    complements: tuple[str, ...] = field(default=(), converter=as_tuple)
    same_budget: str | None = None


@frozen
class HeadroomTerm:
    """One reading of an evidence key that sizes what a method can unlock (knowledge.headroom)."""

    metric: str
    as_: str  # share | complement | inverse | idle | flag | launch
    of: float | None = None  # the ideal for share and complement (None: 100, a percentage)
    scale: float = 1.0  # the part of the reading the method can remove

    def describe(self, value: float) -> str:
        of = (1.0 if self.as_ in ("inverse", "launch") else 100.0) if self.of is None else self.of
        scaled = "" if self.scale == 1.0 else f" x {self.scale:g}"
        reading = {
            "share": f"{self.metric} {value:.4g} / {of:g}",
            "complement": f"1 - {self.metric} {value:.4g} / {of:g}",
            "inverse": f"1 - {of:g} / {self.metric} {value:.4g}",
            "idle": f"1 - {self.metric} {value:.4g}",
            "flag": f"{self.metric} = {value:.4g}",
            "launch": f"launch latency (~4 us) in a {self.metric} of {value / of:.4g} ms",
        }[self.as_]
        return reading + scaled


@frozen
class Method:
    id: str
    axis: str
    name: str
    priority: int
    backends: tuple[str, ...] = field(converter=as_tuple)
    requires: tuple[str, ...] = field(converter=as_tuple)
    trigger: Trigger
    skip_if: tuple[Condition, ...] = field(converter=as_tuple)
    relations: Relations
    numerics: str
    sass_signature: str
    summary: str
    lowers_floor: bool = False  # changes the work or the peak the roofline floor is computed from
    headroom: tuple[HeadroomTerm, ...] = field(default=(), converter=as_tuple)


def _index(registry: MethodRegistry) -> dict[str, Method]:
    return {method.id: method for method in registry.methods}


@frozen
class MethodRegistry:
    schema_version: int
    architectures: dict  # arch -> frozenset of features
    methods: tuple[Method, ...] = field(converter=as_tuple)
    numerics_classes: dict = field(factory=dict)
    notes: tuple[str, ...] = field(default=(), converter=as_tuple)
    source: str = ""
    _by_id: dict = field(init=False, repr=False, eq=False, default=attrs.Factory(_index, takes_self=True))

    def get(self, method_id: str) -> Method | None:
        return self._by_id.get(method_id)

    def ids(self) -> tuple[str, ...]:
        return tuple(method.id for method in self.methods)

    def by_axis(self, axis: str) -> tuple[Method, ...]:
        """The methods of ``axis`` in priority order (1 first)."""
        if axis not in AXES:
            raise ValueError(f"unknown axis {axis!r}; one of {', '.join(AXES)}")
        return tuple(sorted((m for m in self.methods if m.axis == axis), key=lambda m: m.priority))

    def features(self, arch: str) -> frozenset[str]:
        if arch not in self.architectures:
            raise ValueError(f"unknown architecture {arch!r}; one of {', '.join(self.architectures)}")
        return self.architectures[arch]

    def applies_on(self, method: Method | str, arch: str) -> tuple[bool, tuple[str, ...]]:
        """(whether ``method`` applies on ``arch``, the required features ``arch`` lacks)."""
        if isinstance(method, str):
            found = self.get(method)
            if found is None:
                raise ValueError(f"unknown method {method!r}")
            method = found
        have = self.features(arch)
        missing = tuple(feature for feature in method.requires if feature not in have)
        return not missing, missing


# --------------------------------------------------------------------------------------------- loading


def evidence_keys() -> frozenset[str]:
    """Every key a trigger or metric skip may name: the metric registry's and ``DERIVED_EVIDENCE``
    (``kopt_core.knowledge.evidence``)."""
    from kopt_core.knowledge.evidence import DERIVED_EVIDENCE
    from kopt_core.ncu.metrics import load_registry

    return frozenset(load_registry().keys()) | frozenset(DERIVED_EVIDENCE)


def _check_consistency(document: dict, where: str) -> None:
    """What the JSON Schema cannot say (see the module docstring)."""
    metric_keys = evidence_keys()
    features = {feature for listed in document["architectures"].values() for feature in listed}
    ids: dict[str, int] = {}
    priorities: dict[tuple[str, int], str] = {}
    for index, entry in enumerate(document["methods"]):
        path = f"$.methods[{index}]"
        method_id = entry["id"]
        if method_id in ids:
            raise ConfigError(
                f"{where}: {path}.id: duplicate method id {method_id!r} (also $.methods[{ids[method_id]}])"
            )
        ids[method_id] = index
        prefix, _, name = method_id.partition(".")
        if prefix != entry["axis"]:
            raise ConfigError(
                f"{where}: {path}.id: {method_id!r} has prefix {prefix!r} but axis {entry['axis']!r}"
            )
        if name != entry["name"]:
            raise ConfigError(
                f"{where}: {path}.name: {entry['name']!r} is not the name part of the id {method_id!r}"
            )
        slot = (entry["axis"], entry["priority"])
        if slot in priorities:
            raise ConfigError(
                f"{where}: {path}.priority: duplicate priority {entry['priority']} on axis "
                f"{entry['axis']!r} ({method_id!r} and {priorities[slot]!r})"
            )
        priorities[slot] = method_id
        for part in ("all", "any"):
            for position, option in enumerate(entry["trigger"].get(part, ())):
                group = option["all"] if "all" in option else [option]
                for inner, condition in enumerate(group):
                    at = f"{part}[{position}]" + (f".all[{inner}]" if "all" in option else "")
                    if condition["metric"] not in metric_keys:
                        raise ConfigError(
                            f"{where}: {path}.trigger.{at}.metric: unknown metric key "
                            f"{condition['metric']!r} (not in the metric registry nor DERIVED_EVIDENCE)"
                        )
        for position, term in enumerate(entry.get("headroom", ())):
            if term["metric"] not in metric_keys:
                raise ConfigError(
                    f"{where}: {path}.headroom[{position}].metric: unknown metric key "
                    f"{term['metric']!r} (not in the metric registry nor DERIVED_EVIDENCE)"
                )
        for position, skip in enumerate(entry["skip_if"]):
            if skip["kind"] == "metric" and skip["metric"] not in metric_keys:
                raise ConfigError(
                    f"{where}: {path}.skip_if[{position}].metric: unknown metric key "
                    f"{skip['metric']!r} (not in the metric registry nor DERIVED_EVIDENCE)"
                )
        for position, feature in enumerate(entry["requires"]):
            if feature not in features:
                raise ConfigError(
                    f"{where}: {path}.requires[{position}]: feature {feature!r} is not defined "
                    "in any architecture of $.architectures"
                )
        if entry["sass_signature"] != method_id:
            raise ConfigError(
                f"{where}: {path}.sass_signature: {entry['sass_signature']!r} is not the method id "
                f"{method_id!r}"
            )
    by_id = {entry["id"]: entry for entry in document["methods"]}
    for method_id, index in ids.items():
        relations = by_id[method_id]["relations"]
        path = f"$.methods[{index}].relations"
        for kind in ("conflicts", "complements"):
            for other in relations[kind]:
                if other == method_id:
                    raise ConfigError(f"{where}: {path}.{kind}: {method_id!r} relates to itself")
                if other not in by_id:
                    raise ConfigError(f"{where}: {path}.{kind}: unknown method id {other!r}")
        for other in relations["conflicts"]:
            if method_id not in by_id[other]["relations"]["conflicts"]:
                raise ConfigError(
                    f"{where}: {path}.conflicts: asymmetric conflict: {method_id!r} conflicts with "
                    f"{other!r} but {other!r} does not list {method_id!r}"
                )
            if other in relations["complements"]:
                raise ConfigError(
                    f"{where}: {path}: {other!r} is both a conflict and a complement of {method_id!r}"
                )


def _condition(entry: dict) -> Condition:
    return Condition(
        kind=entry.get("kind", "metric"),
        metric=entry.get("metric"),
        op=entry.get("op"),
        value=None if entry.get("value") is None else float(entry["value"]),
        dtypes=entry.get("dtypes", ()),
        tags=entry.get("tags", ()),
        why=entry.get("why", ""),
    )


def _option(entry: dict) -> Condition | AllOf:
    return AllOf(all=[_condition(c) for c in entry["all"]]) if "all" in entry else _condition(entry)


def _build(document: dict, where: str) -> MethodRegistry:
    methods = []
    for entry in document["methods"]:
        trigger = entry["trigger"]
        relations = entry["relations"]
        methods.append(
            Method(
                id=entry["id"],
                axis=entry["axis"],
                name=entry["name"],
                priority=entry["priority"],
                backends=entry["backends"],
                requires=entry["requires"],
                trigger=Trigger(
                    all=[_condition(c) for c in trigger.get("all", ())],
                    any=[_option(c) for c in trigger.get("any", ())],
                    why=trigger["why"],
                ),
                skip_if=[_condition(c) for c in entry["skip_if"]],
                relations=Relations(
                    conflicts=relations["conflicts"],
                    complements=relations["complements"],
                    same_budget=relations["same_budget"],
                ),
                numerics=entry["numerics"],
                sass_signature=entry["sass_signature"],
                lowers_floor=entry.get("lowers_floor", False),
                headroom=[
                    HeadroomTerm(metric=t["metric"], as_=t["as"], of=t.get("of"), scale=t.get("scale", 1.0))
                    for t in entry.get("headroom", ())
                ],
                summary=entry["summary"],
            )
        )
    return MethodRegistry(
        schema_version=document["schema_version"],
        architectures={arch: frozenset(listed) for arch, listed in document["architectures"].items()},
        methods=methods,
        numerics_classes=dict(document["numerics_classes"]),
        notes=document.get("notes", ()),
        source=where,
    )


def load_methods(path: Path | str | None = None) -> MethodRegistry:
    """The method registry at ``path`` (default: the one packaged with kopt), validated against the v1
    schema and checked for consistency. Raises ConfigError naming the file and the problem."""
    document, where = load_document(
        path, default=REGISTRY_FILE, schema_file=SCHEMA_FILE, what="method registry"
    )
    _check_consistency(document, where)
    return _build(document, where)
