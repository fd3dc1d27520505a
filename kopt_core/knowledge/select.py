"""The seed's budget-aware priority scan, deterministic.

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
TAGS = ("atomics", "block_reduction", "cooperative_grid_sync", "multi_kernel", "read_only_loads",
        "shared_memory_staging", "tensor_core_mma", "tma", "transcendentals", "warp_specialized", "wgmma")


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
    selected: tuple[Picked, ...] = field(default=(), converter=tuple)
    skipped: tuple[Skipped, ...] = field(default=(), converter=tuple)
    underfilled: dict = field(factory=dict)  # axis -> why its budget was not spent
    kernel_tags: dict = field(factory=dict)  # trait -> true / false / null (unknown)
    floor_share: float | None = None  # roofline floor_ms / duration_ms (1.0 = at the floor); None = no roofline
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
            return f"skip condition: the kernel works in {sorted(dtypes & set(condition.dtypes))}: {condition.why}"
        elif condition.kind == "dtype_not_in" and dtypes and not dtypes & set(condition.dtypes):
            return f"skip condition: no operand in {list(condition.dtypes)}: {condition.why}"
        elif condition.kind in ("kernel_has", "kernel_lacks"):
            known = [tags.get(tag) for tag in condition.tags]
            if None in known:
                continue  # the trait cannot be read off this kernel: the condition is not applied
            present = any(known)
            if (condition.kind == "kernel_has" and present) or (condition.kind == "kernel_lacks" and not present):
                return f"skip condition: kernel {condition.kind.split('_')[1]} {', '.join(condition.tags)}: {condition.why}"
    return None


def select_methods(
    registry: MethodRegistry,
    *,
    budget: dict,
    values: dict,
    arch: str,
    backend: str,
    bound: str,
    iteration: int = 1,
    numerics_mode: str = "reference",
    selected_before: tuple[str, ...] = (),
    ineffective: dict | None = None,  # id -> the bound under which it proved ineffective
    implementation_failed: tuple[str, ...] = (),
    acknowledged: tuple[str, ...] = (),
    dtypes: tuple[str, ...] = (),
    sass_mnemonics: list[str] | None = None,
    floor_share: float | None = None,
    kernels: int | None = None,
) -> Selection:
    ineffective = ineffective or {}
    tags = kernel_tags(sass_mnemonics, kernels=kernels)
    dtype_set = set(dtypes)
    chosen: list[Picked] = []
    skipped: list[Skipped] = []
    underfilled: dict[str, str] = {}
    groups_used: dict[str, str] = {}
    for axis in AXES:
        slots = min(int(budget.get(axis, 0)), AXIS_CAP)
        if slots <= 0:
            continue
        taken = 0
        for method in registry.by_axis(axis):

            def skip(reason: str, method=method) -> None:
                skipped.append(Skipped(id=method.id, axis=axis, reason=reason))

            if taken >= slots:
                skip(f"not reached: higher priorities filled the {axis} budget ({slots})")
                continue

            if method.id in selected_before:
                skip("selected in an earlier iteration")
                continue
            if backend not in method.backends:
                skip(f"not for the {backend} backend (only {', '.join(method.backends)})")
                continue
            ok, missing = registry.applies_on(method, arch)
            if not ok:
                skip(f"{arch} lacks {', '.join(missing)}")
                continue
            if method.numerics == "approximate" and numerics_mode != "approximate":
                skip(f"approximate numerics: needs --numerics-mode approximate (mode is {numerics_mode})")
                continue
            if numerics_mode == "strict" and method.numerics not in ("bitwise_preserving", "preconditioned"):
                skip("strict numerics admit only bitwise-preserving or preconditioned methods")
                continue
            if floor_share is not None and floor_share >= NEAR_FLOOR and not method.lowers_floor:
                skip(f"the kernel runs at {floor_share:.0%} of its roofline floor: a method that keeps the work "
                     f"and the peak can gain at most {1 - floor_share:.0%}")
                continue
            if method.id in ineffective and ineffective[method.id] == bound:
                skip(f"proved ineffective under the same bound ({bound}); blocked until the bottleneck changes")
                continue
            if method.id in implementation_failed and method.id not in acknowledged:
                skip("failed to implement before; select it again only with an explicit acknowledgement")
                continue
            reason = _skip_reason(method, values, dtype_set, tags)
            if reason:
                skip(reason)
                continue
            if not method.trigger.holds(values):
                shown = "; ".join(_condition_text(c, values) for c in (*method.trigger.all, *method.trigger.any))
                skip(f"not triggered by the evidence: {shown}")
                continue
            clash = [p.id for p in chosen if p.id in method.relations.conflicts]
            if clash:
                skip(f"conflicts with {', '.join(clash)}, chosen this round")
                continue
            group = method.relations.same_budget
            if group and group in groups_used:
                skip(f"same-budget group {group!r} already holds a slot this round ({groups_used[group]})")
                continue
            met = method.trigger.met(values)
            chosen.append(Picked(id=method.id, axis=axis, priority=method.priority, numerics=method.numerics,
                                 evidence="; ".join(_condition_text(c, values) for c in met)))
            if group:
                groups_used[group] = method.id
            taken += 1
        if taken < slots:
            near = floor_share is not None and floor_share >= NEAR_FLOOR
            underfilled[axis] = (f"{slots - taken} of {slots} slot(s) left: no further method on this axis passed "
                                 "every gate (see skipped)"
                                 + (f"; the kernel runs at {floor_share:.0%} of its roofline floor, so only a "
                                    "method that lowers the floor could still pay" if near else "")
                                 + "; no filler is added")
    return Selection(iteration=iteration, arch=arch, backend=backend, numerics_mode=numerics_mode, bound=bound,
                     budget={axis: int(budget.get(axis, 0)) for axis in AXES}, selected=chosen, skipped=skipped,
                     underfilled=underfilled, kernel_tags=tags, floor_share=floor_share)
