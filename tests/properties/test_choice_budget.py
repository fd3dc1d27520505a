"""An agent's choice of methods (kopt_core.knowledge.select.validate_choice) is held to the iteration's
budget from the roofline gaps: at most AXIS_CAP methods on one axis, and no more methods in all than the
axes' slots together (each axis's budget, capped). A budget of 0 on every axis is a budget too: the
roofline leaves no gap worth a method, so only the empty choice (hyperparameters only) is accepted; it is
never "no limit"."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kopt_core.knowledge.methods import Method, MethodRegistry, Relations, Trigger
from kopt_core.knowledge.select import (
    AXES,
    AXIS_CAP,
    Choice,
    ChoiceRejected,
    ProfileEvidence,
    SelectionContext,
    kernel_tags,
    validate_choice,
)

IDS = tuple(f"{axis}.m{i}" for axis in AXES for i in range(1, 4))
REGISTRY = MethodRegistry(
    schema_version=1,
    architectures={"sm_90a": frozenset()},
    methods=tuple(
        Method(
            id=method_id,
            axis=method_id.partition(".")[0],
            name=method_id,
            priority=1,
            backends=("cuda",),
            requires=(),
            trigger=Trigger(),
            skip_if=(),
            relations=Relations(),
            numerics="bitwise_preserving",
            sass_signature="",
            summary="",
        )
        for method_id in IDS
    ),
)


def context(budget: dict[str, int]) -> SelectionContext:
    evidence = ProfileEvidence(budget=budget, bound="memory", values={}, tags=kernel_tags(None))
    return SelectionContext(evidence=evidence, arch="sm_90a", backend="cuda")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    st.fixed_dictionaries({axis: st.integers(0, 3) for axis in AXES}),
    st.lists(st.sampled_from(IDS), unique=True, max_size=len(IDS)),
)
def test_a_choice_is_accepted_exactly_when_it_fits_the_budget(budget, chosen):
    per_axis = {axis: sum(m.startswith(f"{axis}.") for m in chosen) for axis in AXES}
    slots = sum(min(budget[axis], AXIS_CAP) for axis in AXES)
    fits = all(n <= AXIS_CAP for n in per_axis.values()) and len(chosen) <= slots
    choice = Choice(methods=tuple(chosen), why="the agent's reason")
    if fits:
        assert validate_choice(REGISTRY, context(budget), choice).ids == tuple(chosen)
    else:
        with pytest.raises(ChoiceRejected):
            validate_choice(REGISTRY, context(budget), choice)


def test_an_all_zero_budget_takes_no_method_but_the_empty_choice():
    zero = context({axis: 0 for axis in AXES})
    with pytest.raises(ChoiceRejected) as refused:
        validate_choice(REGISTRY, zero, Choice(methods=("memory.m1",), why="one is little"))
    assert refused.value.problems == (
        "1 methods chosen, but this iteration's budget from the roofline gaps is 0 (compute 0, memory 0, "
        "latency 0)",
    )
    assert validate_choice(REGISTRY, zero, Choice(methods=(), why="hyperparameters only")).ids == ()
