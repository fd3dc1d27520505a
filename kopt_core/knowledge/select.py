"""The budget-aware priority scan that picks an iteration's methods, deterministic.

For each axis with budget, every method is put through the gates below; those that pass are ranked by the
headroom the evidence says they can unlock (``knowledge.headroom``: the largest known reading of the
method's headroom terms; priority breaks ties and orders methods without a headroom figure after those
with one), and the budget goes down that ranking (those it does not reach are recorded as not reached,
with the headroom of the picks above them). A method is skipped when it was selected before, its backend
or the architecture lacks what it needs, the numerics mode forbids it, the kernel already runs within 10%
of its roofline floor and the method cannot lower that floor, it proved ineffective under the same bound,
it failed to implement and nobody acknowledged that, a skip condition holds, its trigger does not fire on
the evidence, it conflicts with a method chosen this round, or its same-budget group already holds a slot
this round. A budget left unfilled says why; no filler is ever added. Every decision is recorded with its
reason.

An agent may choose the methods itself (``validate_choice``): the scan still runs, for the budget and for
its own picks to stand beside the choice, and the choice must pass the hard constraints (the gates marked
hard in ``GATES``, conflicts, same-budget groups, the per-axis cap and the iteration's budget). The other
gates are the scan's reading of the evidence, which an agent may overrule with a reason.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from typing import Literal

import attrs
from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.knowledge.headroom import headroom, rank_key
from kopt_core.knowledge.methods import AllOf, Condition, Method, MethodRegistry
from kopt_core.records.fields import as_tuple
from kopt_core.records.roofline import AXES
from kopt_core.records.versions import SELECTION_SCHEMA_VERSION

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
    "gemm_like",
    "block_reduction",
    "cooperative_grid_sync",
    "multi_kernel",
    "read_only_loads",
    "reduction_like",
    "shared_memory_staging",
    "streaming",
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
    headroom: float | None = None  # the share of the kernel's time the evidence says it can unlock
    headroom_why: str = ""  # which reading gave it


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
    # floor_ms / duration_ms (1.0 = at the floor): the workload roofline's, else the default model's
    # memory floor; None = no floor known
    floor_share: float | None = None
    # who chose ``selected``: the scan, or an agent overruling it (skipped and underfilled stay the scan's)
    chosen_by: Literal["scan", "agent", "search"] = "scan"
    why: str | None = None  # the agent's (or the search's) reason; None when the scan chose
    # the scan's own picks on the same evidence, whoever chose: what an agent's choice departs from
    scan_selected: tuple[Picked, ...] = field(default=(), converter=as_tuple)
    work_kind: str = "unknown"  # what kind of work the evidence says the kernel does, and why
    work_kind_why: str = ""
    budget_why: str = ""  # why the budget differs from roofline.json's (knowledge.headroom.rebudget)
    # The methods the scan ranked although a kernel_has / kernel_lacks skip condition of theirs could not be
    # applied because the kernel's SASS traits were unknown (no SASS listing): id -> those traits. With a
    # listing, each might have been skipped, and the ranking could differ. None: not recorded (a
    # methods.json older than schema 3).
    unapplied_skips: dict | None = field(factory=dict)
    schema_version: int = SELECTION_SCHEMA_VERSION

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.selected)

    @property
    def scan_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.scan_selected)


def kernel_tags(
    mnemonics: Sequence[str] | None, *, kernels: int | None = None, work_kind: str = "unknown"
) -> dict[str, bool | None]:
    """Which traits the kernel's SASS shows (None for each when there is no listing), whether the
    profiled solve launched more than one kernel (``kernels``: the profile's kernel count), and whether
    its work is GEMM-like (``work_kind``: known only when the kind is named; unknown stays None)."""
    tags: dict[str, bool | None] = {tag: None for tag in TAGS}
    if mnemonics:
        for tag, pattern in TAG_PATTERNS.items():
            tags[tag] = any(re.match(pattern, m) for m in mnemonics)
    if kernels:
        tags["multi_kernel"] = kernels > 1
    if work_kind != "unknown":
        tags["gemm_like"] = work_kind == "gemm_like"
        tags["reduction_like"] = work_kind == "reduction"
        tags["streaming"] = work_kind == "streaming"
    return tags


@frozen
class ProfileEvidence:
    """What one profile shows, as the scan reads it: the roofline's axis budget and bound, how close the
    kernel runs to its roofline floor, the metric values triggers and skip conditions read, and the
    kernel's traits (``kernel_tags``)."""

    budget: dict  # axis -> slots (roofline.json's axis_budget)
    bound: str
    values: dict  # metric registry key (or a roofline evidence key) -> value; None = unknown
    # floor_ms / duration_ms (1.0 = at the floor): the workload roofline's floor, else the default
    # model's memory floor; None without either
    floor_share: float | None = None
    tags: dict = field(factory=lambda: kernel_tags(None))
    work_kind: str = "unknown"  # gemm_like | reduction | streaming | unknown (knowledge.evidence)
    work_kind_why: str = ""
    bundle: str = ""  # the ncu bundle the values came from (full | light; "imported" in older files)
    budget_why: str = ""  # why ``budget`` differs from roofline.json's, empty when it does not


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
    # other backends whose methods apply beside ``backend``'s own (its BackendInfo.methods_of)
    method_backends: tuple[str, ...] = field(default=(), converter=as_tuple)


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


def sass_blind_traits(method: Method, tags: dict) -> tuple[str, ...]:
    """The SASS traits whose absence from ``tags`` left one of ``method``'s kernel_has / kernel_lacks skip
    conditions unapplied, where a SASS listing would have decided it: every trait of the condition that is
    unknown is one a listing shows (``TAG_PATTERNS``). A condition on a trait no listing shows stays
    unapplied with a listing too, so it is not counted."""
    blind: list[str] = []
    for condition in method.skip_if:
        if condition.kind not in ("kernel_has", "kernel_lacks"):
            continue
        unknown = [tag for tag in condition.tags if tags.get(tag) is None]
        if unknown and all(tag in TAG_PATTERNS for tag in unknown):
            blind += unknown
    return tuple(dict.fromkeys(blind))


def axis_slots(budget: dict, axis: str) -> int:
    """The methods ``axis`` may take this iteration: its budget, at most ``AXIS_CAP``."""
    return min(int(budget.get(axis, 0)), AXIS_CAP)


def total_slots(budget: dict) -> int:
    """The methods one iteration may take: every axis's slots together."""
    return sum(axis_slots(budget, axis) for axis in AXES)


def _picked(method: Method, values: dict) -> Picked:
    met = method.trigger.met(values)
    room, room_why = headroom(method, values)
    return Picked(
        id=method.id,
        axis=method.axis,
        priority=method.priority,
        numerics=method.numerics,
        evidence="; ".join(_condition_text(c, values) for c in met),
        headroom=room,
        headroom_why=room_why,
    )


def _not_reached(axis: str, slots: int, picks: Sequence[Picked], method: Method, values: dict) -> str:
    _, room_why = headroom(method, values)
    above = ", ".join(f"{p.id} ({'unknown' if p.headroom is None else f'{p.headroom:.2f}'})" for p in picks)
    return (
        f"not reached: the {axis} budget ({slots}) went to methods ranked above it by headroom "
        f"({above}); {method.id}: {room_why}"
    )


def select_methods(registry: MethodRegistry, context: SelectionContext) -> Selection:
    """One iteration's methods: the scan this module's docstring describes, over ``registry``."""
    evidence = context.evidence
    chosen: list[Picked] = []
    skipped: list[Skipped] = []
    underfilled: dict[str, str] = {}
    groups_used: dict[str, str] = {}
    unapplied: dict[str, list[str]] = {}
    for axis in AXES:
        slots = axis_slots(evidence.budget, axis)
        if slots <= 0:
            continue
        methods = registry.by_axis(axis)
        refused = {method.id: _refusal(method, registry, context) for method in methods}
        ranked = sorted(
            (method for method in methods if not refused[method.id]),
            key=lambda method: rank_key(method, evidence.values),
        )
        for method in ranked:  # what a missing SASS listing left undecided, for the record (not the scan)
            blind = sass_blind_traits(method, evidence.tags)
            if blind:
                unapplied[method.id] = list(blind)
        decided: dict[str, str] = {}
        picks: list[Picked] = []
        for method in ranked:
            if len(picks) >= slots:
                decided[method.id] = _not_reached(axis, slots, picks, method, evidence.values)
                continue
            clash = _clash(method, chosen, groups_used)
            if clash:
                decided[method.id] = clash
                continue
            pick = _picked(method, evidence.values)
            picks.append(pick)
            chosen.append(pick)
            if method.relations.same_budget:
                groups_used[method.relations.same_budget] = method.id
        for method in methods:  # the skipped in priority order, each with its reason
            reason = refused[method.id] or decided.get(method.id)
            if reason:
                skipped.append(Skipped(id=method.id, axis=axis, reason=reason))
        taken = len(picks)
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
        scan_selected=chosen,
        work_kind=evidence.work_kind,
        work_kind_why=evidence.work_kind_why,
        budget_why=evidence.budget_why,
        unapplied_skips=unapplied,
    )


# ----------------------------------------------------------------------------------------------- gates
# Each gate says why a method cannot be selected whatever else this round chooses, or None.

Gate = Callable[[Method, MethodRegistry, SelectionContext], str | None]


def _selected_before(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    return "selected in an earlier iteration" if method.id in context.selected_before else None


def _backend(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    if any(name in method.backends for name in (context.backend, *context.method_backends)):
        return None
    return f"not for the {context.backend} backend (only {', '.join(method.backends)})"


def _architecture(method: Method, registry: MethodRegistry, context: SelectionContext) -> str | None:
    ok, missing = registry.applies_on(method, context.arch)
    return None if ok else f"{context.arch} lacks {', '.join(missing)}"


def _numerics(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    mode = context.numerics_mode
    if method.numerics == "approximate" and mode != "approximate":
        return f"approximate numerics: needs --numerics-mode approximate (mode is {mode})"
    if mode == "strict" and method.numerics not in ("bitwise_preserving", "preconditioned"):
        return "strict numerics admit only bitwise-preserving or preconditioned methods"
    return None


def _near_floor(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    share = context.evidence.floor_share
    if share is None or share < NEAR_FLOOR or method.lowers_floor:
        return None
    return (
        f"the kernel runs at {share:.0%} of its roofline floor: a method that keeps the work "
        f"and the peak can gain at most {1 - share:.0%}"
    )


def _ineffective(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    bound = context.evidence.bound
    if method.id not in context.ineffective or context.ineffective[method.id] != bound:
        return None
    return f"proved ineffective under the same bound ({bound}); blocked until the bottleneck changes"


def _implementation_failed(
    method: Method, _registry: MethodRegistry, context: SelectionContext
) -> str | None:
    if method.id not in context.implementation_failed or method.id in context.acknowledged:
        return None
    return (
        "failed to implement before; select it again only with an explicit acknowledgement "
        f"(--acknowledge {method.id})"
    )


def _skip_condition(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    evidence = context.evidence
    return _skip_reason(method, evidence.values, set(context.dtypes), evidence.tags)


def _untriggered(method: Method, _registry: MethodRegistry, context: SelectionContext) -> str | None:
    values = context.evidence.values
    if method.trigger.holds(values):
        return None
    conditions = (*method.trigger.all, *method.trigger.any)
    reason = "not triggered by the evidence: " + "; ".join(_condition_text(c, values) for c in conditions)
    missing = [key for key in dict.fromkeys(method.trigger.metrics()) if values.get(key) is None]
    if missing:
        bundle = context.evidence.bundle
        source = f"the {bundle} bundle" if bundle else "this profile"
        reason += (
            f" -- inconclusive: {', '.join(missing)} not measured by {source}, so the trigger could not "
            "fire on them (a full-set profile, or a kernel SASS listing, would decide)"
        )
    return reason


# The gates in the order the scan applies them (the module docstring), each marked hard when it binds an
# agent's own choice too: what the hardware, the backend and the numerics mode cannot do, and what the
# run's history rules out. The others are the scan's reading of the evidence, which an agent may overrule.
GATES: tuple[tuple[Gate, bool], ...] = (
    (_selected_before, False),
    (_backend, True),
    (_architecture, True),
    (_numerics, True),
    (_near_floor, False),
    (_ineffective, True),
    (_implementation_failed, True),
    (_skip_condition, False),
    (_untriggered, False),
)


def _refusal(method: Method, registry: MethodRegistry, context: SelectionContext) -> str | None:
    """The first gate's reason for refusing ``method``, in ``GATES``' order, or None."""
    for gate, _hard in GATES:
        reason = gate(method, registry, context)
        if reason:
            return reason
    return None


def _hard_refusals(method: Method, registry: MethodRegistry, context: SelectionContext) -> list[str]:
    """Every hard gate's reason for refusing ``method``."""
    reasons = (gate(method, registry, context) for gate, hard in GATES if hard)
    return [reason for reason in reasons if reason]


def _conflict(method: Method, chosen: Sequence[str]) -> str | None:
    clash = [other for other in chosen if other in method.relations.conflicts]
    return f"conflicts with {', '.join(clash)}, chosen this round" if clash else None


def _group_taken(method: Method, groups_used: dict[str, str]) -> str | None:
    group = method.relations.same_budget
    if group and group in groups_used:
        return f"same-budget group {group!r} already holds a slot this round ({groups_used[group]})"
    return None


def _clash(method: Method, chosen: list[Picked], groups_used: dict[str, str]) -> str | None:
    """Why ``method`` cannot join the methods chosen this round, or None."""
    return _conflict(method, [p.id for p in chosen]) or _group_taken(method, groups_used)


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


# ------------------------------------------------------------------------------------ an agent's choice


@frozen
class Choice:
    """Methods an agent chose itself (``kopt select --methods ... --why ...``), in its order. No methods
    (``--methods none``) is a choice too: an iteration whose branches differ in hyperparameters only,
    when the agent reads the scan's picks as not worth an iteration (their headroom, say)."""

    methods: tuple[str, ...] = field(converter=as_tuple)
    why: str | None = None


class ChoiceRejected(ConfigError):
    """An agent's choice that breaks hard constraints (exit 4); ``problems`` names each one."""

    def __init__(self, problems: Sequence[str], scan_ids: Sequence[str]):
        self.problems = tuple(problems)
        picks = ", ".join(scan_ids) or "none"
        super().__init__(
            f"the chosen methods are refused ({len(self.problems)} problem(s)); nothing was written:\n"
            + "\n".join(f"  - {problem}" for problem in self.problems),
            hint=f"the scan's own picks on this evidence: {picks}; the rules: docs/loop.md, "
            '"Choosing methods yourself"',
        )


def validate_choice(registry: MethodRegistry, context: SelectionContext, choice: Choice) -> Selection:
    """The selection of an agent's ``choice``: its methods as ``selected``, with its reason, beside the
    scan's own picks (``scan_selected``, ``skipped`` and ``underfilled`` are the scan's). Raises
    ChoiceRejected naming every hard constraint the choice breaks."""
    scan = select_methods(registry, context)
    problems = _choice_problems(registry, context, choice)
    if problems:
        raise ChoiceRejected(problems, scan.ids)
    picked = []
    for method in _known(registry, choice.methods):
        # an untriggered method's evidence is what the trigger asked and what was measured
        untriggered = _untriggered(method, registry, context)
        pick = _picked(method, context.evidence.values)
        picked.append(attrs.evolve(pick, evidence=untriggered) if untriggered else pick)
    return attrs.evolve(scan, selected=picked, chosen_by="agent", why=(choice.why or "").strip())


def _choice_problems(registry: MethodRegistry, context: SelectionContext, choice: Choice) -> list[str]:
    """Every hard constraint ``choice`` breaks, in words; empty when it may be selected."""
    problems: list[str] = []
    if not (choice.why or "").strip():
        problems.append("no reason given: say why you chose these methods (--why); it is recorded")
    methods: list[Method] = []
    for method_id in dict.fromkeys(choice.methods):  # each id once, in its order
        if choice.methods.count(method_id) > 1:
            problems.append(f"{method_id} is chosen {choice.methods.count(method_id)} times")
        method = registry.get(method_id)
        if method is None:
            problems.append(_unknown(method_id, registry))
            continue
        problems += [f"{method_id}: {reason}" for reason in _hard_refusals(method, registry, context)]
        methods.append(method)
    return problems + _relation_problems(methods) + _budget_problems(methods, context.evidence.budget)


def _budget_problems(methods: list[Method], budget: dict) -> list[str]:
    """An axis with more than ``AXIS_CAP`` methods, and more methods than the iteration's budget."""
    problems: list[str] = []
    for axis in AXES:
        on_axis = [m.id for m in methods if m.axis == axis]
        if len(on_axis) > AXIS_CAP:
            problems.append(
                f"the {axis} axis gets {len(on_axis)} methods ({', '.join(on_axis)}): at most {AXIS_CAP} "
                "per axis"
            )
    total = total_slots(budget)
    if len(methods) > total:
        shown = ", ".join(f"{axis} {axis_slots(budget, axis)}" for axis in AXES)
        problems.append(
            f"{len(methods)} methods chosen, but this iteration's budget from the roofline gaps is "
            f"{total} ({shown})"
        )
    return problems


def _relation_problems(methods: list[Method]) -> list[str]:
    """The registry relations a set of methods breaks: conflicting pairs, two of one same-budget group."""
    problems: list[str] = []
    groups_used: dict[str, str] = {}
    for index, method in enumerate(methods):
        for reason in (
            _conflict(method, [m.id for m in methods[:index]]),
            _group_taken(method, groups_used),
        ):
            if reason:
                problems.append(f"{method.id}: {reason}")
        if method.relations.same_budget:
            groups_used.setdefault(method.relations.same_budget, method.id)
    return problems


def _known(registry: MethodRegistry, ids: Sequence[str]) -> list[Method]:
    """The registry's methods among ``ids``, each once, in their order."""
    found = (registry.get(method_id) for method_id in dict.fromkeys(ids))
    return [method for method in found if method is not None]


def _unknown(method_id: str, registry: MethodRegistry) -> str:
    ids = registry.ids()
    named = [i for i in ids if i.partition(".")[2] == method_id]  # the name without its axis
    close = named or difflib.get_close_matches(method_id.lower(), ids, n=2, cutoff=0.75)
    nearest = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unknown method id {method_id!r}: not in the method registry{nearest}"
