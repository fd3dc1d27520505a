"""An agent's own choice of methods (``kopt select --methods --why``), checked against the hard constraints
on the real naive-SGEMM profile from the H200 (tests/fixtures/h200/runs/sgemm_naive: bound memory,
budget compute 1, memory 1, latency 1; the scan picks compute.register_tiling and memory.smem_tiling)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kopt_core.errors import EXIT_CONFIG
from kopt_core.knowledge.select import Choice, ChoiceRejected
from kopt_core.steps.select import read_evidence, read_kernel_facts, select_from_evidence, who_chose

PROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "runs" / "sgemm_naive"
SCAN_PICKS = ("compute.register_tiling", "memory.smem_tiling")
WHY = "the B operand is read by every thread of a row: stage it once per block"


def select(methods=None, why=WHY, budget=None, **context):
    roofline, ncu_top = read_evidence(PROFILE / "roofline.json", PROFILE / "ncu_top.json")
    if budget is not None:  # the same evidence with another axis budget
        roofline = attrs.evolve(roofline, axis_budget=budget)
    facts, notes = read_kernel_facts(PROFILE)
    assert facts.mnemonics, notes
    context = {"arch": "sm_90a", "backend": "cuda", "dtypes": ("float32",), **context}
    choice = None if methods is None else Choice(methods=methods, why=why)
    return select_from_evidence(roofline, ncu_top, facts=facts, choice=choice, **context)


# one hard constraint broken per row: (the choice, the context, what the one problem says)
REJECTED = {
    "unknown id": (
        ("memory.smem_tile",),
        {},
        "unknown method id 'memory.smem_tile': not in the method registry; did you mean memory.smem_tiling?",
    ),
    "a name without its axis": (
        ("smem_tiling",),
        {},
        "unknown method id 'smem_tiling': not in the method registry; did you mean memory.smem_tiling?",
    ),
    "chosen twice": (
        ("memory.smem_tiling", "memory.smem_tiling"),
        {},
        "memory.smem_tiling is chosen 2 times",
    ),
    "per-axis cap": (
        ("memory.smem_tiling", "memory.coalescing", "memory.vectorized_access"),
        {},
        "the memory axis gets 3 methods (memory.smem_tiling, memory.coalescing, memory.vectorized_access): "
        "at most 2 per axis",
    ),
    "total budget": (
        ("compute.register_tiling", "compute.loop_unrolling", "memory.smem_tiling", "latency.ilp"),
        {},
        "4 methods chosen, but this iteration's budget from the roofline gaps is 3 "
        "(compute 1, memory 1, latency 1)",
    ),
    "conflict": (
        ("compute.split_k", "compute.stream_k"),
        {},
        "compute.stream_k: conflicts with compute.split_k, chosen this round",
    ),
    "same-budget group across axes": (
        ("compute.persistent_kernel", "latency.grid_sizing"),
        {},
        "latency.grid_sizing: same-budget group 'grid_shape' already holds a slot this round "
        "(compute.persistent_kernel)",
    ),
    "architecture": (("compute.wgmma",), {"arch": "sm_80"}, "compute.wgmma: sm_80 lacks wgmma"),
    "backend": (
        ("memory.tma",),
        {"backend": "triton"},
        "memory.tma: not for the triton backend (only cuda, cutlass)",
    ),
    "numerics mode": (
        ("compute.tf32",),
        {},
        "compute.tf32: approximate numerics: needs --numerics-mode approximate (mode is reference)",
    ),
    "strict numerics": (
        ("compute.fast_math",),
        {"numerics_mode": "strict"},
        "compute.fast_math: approximate numerics: needs --numerics-mode approximate (mode is strict)",
    ),
    "ineffective under the same bound": (
        ("memory.smem_tiling",),
        {"ineffective": {"memory.smem_tiling": "memory"}},
        "memory.smem_tiling: proved ineffective under the same bound (memory); blocked until the "
        "bottleneck changes",
    ),
    "implementation failed, not acknowledged": (
        ("memory.smem_tiling",),
        {"implementation_failed": ("memory.smem_tiling",)},
        "memory.smem_tiling: failed to implement before; select it again only with an explicit "
        "acknowledgement (--acknowledge memory.smem_tiling)",
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_each_hard_constraint_refuses_a_choice(case):
    methods, context, expected = REJECTED[case]
    with pytest.raises(ChoiceRejected) as refused:
        select(methods, **context)
    assert refused.value.problems == (expected,)
    assert refused.value.exit_code == EXIT_CONFIG
    assert expected in str(refused.value) and "nothing was written" in str(refused.value)
    # the hint names the scan's own picks in the same context, so the agent sees what it departs from
    picks = ", ".join(select(**context).ids)
    assert refused.value.hint.startswith(f"the scan's own picks on this evidence: {picks};")


def test_a_choice_without_a_reason_is_refused():
    for why in (None, "", "   "):
        with pytest.raises(ChoiceRejected) as refused:
            select(("memory.smem_tiling",), why=why)
        assert refused.value.problems == (
            "no reason given: say why you chose these methods (--why); it is recorded",
        )


def test_every_broken_constraint_is_named_in_one_error():
    with pytest.raises(ChoiceRejected) as refused:
        select(
            ("compute.split_k", "compute.stream_k", "compute.tf32", "memory.nope", "memory.smem_tiling"),
            implementation_failed=("memory.smem_tiling",),
        )
    assert refused.value.problems == (
        "compute.tf32: approximate numerics: needs --numerics-mode approximate (mode is reference)",
        "unknown method id 'memory.nope': not in the method registry",
        "memory.smem_tiling: failed to implement before; select it again only with an explicit "
        "acknowledgement (--acknowledge memory.smem_tiling)",
        "compute.stream_k: conflicts with compute.split_k, chosen this round",
        "the compute axis gets 3 methods (compute.split_k, compute.stream_k, compute.tf32): "
        "at most 2 per axis",
        "4 methods chosen, but this iteration's budget from the roofline gaps is 3 "
        "(compute 1, memory 1, latency 1)",
    )
    assert "(6 problem(s))" in str(refused.value)


def test_an_accepted_choice_keeps_the_scan_s_picks_beside_it():
    # coalescing is the scan's skip (no excess sectors: the low efficiency is a broadcast); the agent
    # overrules that reading of the evidence, which is not a hard constraint
    chosen = ("memory.coalescing", "memory.smem_tiling", "latency.ilp")
    selection = select(chosen)
    scan = select()
    assert selection.chosen_by == "agent" and selection.why == WHY
    assert selection.ids == chosen  # the explicit list, in its order: what explore and update read
    assert selection.scan_ids == SCAN_PICKS == scan.ids
    assert selection.skipped == scan.skipped and selection.underfilled == scan.underfilled
    assert selection.budget == scan.budget and selection.bound == "memory"
    evidence = {p.id: p.evidence for p in selection.selected}
    # its trigger's reading, whatever the agent chose: the excess share this older profile did not record
    assert evidence["memory.coalescing"].startswith("not triggered by the evidence: ")
    assert "uncoalesced_excess_share >= 0.25 (measured unknown)" in evidence["memory.coalescing"]
    # latency.ilp's trigger does not hold: its evidence says what it asked and what was measured
    assert evidence["latency.ilp"].startswith("not triggered by the evidence: ")
    assert "warp_stall_long_scoreboard_pct >= 20 (measured 67.79)" in evidence["latency.ilp"]


def test_the_scan_path_records_the_scan_as_the_chooser():
    selection = select()
    assert selection.chosen_by == "scan" and selection.why is None
    assert selection.ids == selection.scan_ids == SCAN_PICKS


def test_soft_gates_do_not_bind_the_agent_but_hard_ones_lift_as_the_scan_s_do():
    # selected in an earlier iteration: the scan's rule, not a hard constraint
    again = select(("memory.smem_tiling",), selected_before=("memory.smem_tiling",))
    assert again.ids == ("memory.smem_tiling",)
    # ineffective under another bound: the bottleneck changed, so it may be tried again
    moved = select(("memory.smem_tiling",), ineffective={"memory.smem_tiling": "latency"})
    assert moved.ids == ("memory.smem_tiling",)
    # an implementation failure, acknowledged
    retried = select(
        ("memory.smem_tiling",),
        implementation_failed=("memory.smem_tiling",),
        acknowledged=("memory.smem_tiling",),
    )
    assert retried.ids == ("memory.smem_tiling",) and retried.chosen_by == "agent"
    # approximate numerics admitted by the mode
    approximate = select(("compute.tf32",), numerics_mode="approximate")
    assert approximate.ids == ("compute.tf32",)


def test_analysis_says_how_the_choice_departs_from_the_scan():
    budget = {"compute": 0, "memory": 2, "latency": 1}
    selection = select(("compute.register_tiling", "memory.smem_tiling"), budget=budget)
    scan = select(budget=budget)
    assert selection.scan_ids == scan.ids and "compute.register_tiling" not in scan.ids
    rows = who_chose(selection)
    assert rows[1] == f"why, in the agent's words: {WHY}"
    assert rows[2] == "the agent's methods: `compute.register_tiling`, `memory.smem_tiling`"
    assert rows[3] == "the scan's own picks on this evidence: " + ", ".join(f"`{m}`" for m in scan.ids)
    assert (
        "`compute.register_tiling`: chosen on the compute axis, which the scan did not scan: its budget is 0"
        in rows
    )
    assert "`memory.smem_tiling`: the scan picked it too" in rows
    left_out = [m for m in scan.ids if m != "memory.smem_tiling"]
    assert left_out and all(f"`{m}`: the scan's pick, left out by the agent" in rows for m in left_out)
    assert "compute: 1 method(s) chosen against its budget of 0" in rows
    assert "memory: 1 method(s) chosen against its budget of 2" in rows
    assert who_chose(scan) == [
        "the budget-aware priority scan (docs/loop.md): its picks are the methods selected below"
    ]
