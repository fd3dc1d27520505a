"""Exact decisions and reasons of kopt_core/knowledge/select.py where its mutants change them (issue 15).

A small registry built here (``method``) makes every gate, every reason and every budget figure exact:
each test names what the scan selects, what it skips and why, word for word."""

from __future__ import annotations

import attrs
import pytest

from kopt_core.knowledge.methods import AllOf, Condition, Method, MethodRegistry, Relations, Trigger
from kopt_core.knowledge.select import (
    AXIS_CAP,
    NEAR_FLOOR,
    TAGS,
    Choice,
    ChoiceRejected,
    Picked,
    ProfileEvidence,
    Selection,
    SelectionContext,
    Skipped,
    axis_slots,
    kernel_tags,
    select_methods,
    total_slots,
    validate_choice,
)
from kopt_core.records.versions import selection_v1_to_v2

ARCHS = {"sm_80": frozenset({"cp_async"}), "sm_90a": frozenset({"cp_async", "tma", "wgmma"})}

NO_TERMS = "no headroom terms in the registry"  # the words for a method without headroom terms


def metric(name, op, value, why=""):
    return Condition(kind="metric", metric=name, op=op, value=value, why=why)


def method(
    method_id,
    *,
    priority=1,
    backends=("cuda", "triton"),
    requires=(),
    trigger=None,
    skip_if=(),
    relations=None,
    numerics="bitwise_preserving",
    lowers_floor=False,
) -> Method:
    return Method(
        id=method_id,
        axis=method_id.partition(".")[0],
        name=method_id,
        priority=priority,
        backends=backends,
        requires=requires,
        trigger=trigger or Trigger(),
        skip_if=skip_if,
        relations=relations or Relations(),
        numerics=numerics,
        sass_signature="",
        summary="",
        lowers_floor=lowers_floor,
    )


def registry(*methods: Method) -> MethodRegistry:
    return MethodRegistry(schema_version=1, architectures=ARCHS, methods=methods)


def context(
    *,
    budget=None,
    values=None,
    bound="memory",
    floor_share=None,
    tags=None,
    bundle="",
    arch="sm_90a",
    backend="cuda",
    **kwargs,
) -> SelectionContext:
    evidence = ProfileEvidence(
        budget={"compute": 1, "memory": 1, "latency": 1} if budget is None else budget,
        bound=bound,
        values=values or {},
        floor_share=floor_share,
        tags=kernel_tags(None) if tags is None else tags,
        bundle=bundle,
    )
    return SelectionContext(evidence=evidence, arch=arch, backend=backend, **kwargs)


def skipped(selection: Selection) -> dict[str, str]:
    return {s.id: s.reason for s in selection.skipped}


NO_FILLER = "no further method on this axis passed every gate (see skipped); no filler is added"


# ------------------------------------------------------------------------------ records and traits


def test_a_v1_selection_is_the_scan_s():
    v1 = {"iteration": 1, "selected": [{"id": "memory.a"}]}
    assert selection_v1_to_v2(dict(v1)) == v1 | {
        "chosen_by": "scan",
        "why": None,
        "scan_selected": [{"id": "memory.a"}],
    }
    kept = {"selected": [], "chosen_by": "agent", "why": "mine", "scan_selected": [{"id": "x"}]}
    assert selection_v1_to_v2(dict(kept)) == kept
    assert selection_v1_to_v2({})["scan_selected"] == []


def test_kernel_tags_exactly():
    assert kernel_tags(None) == dict.fromkeys(TAGS)
    assert kernel_tags([]) == dict.fromkeys(TAGS)
    tags = kernel_tags(["ATOMG.E.ADD", "LDG.E.CONSTANT", "HGMMA.64x64", "UTMALDG.2D", "USETMAXREG"])
    assert tags == {
        "atomics": True,
        "gemm_like": None,
        "block_reduction": None,
        "cooperative_grid_sync": None,
        "multi_kernel": None,
        "read_only_loads": True,
        "reduction_like": None,
        "shared_memory_staging": True,
        "streaming": None,
        "tensor_core_mma": True,
        "tma": True,
        "transcendentals": False,
        "warp_specialized": True,
        "wgmma": True,
    }
    assert kernel_tags(None, kernels=1)["multi_kernel"] is False
    assert kernel_tags(None, kernels=2)["multi_kernel"] is True
    assert kernel_tags(None, kernels=0)["multi_kernel"] is None
    assert kernel_tags(None, work_kind="gemm_like")["gemm_like"] is True
    assert kernel_tags(None, work_kind="reduction")["gemm_like"] is False
    assert kernel_tags(None, work_kind="unknown")["gemm_like"] is None
    reduction = kernel_tags(None, work_kind="reduction")
    assert (reduction["reduction_like"], reduction["streaming"]) == (True, False)
    streaming = kernel_tags(None, work_kind="streaming")
    assert (streaming["reduction_like"], streaming["streaming"], streaming["gemm_like"]) == (
        False,
        True,
        False,
    )
    gemm = kernel_tags(None, work_kind="gemm_like")
    assert (gemm["reduction_like"], gemm["streaming"]) == (False, False)
    unknown = kernel_tags(None, work_kind="unknown")
    assert (unknown["reduction_like"], unknown["streaming"]) == (None, None)


def test_slots_are_the_budget_capped_per_axis():
    assert AXIS_CAP == 2
    assert axis_slots({"memory": 5}, "memory") == 2
    assert axis_slots({"memory": 1}, "memory") == 1
    assert axis_slots({}, "memory") == 0
    assert total_slots({"compute": 3, "memory": 1}) == 3
    assert total_slots({"compute": 1, "memory": 1, "latency": 1}) == 3


# ------------------------------------------------------------------------------ the scan


def test_the_scan_fills_each_axis_in_priority_order_and_records_the_rest():
    reg = registry(
        method("memory.c", priority=3),
        method("memory.a", priority=1),
        method("memory.b", priority=2),
        method("compute.x", priority=1, numerics="preconditioned"),
    )
    selection = select_methods(reg, context(budget={"compute": 0, "memory": 2, "latency": 1}, iteration=4))
    assert selection.selected == (
        Picked("memory.a", "memory", 1, "bitwise_preserving", "", None, NO_TERMS),
        Picked("memory.b", "memory", 2, "bitwise_preserving", "", None, NO_TERMS),
    )
    assert selection.scan_selected == selection.selected
    assert selection.skipped == (
        Skipped(
            id="memory.c",
            axis="memory",
            reason="not reached: the memory budget (2) went to methods ranked above it by headroom "
            f"(memory.a (unknown), memory.b (unknown)); memory.c: {NO_TERMS}",
        ),
    )
    assert selection.underfilled == {"latency": f"1 of 1 slot(s) left: {NO_FILLER}"}
    assert selection.budget == {"compute": 0, "memory": 2, "latency": 1}
    assert (selection.iteration, selection.arch, selection.backend) == (4, "sm_90a", "cuda")
    assert (selection.numerics_mode, selection.bound, selection.chosen_by, selection.why) == (
        "reference",
        "memory",
        "scan",
        None,
    )


def test_the_selection_carries_the_evidence_s_kind_floor_and_tags():
    evidence = ProfileEvidence(
        budget={"memory": 1},
        bound="compute",
        values={},
        floor_share=0.5,
        tags=kernel_tags(["HMMA.16816"]),
        work_kind="gemm_like",
        work_kind_why="dims name M, N and K",
    )
    selection = select_methods(registry(method("memory.a")), SelectionContext(evidence, "sm_80", "triton"))
    assert selection.budget == {"compute": 0, "memory": 1, "latency": 0}
    assert selection.ids == ("memory.a",)
    assert (selection.work_kind, selection.work_kind_why) == ("gemm_like", "dims name M, N and K")
    assert selection.floor_share == 0.5 and selection.kernel_tags["tensor_core_mma"] is True
    assert selection.bound == "compute"


def test_a_picked_method_quotes_the_conditions_that_held():
    trigger = Trigger(
        all=(metric("dram_bytes", ">=", 1e6),),
        any=(metric("l1_hit_rate", "<", 50), AllOf(all=(metric("a", ">", 1), metric("b", "<=", 2.5)))),
    )
    values = {"dram_bytes": 2.5e6, "l1_hit_rate": 60.0, "a": 1.5, "b": 2.5}
    selection = select_methods(registry(method("memory.a", trigger=trigger)), context(values=values))
    assert selection.selected[0].evidence == (
        "dram_bytes >= 1e+06 (measured 2.5e+06); (a > 1 (measured 1.5) and b <= 2.5 (measured 2.5))"
    )


def test_an_untriggered_method_gives_every_condition_and_what_was_not_measured():
    trigger = Trigger(
        all=(metric("dram_bytes", ">=", 1e6),), any=(metric("waves", "<", 1), metric("x", ">", 2))
    )
    reg = registry(method("memory.a", trigger=trigger))
    measured = select_methods(
        reg, context(budget={"memory": 1}, values={"dram_bytes": 10.0, "waves": 3.0, "x": 1.0})
    )
    assert skipped(measured) == {
        "memory.a": "not triggered by the evidence: dram_bytes >= 1e+06 (measured 10); "
        "waves < 1 (measured 3); x > 2 (measured 1)"
    }
    assert measured.underfilled == {"memory": f"1 of 1 slot(s) left: {NO_FILLER}"}
    light = select_methods(reg, context(values={"dram_bytes": 10.0, "x": None}, bundle="light"))
    assert skipped(light)["memory.a"] == (
        "not triggered by the evidence: dram_bytes >= 1e+06 (measured 10); waves < 1 (measured unknown); "
        "x > 2 (measured unknown) -- inconclusive: waves, x not measured by the light bundle, so the trigger "
        "could not fire on them (a full-set profile, or a kernel SASS listing, would decide)"
    )
    unnamed = select_methods(reg, context(values={"dram_bytes": None, "waves": 0.5}))
    assert skipped(unnamed)["memory.a"].endswith(
        "-- inconclusive: dram_bytes, x not measured by this profile, so the trigger could not fire on them "
        "(a full-set profile, or a kernel SASS listing, would decide)"
    )


def test_a_metric_named_twice_is_reported_unmeasured_once():
    trigger = Trigger(any=(metric("waves", "<", 1), metric("waves", ">", 8)))
    selection = select_methods(registry(method("memory.a", trigger=trigger)), context())
    assert skipped(selection)["memory.a"].endswith(
        "-- inconclusive: waves not measured by this profile, so "
        "the trigger could not fire on them (a full-set profile, "
        "or a kernel SASS listing, would decide)"
    )


# ------------------------------------------------------------------------------ the gates


def test_each_gate_s_reason():
    reg = registry(
        method("memory.before", priority=1),
        method("memory.backend", priority=2, backends=("triton",)),
        method("memory.arch", priority=3, requires=("tma", "wgmma", "cp_async")),
        method("memory.approx", priority=4, numerics="approximate"),
        method("memory.ineffective", priority=5),
        method("memory.failed", priority=6),
        method("memory.ok", priority=7),
    )
    ctx = context(
        budget={"memory": 2},
        arch="sm_80",
        selected_before=("memory.before",),
        ineffective={"memory.ineffective": "memory"},
        implementation_failed=("memory.failed",),
    )
    selection = select_methods(reg, ctx)
    assert selection.ids == ("memory.ok",)
    assert skipped(selection) == {
        "memory.before": "selected in an earlier iteration",
        "memory.backend": "not for the cuda backend (only triton)",
        "memory.arch": "sm_80 lacks tma, wgmma",
        "memory.approx": "approximate numerics: needs --numerics-mode approximate (mode is reference)",
        "memory.ineffective": "proved ineffective under the same bound (memory); blocked until the "
        "bottleneck changes",
        "memory.failed": "failed to implement before; select it again only with an explicit acknowledgement "
        "(--acknowledge memory.failed)",
    }
    assert selection.underfilled == {"memory": f"1 of 2 slot(s) left: {NO_FILLER}"}
    # under another bound, and acknowledged, both are back
    again = select_methods(
        reg,
        attrs.evolve(
            ctx,
            acknowledged=("memory.failed",),
            evidence=attrs.evolve(ctx.evidence, bound="compute", budget={"memory": 2}),
        ),
    )
    assert again.ids == ("memory.ineffective", "memory.failed")


def test_a_backend_takes_the_methods_of_the_backends_it_names_and_no_others():
    reg = registry(
        method("memory.cuda", priority=1, backends=("cuda",)),
        method("memory.triton", priority=2, backends=("triton", "cutlass")),
        method("memory.cutlass", priority=3, backends=("cutlass",)),
    )
    alone = select_methods(reg, context(budget={"memory": 3}, backend="torch"))
    assert alone.ids == ()
    assert skipped(alone)["memory.cuda"] == "not for the torch backend (only cuda)"
    wider = select_methods(
        reg, context(budget={"memory": 3}, backend="torch", method_backends=("torch", "cuda", "triton"))
    )
    assert wider.ids == ("memory.cuda", "memory.triton")
    assert skipped(wider) == {"memory.cutlass": "not for the torch backend (only cutlass)"}
    # the backend's own name counts even when the list leaves it out
    two = registry(
        method("memory.cuda", priority=1, backends=("cuda",)),
        method("memory.cutlass", priority=2, backends=("cutlass",)),
    )
    own = select_methods(two, context(budget={"memory": 2}, backend="cutlass", method_backends=("cuda",)))
    assert own.ids == ("memory.cuda", "memory.cutlass")


def test_numerics_modes_exactly():
    reg = registry(
        method("memory.b", priority=1, numerics="bitwise_preserving"),
        method("memory.p", priority=2, numerics="preconditioned"),
        method("memory.a", priority=3, numerics="approximate"),
        method("memory.o", priority=4, numerics="reassociating"),
    )
    budget = {"memory": 2}
    strict = select_methods(reg, context(budget=budget, numerics_mode="strict"))
    assert strict.ids == ("memory.b", "memory.p")
    assert skipped(strict) == {  # every method is gated, not only those the budget reaches
        "memory.a": "approximate numerics: needs --numerics-mode approximate (mode is strict)",
        "memory.o": "strict numerics admit only bitwise-preserving or preconditioned methods",
    }
    lone = registry(
        method("memory.o", numerics="reassociating"), method("memory.a", priority=2, numerics="approximate")
    )
    assert skipped(select_methods(lone, context(budget=budget, numerics_mode="strict"))) == {
        "memory.o": "strict numerics admit only bitwise-preserving or preconditioned methods",
        "memory.a": "approximate numerics: needs --numerics-mode approximate (mode is strict)",
    }
    assert select_methods(lone, context(budget=budget, numerics_mode="reference")).ids == ("memory.o",)
    assert select_methods(lone, context(budget=budget, numerics_mode="approximate")).ids == (
        "memory.o",
        "memory.a",
    )


@pytest.mark.parametrize(
    "share, refused",
    [(None, False), (0.5, False), (NEAR_FLOOR - 1e-9, False), (NEAR_FLOOR, True), (0.97, True)],
)
def test_the_near_floor_gate_and_its_words(share, refused):
    reg = registry(method("memory.keeps", priority=1), method("memory.lowers", priority=2, lowers_floor=True))
    selection = select_methods(reg, context(budget={"memory": 2}, floor_share=share))
    if not refused:
        assert selection.ids == ("memory.keeps", "memory.lowers")
        assert selection.underfilled == {}
        return
    assert selection.ids == ("memory.lowers",)
    pct = f"{share:.0%}"
    assert skipped(selection) == {
        "memory.keeps": f"the kernel runs at {pct} of its roofline floor: a method that keeps the work "
        f"and the peak can gain at most {1 - share:.0%}"
    }
    assert selection.underfilled == {
        "memory": f"1 of 2 slot(s) left: no further method on this axis passed every gate (see skipped); the "
        f"kernel runs at {pct} of its roofline floor, so only a method that lowers the floor could still "
        "pay; no filler is added"
    }


def test_the_near_floor_reason_at_ninety_seven_percent():
    selection = select_methods(registry(method("memory.keeps")), context(floor_share=0.97))
    assert skipped(selection)["memory.keeps"] == (
        "the kernel runs at 97% of its roofline floor: a method that keeps the work and the peak can gain at "
        "most 3%"
    )


def test_skip_conditions_of_each_kind():
    reg = registry(
        method("memory.m", priority=1, skip_if=(metric("waves", "<", 1, why="too few waves"),)),
        method(
            "memory.d",
            priority=2,
            skip_if=(Condition(kind="dtype_in", dtypes=("float64", "int8"), why="wide"),),
        ),
        method(
            "memory.n",
            priority=3,
            skip_if=(Condition(kind="dtype_not_in", dtypes=("float16", "bfloat16"), why="needs half"),),
        ),
        method(
            "memory.h",
            priority=4,
            skip_if=(Condition(kind="kernel_has", tags=("atomics", "tma"), why="has it"),),
        ),
        method(
            "memory.l",
            priority=5,
            skip_if=(Condition(kind="kernel_lacks", tags=("wgmma", "tensor_core_mma"), why="lacks it"),),
        ),
        method("memory.free", priority=6),
    )
    tags = kernel_tags(["ATOMG.E.ADD", "FFMA"])
    selection = select_methods(
        reg,
        context(
            budget={"memory": 2}, values={"waves": 0.5}, tags=tags, dtypes=("int8", "float64", "float32")
        ),
    )
    assert selection.ids == ("memory.free",)
    assert skipped(selection) == {
        "memory.m": "skip condition: waves < 1 (measured 0.5): too few waves",
        "memory.d": "skip condition: the kernel works in ['float64', 'int8']: wide",
        "memory.n": "skip condition: no operand in ['float16', 'bfloat16']: needs half",
        "memory.h": "skip condition: kernel has atomics, tma: has it",
        "memory.l": "skip condition: kernel lacks wgmma, tensor_core_mma: lacks it",
    }


def test_skip_conditions_that_do_not_hold_or_cannot_be_read():
    reg = registry(
        method("memory.m", priority=1, skip_if=(metric("waves", "<", 1),)),
        method("memory.d", priority=2, skip_if=(Condition(kind="dtype_in", dtypes=("float64",)),)),
        method("memory.n", priority=3, skip_if=(Condition(kind="dtype_not_in", dtypes=("float16",)),)),
        method("memory.h", priority=4, skip_if=(Condition(kind="kernel_has", tags=("atomics", "tma")),)),
        method(
            "memory.l",
            priority=5,
            skip_if=(Condition(kind="kernel_lacks", tags=("wgmma", "tensor_core_mma")),),
        ),
        method(
            "memory.u",
            priority=6,
            skip_if=(Condition(kind="kernel_has", tags=("atomics", "block_reduction")),),
        ),
    )
    # waves unknown, no dtypes, no SASS: no skip condition applies, each is selected alone
    for m in reg.methods:
        assert select_methods(registry(m), context()).ids == (m.id,), m.id
    # the metric at its bound, a float16 operand, a kernel with wgmma and neither atomics nor TMA
    ctx = context(values={"waves": 1.0}, tags=kernel_tags(["HGMMA.64x64", "LDG.E"]), dtypes=("float16",))
    for m in reg.methods:
        assert select_methods(registry(m), ctx).ids == (m.id,), m.id
    # a trait that cannot be read off the SASS leaves the condition unapplied, even beside a present one
    only_u = registry(reg.get("memory.u"))
    assert select_methods(only_u, context(tags=kernel_tags(["ATOMG.E"]))).ids == ("memory.u",)


# ------------------------------------------------------------------------------ relations


def test_conflicts_and_same_budget_groups_name_the_method_chosen():
    reg = registry(
        method("memory.a", priority=1, relations=Relations(same_budget="g")),
        method("memory.b", priority=2, relations=Relations(conflicts=("memory.a", "memory.z"))),
        method("memory.c", priority=3, relations=Relations(same_budget="g")),
        method("memory.d", priority=4, relations=Relations(complements=("memory.a",))),
    )
    selection = select_methods(reg, context(budget={"memory": 2}))
    assert selection.ids == ("memory.a", "memory.d")
    assert skipped(selection) == {
        "memory.b": "conflicts with memory.a, chosen this round",
        "memory.c": "same-budget group 'g' already holds a slot this round (memory.a)",
    }


# ------------------------------------------------------------------------------ an agent's choice


def test_an_accepted_choice_exactly():
    trigger = Trigger(all=(metric("waves", "<", 1),))
    reg = registry(method("memory.t", priority=1, trigger=trigger), method("memory.u", priority=2))
    ctx = context(budget={"memory": 2}, values={"waves": 4.0})
    chosen = validate_choice(reg, ctx, Choice(methods=("memory.t", "memory.u"), why="  I know better  "))
    assert chosen.chosen_by == "agent" and chosen.why == "I know better"
    assert chosen.selected == (
        Picked(
            id="memory.t",
            axis="memory",
            priority=1,
            numerics="bitwise_preserving",
            evidence="not triggered by the evidence: waves < 1 (measured 4)",
            headroom_why=NO_TERMS,
        ),
        Picked("memory.u", "memory", 2, "bitwise_preserving", "", None, NO_TERMS),
    )
    assert chosen.scan_ids == ("memory.u",)
    assert chosen.skipped == (
        Skipped("memory.t", "memory", "not triggered by the evidence: waves < 1 (measured 4)"),
    )


def test_a_refused_choice_names_every_problem_and_the_scan_s_picks():
    reg = registry(
        method("memory.a", priority=1, relations=Relations(same_budget="g")),
        method("memory.b", priority=2, relations=Relations(same_budget="g", conflicts=("memory.a",))),
        method("memory.c", priority=3, backends=("triton",)),
        method("compute.x", priority=1),
    )
    ctx = context(budget={"compute": 0, "memory": 1, "latency": 0})
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(
            reg, ctx, Choice(methods=("memory.a", "memory.b", "memory.c", "memory.a", "b"), why=" ")
        )
    problems = refused.value.problems
    assert problems == (
        "no reason given: say why you chose these methods (--why); it is recorded",
        "memory.a is chosen 2 times",
        "memory.c: not for the cuda backend (only triton)",
        "unknown method id 'b': not in the method registry; did you mean memory.b?",
        "memory.b: conflicts with memory.a, chosen this round",
        "memory.b: same-budget group 'g' already holds a slot this round (memory.a)",
        "the memory axis gets 3 methods (memory.a, memory.b, memory.c): at most 2 per axis",
        "3 methods chosen, but this iteration's budget from the roofline gaps is 1 (compute 0, memory 1, "
        "latency 0)",
    )
    assert str(refused.value).startswith(
        "the chosen methods are refused (8 problem(s)); nothing was written:\n"
        "  - no reason given: say why you chose these methods (--why); it is recorded\n"
        "  - memory.a is chosen 2 times\n"
    )
    assert refused.value.hint == (
        "the scan's own picks on this evidence: memory.a; the rules: docs/loop.md, "
        '"Choosing methods yourself"'
    )


def test_an_empty_choice_is_a_hyperparameter_only_iteration_and_still_needs_a_reason():
    reg = registry(method("memory.a", backends=("triton",)))
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(reg, context(), Choice(methods=(), why=" "))
    assert refused.value.problems == (
        "no reason given: say why you chose these methods (--why); it is recorded",
    )
    assert refused.value.hint.startswith("the scan's own picks on this evidence: none; ")
    chosen = validate_choice(reg, context(), Choice(methods=(), why="tune the tiles: headroom 3%"))
    assert (
        chosen.selected == () and chosen.chosen_by == "agent" and chosen.why == "tune the tiles: headroom 3%"
    )


def test_a_group_is_held_by_its_first_member_in_a_choice():
    reg = registry(
        method("memory.a", priority=1, relations=Relations(same_budget="g")),
        method("compute.b", priority=1, relations=Relations(same_budget="g")),
        method("latency.c", priority=1, relations=Relations(same_budget="g")),
    )
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(reg, context(), Choice(methods=("latency.c", "memory.a", "compute.b"), why="three"))
    assert refused.value.problems == (
        "memory.a: same-budget group 'g' already holds a slot this round (latency.c)",
        "compute.b: same-budget group 'g' already holds a slot this round (latency.c)",
    )


def test_the_per_axis_cap_and_the_budget_at_their_edges():
    reg = registry(*(method(f"memory.m{i}", priority=i) for i in range(1, 4)), method("compute.c"))
    ctx = context(budget={"compute": 1, "memory": 2, "latency": 0})
    # two on one axis and three in all: exactly what the budget allows
    assert validate_choice(
        reg, ctx, Choice(methods=("memory.m1", "memory.m2", "compute.c"), why="ok")
    ).ids == (
        "memory.m1",
        "memory.m2",
        "compute.c",
    )
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(reg, ctx, Choice(methods=("memory.m1", "memory.m2", "memory.m3"), why="three"))
    assert refused.value.problems == (
        "the memory axis gets 3 methods (memory.m1, memory.m2, memory.m3): at most 2 per axis",
    )


@pytest.mark.parametrize("budget", [{"compute": 0, "memory": 0, "latency": 0}, {}])
def test_an_all_zero_budget_takes_no_method_but_an_empty_choice(budget):
    # every gap closed (or none measured): the iteration has no slot, so any method is one too many; a
    # choice of none (a hyperparameter-only iteration) is still accepted
    reg = registry(method("memory.m1"), method("compute.c"))
    ctx = context(budget=budget)
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(reg, ctx, Choice(methods=("memory.m1",), why="one"))
    assert refused.value.problems == (
        "1 methods chosen, but this iteration's budget from the roofline gaps is 0 (compute 0, memory 0, "
        "latency 0)",
    )
    assert validate_choice(reg, ctx, Choice(methods=(), why="tune the tiles")).selected == ()


@pytest.mark.parametrize(
    "given, suggestion",
    [
        ("m1", "; did you mean memory.m1?"),  # the name without its axis
        ("tile.v2", "; did you mean memory.tile.v2?"),  # the name after the first dot, not the last
        # three are close; the two best are named (difflib's order: best first, ties the later id first)
        ("memory.m", "; did you mean memory.m3 or memory.m2?"),
        ("COMPUTE.OTHR", "; did you mean compute.other?"),  # lower-cased, close enough
        ("zzz", ""),
    ],
)
def test_an_unknown_id_suggests_the_nearest(given, suggestion):
    reg = registry(
        method("memory.m1"),
        method("memory.m2", priority=2),
        method("memory.m3", priority=3),
        method("memory.tile.v2", priority=4),
        method("compute.other"),
    )
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(reg, context(), Choice(methods=(given,), why="x"))
    assert refused.value.problems == (f"unknown method id {given!r}: not in the method registry{suggestion}",)


def test_a_conflict_with_two_chosen_names_both():
    reg = registry(
        method("memory.a", priority=1),
        method("memory.b", priority=2),
        method("memory.c", priority=3, relations=Relations(conflicts=("memory.a", "memory.b"))),
    )
    selection = select_methods(reg, context(budget={"memory": 2}))
    assert skipped(selection)["memory.c"] == (
        "not reached: the memory budget (2) went to methods ranked above it by headroom "
        f"(memory.a (unknown), memory.b (unknown)); memory.c: {NO_TERMS}"
    )
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(
            reg,
            context(budget={"memory": 2, "latency": 1}),
            Choice(("memory.a", "memory.b", "memory.c"), "x"),
        )
    assert refused.value.problems == (
        "memory.c: conflicts with memory.a, memory.b, chosen this round",
        "the memory axis gets 3 methods (memory.a, memory.b, memory.c): at most 2 per axis",
    )


def test_a_context_without_a_history_has_an_empty_one():
    ctx = context(ineffective=None)
    assert ctx.ineffective == {}
    assert select_methods(registry(method("memory.a")), ctx).ids == ("memory.a",)
