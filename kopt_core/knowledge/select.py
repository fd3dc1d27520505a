"""The budget-aware priority scan that picks an iteration's methods, deterministic.

For each axis with budget, methods are scanned by priority (those after the budget fills are recorded as
not reached); a method is skipped when it was selected before, its backend or the architecture lacks
what it needs, the numerics mode forbids it, the kernel already runs within 10% of its roofline floor
and the method cannot lower that floor, it proved ineffective under the same bound, it failed to
implement and nobody acknowledged that, a skip condition holds, its trigger does not fire on the
evidence, it conflicts with a method chosen this round, or its same-budget group already holds a slot
this round. A budget left unfilled says why; no filler is ever added. Every decision is recorded with
its reason.
"""

from __future__ import annotations

import re

from attrs import field, frozen

from kopt_core.knowledge.methods import AllOf, Condition, Method, MethodRegistry
from kopt_core.records.fields import as_tuple
from kopt_core.roofline.records import AXES

SELECTION_SCHEMA_VERSION = 1
AXIS_CAP = 2
# A kernel within 10% of its roofline floor (floor_ms / duration_ms >= 0.9) has at most 10% left for any
# method that keeps its work and the peak it is measured against: only floor-lowering methods are tried.
NEAR_FLOOR = 0.90

# Kernel traits read off the current kernel's SASS (mnemonics only). A trait that no listing can show
# (block_reduction, cooperative_grid_sync) stays unknown, and a skip condition on it is not applied.
TAG_PATTERNS = {
    "atomics": r"^(ATOMG|ATOM|RED)\b",
    "read_only_loads": r"^LDG\..*CONSTANT",
    "shared_memory_staging": r"^(STS|LDS|LDGSTS|LDSM|UTMALDG)\b",
    "tensor_core_mma": r"^(HMMA|IMMA|HGMMA|QGMMA|IGMMA|BGMMA)\b",
    "transcendentals": r"^MUFU\b",
    "tma": r"^(UTMALDG|UTMASTG|UTMAREDG|UBLKCP)\b",
    "warp_specialized": r"^USETMAXREG\b",
    "wgmma": r"^(HGMMA|QGMMA|IGMMA|BGMMA)\b",
}
TAGS = (
    "atomics",
    "block_reduction",
    "cooperative_grid_sync",
    "multi_kernel",
    "read_only_loads",
    "shared_memory_staging",
    "tensor_core_mma",
    "tma",
    "transcendentals",
    "warp_specialized",
    "wgmma",
)


@frozen
class Picked:
    id: str
    axis: str
    priority: int
    numerics: str
    evidence: str  # the trigger's conditions with the measured values


@frozen
class Skipped:
    id: str
    axis: str
    reason: str


@frozen
class Selection:
    """methods.json."""

    iteration: int
    arch: str
    backend: str
    numerics_mode: str
    bound: str
    budget: dict
    selected: tuple[Picked, ...] = field(default=(), converter=as_tuple)
    skipped: tuple[Skipped, ...] = field(default=(), converter=as_tuple)
    underfilled: dict = field(factory=dict)  # axis -> why its budget was not spent
    kernel_tags: dict = field(factory=dict)  # trait -> true / false / null (unknown)
    floor_share: float | None = (
        None  # roofline floor_ms / duration_ms (1.0 = at the floor); None = no roofline
    )
    schema_version: int = SELECTION_SCHEMA_VERSION

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.selected)


def kernel_tags(mnemonics: list[str] | None, *, kernels: int | None = None) -> dict[str, bool | None]:
    """Which traits the kernel's SASS shows (None for each when there is no listing), and whether the
    profiled solve launched more than one kernel (``kernels``: the profile's kernel count)."""
    tags: dict[str, bool | None] = {tag: None for tag in TAGS}
    if mnemonics:
        for tag, pattern in TAG_PATTERNS.items():
            tags[tag] = any(re.match(pattern, m) for m in mnemonics)
    if kernels:
        tags["multi_kernel"] = kernels > 1
    return tags


@frozen
class ProfileEvidence:
    """What one profile shows, as the scan reads it: the roofline's axis budget and bound, how close the
    kernel runs to its roofline floor, the metric values triggers and skip conditions read, and the
    kernel's traits (``kernel_tags``)."""

    budget: dict  # axis -> slots (roofline.json's axis_budget)
    bound: str
    values: dict  # metric registry key (or a roofline evidence key) -> value; None = unknown
    # roofline floor_ms / duration_ms (1.0 = at the floor); None without a workload roofline
    floor_share: float | None = None
    tags: dict = field(factory=lambda: kernel_tags(None))


def _dict_or_empty(value: dict | None) -> dict:
    # a named converter (not attrs' default_if_none) so that type checkers read the field's type
    return {} if value is None else value


@frozen
class SelectionContext:
    """Everything one scan decides on besides the method registry: the profile's evidence, where the kernel
    runs, the numerics mode, the operand dtypes, and the run's method history (empty for a standalone
    selection)."""

    evidence: ProfileEvidence
    arch: str
    backend: str
    iteration: int = 1
    numerics_mode: str = "reference"
    dtypes: tuple[str, ...] = field(default=(), converter=as_tuple)
    selected_before: tuple[str, ...] = field(default=(), converter=as_tuple)
    # id -> the bound under which it proved ineffective
    ineffective: dict = field(factory=dict, converter=_dict_or_empty)
    implementation_failed: tuple[str, ...] = field(default=(), converter=as_tuple)
    # implementation-failed ids the user allows to be selected again
    acknowledged: tuple[str, ...] = field(default=(), converter=as_tuple)


def _condition_text(condition: Condition | AllOf, values: dict) -> str:
    if isinstance(condition, AllOf):
        return "(" + " and ".join(_condition_text(c, values) for c in condition.all) + ")"
    value = values.get(condition.metric)
    shown = "unknown" if value is None else f"{value:.4g}"
    return f"{condition.metric} {condition.op} {condition.value:g} (measured {shown})"


def _skip_reason(method: Method, values: dict, dtypes: set[str], tags: dict) -> str | None:
    for condition in method.skip_if:
        if condition.kind == "metric":
            if condition.holds(values.get(condition.metric)):
                return f"skip condition: {_condition_text(condition, values)}: {condition.why}"
        elif condition.kind == "dtype_in" and dtypes & set(condition.dtypes):
            return (
                f"skip condition: the kernel works in {sorted(dtypes & set(condition.dtypes))}: "
                f"{condition.why}"
            )
        elif condition.kind == "dtype_not_in" and dtypes and not dtypes & set(condition.dtypes):
            return f"skip condition: no operand in {list(condition.dtypes)}: {condition.why}"
        elif condition.kind in ("kernel_has", "kernel_lacks"):
            known = [tags.get(tag) for tag in condition.tags]
            if None in known:
                continue  # the trait cannot be read off this kernel: the condition is not applied
            present = any(known)
            if (condition.kind == "kernel_has" and present) or (
                condition.kind == "kernel_lacks" and not present
            ):
                return (
                    f"skip condition: kernel {condition.kind.split('_')[1]} {', '.join(condition.tags)}: "
                    f"{condition.why}"
                )
    return None


def select_methods(registry: MethodRegistry, context: SelectionContext) -> Selection:
    """One iteration's methods: the scan this module's docstring describes, over ``registry``."""
    evidence = context.evidence
    chosen: list[Picked] = []
    skipped: list[Skipped] = []
    underfilled: dict[str, str] = {}
    groups_used: dict[str, str] = {}
    for axis in AXES:
        slots = min(int(evidence.budget.get(axis, 0)), AXIS_CAP)
        if slots <= 0:
            continue
        taken = 0
        for method in registry.by_axis(axis):
            reason: str | None
            if taken >= slots:
                reason = f"not reached: higher priorities filled the {axis} budget ({slots})"
            else:
                reason = _refusal(method, registry, context) or _clash(method, chosen, groups_used)
            if reason:
                skipped.append(Skipped(id=method.id, axis=axis, reason=reason))
                continue
            met = method.trigger.met(evidence.values)
            chosen.append(
                Picked(
                    id=method.id,
                    axis=axis,
                    priority=method.priority,
                    numerics=method.numerics,
                    evidence="; ".join(_condition_text(c, evidence.values) for c in met),
                )
            )
            if method.relations.same_budget:
                groups_used[method.relations.same_budget] = method.id
            taken += 1
        if taken < slots:
            underfilled[axis] = _underfilled(slots - taken, slots, evidence.floor_share)
    return Selection(
        iteration=context.iteration,
        arch=context.arch,
        backend=context.backend,
        numerics_mode=context.numerics_mode,
        bound=evidence.bound,
        budget={axis: int(evidence.budget.get(axis, 0)) for axis in AXES},
        selected=chosen,
        skipped=skipped,
        underfilled=underfilled,
        kernel_tags=evidence.tags,
        floor_share=evidence.floor_share,
    )


def _refusal(method: Method, registry: MethodRegistry, context: SelectionContext) -> str | None:
    """Why ``method`` cannot be selected whatever else this round chooses (the first gate that refuses it,
    in the order the module's docstring lists them), or None."""
    evidence = context.evidence
    if method.id in context.selected_before:
        return "selected in an earlier iteration"
    if context.backend not in method.backends:
        return f"not for the {context.backend} backend (only {', '.join(method.backends)})"
    ok, missing = registry.applies_on(method, context.arch)
    if not ok:
        return f"{context.arch} lacks {', '.join(missing)}"
    mode = context.numerics_mode
    if method.numerics == "approximate" and mode != "approximate":
        return f"approximate numerics: needs --numerics-mode approximate (mode is {mode})"
    if mode == "strict" and method.numerics not in ("bitwise_preserving", "preconditioned"):
        return "strict numerics admit only bitwise-preserving or preconditioned methods"
    share = evidence.floor_share
    if share is not None and share >= NEAR_FLOOR and not method.lowers_floor:
        return (
            f"the kernel runs at {share:.0%} of its roofline floor: a method that keeps the work "
            f"and the peak can gain at most {1 - share:.0%}"
        )
    if method.id in context.ineffective and context.ineffective[method.id] == evidence.bound:
        return (
            f"proved ineffective under the same bound ({evidence.bound}); blocked until the bottleneck "
            "changes"
        )
    if method.id in context.implementation_failed and method.id not in context.acknowledged:
        return "failed to implement before; select it again only with an explicit acknowledgement"
    reason = _skip_reason(method, evidence.values, set(context.dtypes), evidence.tags)
    if reason:
        return reason
    if not method.trigger.holds(evidence.values):
        conditions = (*method.trigger.all, *method.trigger.any)
        return "not triggered by the evidence: " + "; ".join(
            _condition_text(c, evidence.values) for c in conditions
        )
    return None


def _clash(method: Method, chosen: list[Picked], groups_used: dict[str, str]) -> str | None:
    """Why ``method`` cannot join the methods chosen this round, or None."""
    clash = [p.id for p in chosen if p.id in method.relations.conflicts]
    if clash:
        return f"conflicts with {', '.join(clash)}, chosen this round"
    group = method.relations.same_budget
    if group and group in groups_used:
        return f"same-budget group {group!r} already holds a slot this round ({groups_used[group]})"
    return None


def _underfilled(left: int, slots: int, floor_share: float | None) -> str:
    near = floor_share is not None and floor_share >= NEAR_FLOOR
    return (
        f"{left} of {slots} slot(s) left: no further method on this axis passed every gate (see skipped)"
        + (
            f"; the kernel runs at {floor_share:.0%} of its roofline floor, so only a method that lowers "
            "the floor could still pay"
            if near
            else ""
        )
        + "; no filler is added"
    )
