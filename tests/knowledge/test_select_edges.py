"""The priority scan's decisions at their edges (kopt_core.knowledge.select), over every relation the real
method registry declares: each conflict pair refused together (by the scan and in an agent's choice), each
same-budget group holding one slot, complements never refusing nor pulling in a method, and the near-floor
gate exactly at, just below and above NEAR_FLOOR.

Relation tests scan a registry of the related methods alone with their triggers and skip conditions taken
off (``_only``): every soft gate is then open, so what refuses a method is the relation under test; the
same methods without their relations are all chosen, which shows it."""

from __future__ import annotations

import math

import attrs
import pytest

from kopt_core.knowledge.methods import Condition, Method, MethodRegistry, Relations, Trigger, load_methods
from kopt_core.knowledge.select import (
    NEAR_FLOOR,
    Choice,
    ChoiceRejected,
    ProfileEvidence,
    Selection,
    SelectionContext,
    kernel_tags,
    sass_blind_traits,
    select_methods,
    validate_choice,
)
from kopt_core.records.roofline import AXES

REGISTRY = load_methods()
ROOM = {"compute": 2, "memory": 2, "latency": 2}  # every axis at the per-axis cap

CONFLICT_PAIRS = sorted(
    {tuple(sorted((m.id, other))) for m in REGISTRY.methods for other in m.relations.conflicts}
)
GROUPS: dict[str, tuple[str, ...]] = {}
for _method in REGISTRY.methods:
    if _method.relations.same_budget:
        GROUPS[_method.relations.same_budget] = (*GROUPS.get(_method.relations.same_budget, ()), _method.id)
COMPLEMENT_PAIRS = sorted((m.id, other) for m in REGISTRY.methods for other in m.relations.complements)


def _scan_order(method_id: str) -> tuple[int, int]:
    """Where the scan reaches a method: axis by axis (AXES order), then by priority."""
    method = REGISTRY.get(method_id)
    assert method is not None, method_id
    return AXES.index(method.axis), method.priority


def _open(method: Method, *, relations: bool = True) -> Method:
    """``method`` with every soft gate of the evidence open: no trigger condition, no skip condition."""
    opened = attrs.evolve(method, trigger=Trigger(), skip_if=())
    return opened if relations else attrs.evolve(opened, relations=Relations())


def _only(ids, *, relations: bool = True) -> MethodRegistry:
    """The real registry cut down to ``ids`` (their features, backends, numerics and relations as they
    are), each with its soft gates open."""
    methods = []
    for method_id in ids:
        method = REGISTRY.get(method_id)
        assert method is not None, method_id
        methods.append(_open(method, relations=relations))
    return attrs.evolve(REGISTRY, methods=methods)


def _where_all_apply(ids) -> tuple[str, str]:
    """An architecture and a backend on which every method of ``ids`` may be chosen."""
    backends = set.intersection(*(set(REGISTRY.get(i).backends) for i in ids))
    archs = [arch for arch in REGISTRY.architectures if all(REGISTRY.applies_on(i, arch)[0] for i in ids)]
    assert backends and archs, f"{ids} never apply together (backends {backends}, architectures {archs})"
    return archs[0], sorted(backends)[0]


def _context(ids, *, budget=ROOM, floor_share=None, values=None, **kwargs) -> SelectionContext:
    arch, backend = _where_all_apply(ids)
    evidence = ProfileEvidence(
        budget=budget, bound="compute", values=values or {}, floor_share=floor_share, tags=kernel_tags(None)
    )
    # approximate numerics admit every numerics class, so the numerics gate refuses nothing
    return SelectionContext(
        evidence=evidence, arch=arch, backend=backend, numerics_mode="approximate", **kwargs
    )


def _skipped(selection: Selection) -> dict[str, str]:
    return {s.id: s.reason for s in selection.skipped}


def test_the_registry_declares_the_relations_these_tests_iterate():
    # guards the parametrized tests below from passing over an empty list
    assert ("compute.split_k", "compute.stream_k") in CONFLICT_PAIRS
    assert ("compute.fp8", "compute.tf32") in CONFLICT_PAIRS
    assert GROUPS["mma_path"] == ("compute.tensor_core", "compute.wgmma")
    assert GROUPS["grid_shape"] == ("compute.persistent_kernel", "latency.grid_sizing")
    assert all(len(members) >= 2 for members in GROUPS.values()), GROUPS
    assert len(COMPLEMENT_PAIRS) >= 40


# ------------------------------------------------------------------------------------------ conflicts


@pytest.mark.parametrize("pair", CONFLICT_PAIRS, ids="+".join)
def test_the_scan_never_selects_both_of_a_conflicting_pair(pair):
    first, second = sorted(pair, key=_scan_order)
    selection = select_methods(_only(pair), _context(pair))
    assert selection.ids == (first,)
    assert _skipped(selection) == {second: f"conflicts with {first}, chosen this round"}
    # the conflict alone refuses the second: without the relations the scan takes both
    free = select_methods(_only(pair, relations=False), _context(pair))
    assert free.ids == (first, second)
    assert free.skipped == ()


@pytest.mark.parametrize("pair", CONFLICT_PAIRS, ids="+".join)
def test_an_agent_may_not_choose_both_of_a_conflicting_pair(pair):
    for earlier, later in (pair, pair[::-1]):
        with pytest.raises(ChoiceRejected) as refused:
            validate_choice(REGISTRY, _context(pair), Choice(methods=(earlier, later), why="both"))
        assert refused.value.problems == (f"{later}: conflicts with {earlier}, chosen this round",)
    for alone in pair:  # either one alone is a valid choice in the same context
        chosen = validate_choice(REGISTRY, _context(pair), Choice(methods=(alone,), why="one"))
        assert chosen.ids == (alone,) and chosen.chosen_by == "agent"


def test_split_k_and_stream_k_on_real_triggers():
    # waves_per_sm 0.5 triggers both (split-K under one wave, stream-K under two): split-K comes first
    values = {"waves_per_sm": 0.5}
    budget = {"compute": 2, "memory": 0, "latency": 0}
    context = _context(["compute.split_k", "compute.stream_k"], budget=budget, values=values)
    selection = select_methods(REGISTRY, attrs.evolve(context, arch="sm_90a", backend="cuda"))
    assert selection.ids == ("compute.split_k",)
    assert _skipped(selection)["compute.stream_k"] == "conflicts with compute.split_k, chosen this round"
    assert selection.underfilled == {
        "compute": "1 of 2 slot(s) left: no further method on this axis passed every gate (see skipped); "
        "no filler is added"
    }
    # one and a half waves trigger stream-K alone, and nothing refuses it
    one_and_a_half = attrs.evolve(context.evidence, values={"waves_per_sm": 1.5})
    alone = select_methods(REGISTRY, attrs.evolve(context, evidence=one_and_a_half, arch="sm_90a"))
    assert alone.ids == ("compute.stream_k",)
    # a conflict binds the methods of this round only: split-K chosen in an earlier iteration lets stream-K in
    later = select_methods(REGISTRY, attrs.evolve(context, selected_before=("compute.split_k",)))
    assert later.ids == ("compute.stream_k",)
    assert _skipped(later)["compute.split_k"] == "selected in an earlier iteration"


# ---------------------------------------------------------------------------------- same-budget groups


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_same_budget_group_holds_one_slot_in_the_scan(group):
    members = GROUPS[group]
    winner, *rest = sorted(members, key=_scan_order)
    selection = select_methods(_only(members), _context(members))
    assert selection.ids == (winner,)
    assert _skipped(selection) == {
        other: f"same-budget group {group!r} already holds a slot this round ({winner})" for other in rest
    }
    free = select_methods(_only(members, relations=False), _context(members))
    assert free.ids == tuple(sorted(members, key=_scan_order))


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_an_agent_may_choose_one_member_of_a_same_budget_group(group):
    members = GROUPS[group]
    context = _context(members)
    first, second = members[0], members[1]
    for earlier, later in ((first, second), (second, first)):
        with pytest.raises(ChoiceRejected) as refused:
            validate_choice(REGISTRY, context, Choice(methods=(earlier, later), why="both"))
        assert refused.value.problems == (
            f"{later}: same-budget group {group!r} already holds a slot this round ({earlier})",
        )
    assert validate_choice(REGISTRY, context, Choice(methods=(second,), why="one")).ids == (second,)


def test_the_group_s_slot_leaves_the_axis_s_other_slot_to_others():
    # tensor_core wins mma_path; wgmma is refused; register tiling (no group) still takes the second slot
    ids = ("compute.tensor_core", "compute.wgmma", "compute.register_tiling")
    budget = {"compute": 2, "memory": 0, "latency": 0}
    selection = select_methods(_only(ids), _context(ids, budget=budget))
    assert selection.ids == ("compute.tensor_core", "compute.register_tiling")
    assert _skipped(selection) == {
        "compute.wgmma": "same-budget group 'mma_path' already holds a slot this round (compute.tensor_core)"
    }
    assert selection.underfilled == {}


def test_grid_shape_spans_two_axes_on_real_triggers():
    # many short waves trigger the persistent kernel (compute); 20% occupancy triggers grid sizing (latency)
    values = {"waves_per_sm": 3.0, "wave_duration_us": 5.0, "achieved_occupancy_pct": 20.0}
    budget = {"compute": 1, "memory": 0, "latency": 2}
    context = _context(("compute.persistent_kernel", "latency.grid_sizing"), budget=budget, values=values)
    selection = select_methods(REGISTRY, attrs.evolve(context, arch="sm_90a", backend="cuda"))
    assert selection.ids == ("compute.persistent_kernel",)
    assert _skipped(selection)["latency.grid_sizing"] == (
        "same-budget group 'grid_shape' already holds a slot this round (compute.persistent_kernel)"
    )


# ----------------------------------------------------------------------------------------- complements


@pytest.mark.parametrize("pair", COMPLEMENT_PAIRS, ids="+".join)
def test_complements_are_chosen_together_and_pull_nothing_in(pair):
    a, b = (REGISTRY.get(i) for i in pair)
    context = _context(pair)  # complements are meant to be used together: somewhere they both apply
    shared = a.relations.same_budget is not None and a.relations.same_budget == b.relations.same_budget
    in_order = tuple(sorted(pair, key=_scan_order))
    scan = select_methods(_only(pair), context)
    if shared:  # a complement is no exemption from a same-budget group
        assert scan.ids == in_order[:1]
        with pytest.raises(ChoiceRejected):
            validate_choice(REGISTRY, context, Choice(methods=pair, why="together"))
    else:
        assert scan.ids == in_order and scan.skipped == ()
        assert validate_choice(REGISTRY, context, Choice(methods=pair, why="together")).ids == pair
    # the scan does not take a method because its complement was chosen: b's own trigger still decides
    triggered_a_only = attrs.evolve(REGISTRY, methods=[_open(a), b])
    assert b.trigger.conditions(), b.id  # every method has a trigger, unmet on no evidence
    only_a = select_methods(triggered_a_only, context)
    assert only_a.ids == (a.id,)
    assert _skipped(only_a)[b.id].startswith("not triggered by the evidence: ")


# -------------------------------------------------------------------------------------- the near floor

BELOW = math.nextafter(NEAR_FLOOR, 0.0)


@pytest.mark.parametrize("method_id", REGISTRY.ids())
def test_near_floor_gate_at_just_below_and_above_the_threshold(method_id):
    method = REGISTRY.get(method_id)
    for share in (BELOW, 0.5, None):
        assert select_methods(_only([method_id]), _context([method_id], floor_share=share)).ids == (
            method_id,
        )
    for share, shown, left in ((NEAR_FLOOR, "90%", "10%"), (0.92, "92%", "8%"), (1.0, "100%", "0%")):
        selection = select_methods(_only([method_id]), _context([method_id], floor_share=share))
        if method.lowers_floor:  # changing the work or the peak moves the floor: still worth trying
            assert selection.ids == (method_id,), share
        else:
            assert selection.ids == (), share
            assert _skipped(selection) == {
                method_id: f"the kernel runs at {shown} of its roofline floor: a method that keeps the work "
                f"and the peak can gain at most {left}"
            }


def test_the_underfilled_reason_names_the_floor_from_ninety_percent_on():
    ids = ["memory.coalescing"]  # keeps the work and the peak
    at = select_methods(_only(ids), _context(ids, floor_share=NEAR_FLOOR))
    assert at.underfilled["memory"] == (
        "2 of 2 slot(s) left: no further method on this axis passed every gate (see skipped); the kernel "
        "runs at 90% of its roofline floor, so only a method that lowers the floor could still pay; "
        "no filler is added"
    )
    below = select_methods(_only(ids), _context(ids, floor_share=BELOW))
    assert below.ids == ("memory.coalescing",)
    assert below.underfilled["memory"] == (
        "1 of 2 slot(s) left: no further method on this axis passed every gate (see skipped); "
        "no filler is added"
    )


def test_near_floor_on_the_h200_softmax_evidence():
    # the evidence of tests/knowledge/test_select.py's softmax case, at the threshold and a hair under it
    values = {
        "warp_stall_long_scoreboard_pct": 44.0,
        "warp_stall_barrier_pct": 18.0,
        "dram_throughput_pct": 83.5,
        "waves_per_sm": 20.7,
        "wave_duration_us": 6.2,
        "fma_pipe_utilization_pct": 15.0,
    }
    budget = {"compute": 2, "memory": 1, "latency": 1}

    def scan(share):
        evidence = ProfileEvidence(
            budget=budget, bound="memory", values=values, floor_share=share, tags=kernel_tags(None, kernels=2)
        )
        context = SelectionContext(evidence=evidence, arch="sm_90a", backend="cuda", dtypes=("float32",))
        return select_methods(REGISTRY, context)

    assert scan(NEAR_FLOOR).ids == ("memory.kernel_fusion",)  # only fewer bytes can lower the floor
    assert scan(0.92).ids == ("memory.kernel_fusion",)
    # a hair under it every method competes on its headroom: kernel fusion's (the DRAM excess) is not
    # measured in this evidence, so the measured stall shares rank above it
    below = scan(BELOW)
    assert below.ids == (
        "compute.warp_shuffle_reduction",  # barrier stalls 18% -> 0.18
        "compute.warp_specialization",  # long scoreboard 44% x 0.3 -> 0.13
        "memory.cp_async",  # long scoreboard 44% x 0.5 -> 0.22
        "latency.multistage_pipeline",  # long scoreboard 44% x 0.6 -> 0.26
    )
    assert [p.headroom for p in below.selected] == [0.18, 0.13, 0.22, 0.26]
    assert _skipped(below)["memory.kernel_fusion"] == (
        "not reached: the memory budget (1) went to methods ranked above it by headroom "
        "(memory.cp_async (0.22)); memory.kernel_fusion: headroom unknown: dram_excess_ratio, "
        "input_l2_reread_ratio not measured"
    )


# ------------------------------------------------------------------------------------ budget and slots


def test_a_choice_may_fill_the_capped_budget_exactly_and_not_one_more():
    # compute's 3 slots are capped at 2: the iteration takes 3 methods (compute 2, memory 1)
    budget = {"compute": 3, "memory": 1, "latency": 0}
    three = ("compute.register_tiling", "compute.loop_unrolling", "memory.smem_tiling")
    context = _context(three, budget=budget)
    assert validate_choice(REGISTRY, context, Choice(methods=three, why="fill")).ids == three
    four = (*three, "latency.ilp")
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(REGISTRY, context, Choice(methods=four, why="one more"))
    assert refused.value.problems == (
        "4 methods chosen, but this iteration's budget from the roofline gaps is 3 "
        "(compute 2, memory 1, latency 0)",
    )


def test_a_full_axis_leaves_the_next_triggered_method_not_reached():
    ids = ("memory.coalescing", "memory.smem_tiling", "memory.vectorized_access")
    budget = {"compute": 0, "memory": 1, "latency": 0}
    selection = select_methods(_only(ids), _context(ids, budget=budget))
    assert selection.ids == ("memory.coalescing",)
    # no headroom is measured: priority alone orders them
    above = "not reached: the memory budget (1) went to methods ranked above it by headroom "
    above += "(memory.coalescing (unknown)); "
    assert _skipped(selection) == {
        "memory.smem_tiling": above + "memory.smem_tiling: headroom unknown: dram_excess_ratio, "
        "l1tex_throughput_pct, l1_hit_rate_pct not measured",
        "memory.vectorized_access": above + "memory.vectorized_access: headroom unknown: "
        "warp_stall_lg_throttle_pct, lsu_pipe_utilization_pct not measured",
    }
    # a measured headroom outranks priority: L1 99% busy gives the staged tiles 0.79 over nothing known
    measured = select_methods(_only(ids), _context(ids, budget=budget, values={"l1tex_throughput_pct": 99.0}))
    assert measured.ids == ("memory.smem_tiling",)
    assert measured.selected[0].headroom_why == "headroom 0.79 from l1tex_throughput_pct 99 / 100 x 0.8"
    assert selection.underfilled == {}


def test_bank_conflicts_fire_from_the_light_bundle_s_counter_too():
    ids = ("memory.bank_conflict_avoidance",)
    stalled = {"warp_stall_mio_throttle_pct": 19.0}
    for values, fires in (
        ({**stalled, "shared_excess_wavefronts": 1.0}, True),  # the full set's count
        ({**stalled, "bank_conflicts_per_inst": 0.05}, True),  # the light bundle's ratio at its threshold
        ({**stalled, "bank_conflicts_per_inst": 0.0499}, False),
        ({"bank_conflicts_per_inst": 0.9, "warp_stall_mio_throttle_pct": 9.9}, False),  # nobody waits
        ({"bank_conflicts_per_inst": 0.9, "warp_stall_short_scoreboard_pct": 10.0}, True),
    ):
        trigger = REGISTRY.get(ids[0]).trigger
        assert trigger.holds(values) is fires, values


# ------------------------------------------------------------------ skip conditions a SASS listing decides


def _has(*tags: str) -> Condition:
    return Condition(kind="kernel_has", tags=tags, why="test")


def _lacks(*tags: str) -> Condition:
    return Condition(kind="kernel_lacks", tags=tags, why="test")


def test_sass_blind_traits_are_the_unknown_traits_a_listing_shows():
    method = _open(REGISTRY.get("memory.tma"), relations=False)
    unknown = kernel_tags(None)
    with_skips = attrs.evolve(method, skip_if=(_has("tma", "wgmma"), _lacks("tma"), _has("atomics")))
    assert sass_blind_traits(with_skips, unknown) == ("tma", "wgmma", "atomics")  # each once, in order
    # a condition that also reads a trait no listing shows stays unapplied with a listing: not counted
    assert sass_blind_traits(attrs.evolve(method, skip_if=(_has("tma", "block_reduction"),)), unknown) == ()
    assert sass_blind_traits(attrs.evolve(method, skip_if=(_lacks("multi_kernel"),)), unknown) == ()
    metric = Condition(kind="metric", metric="dram_throughput_pct", op=">=", value=1.0)
    assert sass_blind_traits(attrs.evolve(method, skip_if=(metric,)), unknown) == ()
    # a kernel_lacks condition alone counts as well, and one after a metric condition is still read
    assert sass_blind_traits(attrs.evolve(method, skip_if=(_lacks("atomics"),)), unknown) == ("atomics",)
    assert sass_blind_traits(attrs.evolve(method, skip_if=(metric, _has("tma"))), unknown) == ("tma",)
    # known traits (a listing was read) leave nothing unapplied; one unknown trait beside a known one counts
    read = kernel_tags(["LDS", "FFMA"])
    assert sass_blind_traits(with_skips, read) == ()
    assert sass_blind_traits(with_skips, {**read, "wgmma": None}) == ("wgmma",)


def test_the_scan_records_which_ranked_methods_a_missing_listing_left_unskipped():
    ids = ("memory.smem_tiling", "memory.kernel_fusion", "memory.read_only_cache", "memory.tma")
    skips = {
        "memory.smem_tiling": (_has("shared_memory_staging"),),  # a listing decides it
        "memory.kernel_fusion": (_lacks("multi_kernel"),),  # no listing decides it
        "memory.read_only_cache": (_has("shared_memory_staging", "block_reduction"),),  # nor this
        "memory.tma": (_has("tma"),),  # a listing decides it, but the method is refused before ranking
    }
    registry = attrs.evolve(
        REGISTRY,
        methods=[attrs.evolve(_open(REGISTRY.get(i), relations=False), skip_if=skips[i]) for i in ids],
    )
    budget = {"compute": 0, "memory": 1, "latency": 0}
    blind = select_methods(registry, _context(ids, budget=budget, selected_before=("memory.tma",)))
    assert blind.unapplied_skips == {"memory.smem_tiling": ["shared_memory_staging"]}
    # the record changes nothing in the scan: the same picks as with the condition gone
    gone = attrs.evolve(
        registry,
        methods=[
            attrs.evolve(m, skip_if=()) if m.id == "memory.smem_tiling" else m for m in registry.methods
        ],
    )
    plain = select_methods(gone, _context(ids, budget=budget, selected_before=("memory.tma",)))
    assert blind.selected == plain.selected and blind.skipped == plain.skipped
    assert plain.unapplied_skips == {}
    # with a listing that shows the staging, the condition applies and nothing is left unapplied
    evidence = attrs.evolve(_context(ids, budget=budget).evidence, tags=kernel_tags(["LDS", "STS"]))
    read = select_methods(registry, attrs.evolve(_context(ids, budget=budget), evidence=evidence))
    assert read.unapplied_skips == {}
    assert _skipped(read)["memory.smem_tiling"].startswith("skip condition: kernel has shared_memory_staging")
    # an agent's choice keeps the scan's record
    choice = validate_choice(
        registry, _context(ids, budget=budget), Choice(methods=("memory.kernel_fusion",), why="test")
    )
    assert choice.unapplied_skips == select_methods(registry, _context(ids, budget=budget)).unapplied_skips
