"""Headroom (knowledge/headroom.py): each reading of an evidence key at its edges, the largest known term,
the rank within an axis, and the axis budget re-weighed by the distance from the floor."""

from __future__ import annotations

import attrs
import pytest

from kopt_core.knowledge.headroom import (
    HEADROOM_DIGITS,
    LAUNCH_LATENCY_MS,
    headroom,
    rank_key,
    rebudget,
    term_value,
)
from kopt_core.knowledge.methods import HeadroomTerm, Method, Relations, Trigger, load_methods
from kopt_core.records.roofline import Roofline


def term(as_: str, of: float | None = None, scale: float = 1.0, metric: str = "m") -> HeadroomTerm:
    return HeadroomTerm(metric=metric, as_=as_, of=of, scale=scale)


@pytest.mark.parametrize(
    "reading, of, value, expected",
    [
        ("share", None, 37.5, 0.375),  # a percentage by default
        ("share", 1.0, 0.25, 0.25),
        ("share", None, 250.0, 1.0),  # clamped at 1
        ("share", None, -5.0, 0.0),  # and at 0
        ("complement", None, 12.5, 0.875),
        ("complement", 32.0, 24.0, 0.25),  # 24 of 32 lanes busy
        ("complement", None, 100.0, 0.0),
        ("complement", None, 130.0, 0.0),
        ("inverse", None, 3.0, 2.0 / 3.0),  # three launches doing one's work
        ("inverse", None, 1.0, 0.0),
        ("inverse", None, 0.5, 0.0),  # below the ideal: nothing done again
        ("inverse", 4.0, 32.0, 0.875),  # 32 sectors where 4 would do
        ("inverse", 4.0, 4.0, 0.0),
        ("inverse", 4.0, 3.0, 0.0),
        ("inverse", 0.5, 0.8, 0.375),  # an ideal below 1: 0.8 where 0.5 would do
        ("inverse", None, 0.0, 0.0),  # no traffic at all: nothing done again (and no division by 0)
        ("inverse", None, -2.0, 0.0),
        ("idle", None, 0.25, 0.75),  # a quarter of a wave: three quarters of the SMs idle
        ("idle", None, 1.0, 0.0),
        ("idle", None, 3.0, 0.0),
        ("flag", None, 1.0, 1.0),
        ("flag", None, 0.999, 0.0),
        ("flag", None, 0.0, 0.0),
        ("launch", None, 0.004, 0.5),  # a 4 us launch: half of it is launch latency
        ("launch", None, 0.0, 1.0),
        ("launch", 1000.0, 12.0, LAUNCH_LATENCY_MS / (0.012 + LAUNCH_LATENCY_MS)),  # 12 us
        ("launch", None, -1.0, 0.0),
        ("launch", None, -LAUNCH_LATENCY_MS, 0.0),  # a negative duration is no launch (no division by 0)
    ],
)
def test_each_reading_at_its_edges(reading, of, value, expected):
    assert term_value(term(reading, of), value) == pytest.approx(expected, abs=1e-12)


def test_scale_unknown_values_and_unknown_readings():
    assert term_value(term("share", scale=0.5), 60.0) == pytest.approx(0.3)
    assert term_value(term("flag", scale=0.9), 1.0) == pytest.approx(0.9)
    assert term_value(term("share", scale=0.5), 400.0) == 1.0  # clamped after scaling
    assert term_value(term("share"), None) is None
    with pytest.raises(ValueError, match="unknown headroom reading 'quadratic'"):
        term_value(term("quadratic"), 1.0)


def method(*terms: HeadroomTerm, priority: int = 1, method_id: str = "memory.x") -> Method:
    return Method(
        id=method_id,
        axis=method_id.split(".")[0],
        name=method_id.split(".")[1],
        priority=priority,
        backends=("cuda",),
        requires=(),
        trigger=Trigger(why="test"),
        skip_if=(),
        relations=Relations(),
        numerics="bitwise_preserving",
        sass_signature=method_id,
        summary="test",
        headroom=terms,
    )


def test_the_largest_known_term_and_its_words():
    m = method(term("share", metric="a"), term("complement", metric="b", scale=0.5), term("flag", metric="c"))
    assert headroom(m, {"a": 30.0, "b": 20.0}) == (0.4, "headroom 0.40 from 1 - b 20 / 100 x 0.5")
    assert headroom(m, {"a": 30.0, "b": 90.0}) == (0.3, "headroom 0.30 from a 30 / 100")
    assert headroom(m, {"a": 30.0, "c": 1.0}) == (1.0, "headroom 1.00 from c = 1")
    # a tie keeps the first term
    assert headroom(m, {"a": 40.0, "b": 20.0})[1] == "headroom 0.40 from a 40 / 100"
    assert headroom(m, {"a": None, "b": None}) == (None, "headroom unknown: a, b, c not measured")
    assert headroom(method(), {"a": 1.0}) == (None, "no headroom terms in the registry")
    rounded, _ = headroom(method(term("share", of=3.0, metric="a")), {"a": 1.0})
    assert rounded == round(1 / 3, HEADROOM_DIGITS) == 0.33


def test_rank_known_headroom_first_then_larger_then_priority():
    values = {"a": 50.0, "b": 20.0}
    big = method(term("share", metric="a"), priority=5, method_id="memory.big")
    small = method(term("share", metric="b"), priority=1, method_id="memory.small")
    tie = method(term("share", metric="a"), priority=2, method_id="memory.tie")
    unknown = method(term("share", metric="z"), priority=1, method_id="memory.unknown")
    bare = method(priority=3, method_id="memory.bare")
    order = sorted([unknown, small, bare, big, tie], key=lambda m: rank_key(m, values))
    assert [m.id for m in order] == [
        "memory.tie",  # 0.50, priority 2
        "memory.big",  # 0.50, priority 5
        "memory.small",  # 0.20
        "memory.unknown",  # unknown headroom, priority 1
        "memory.bare",  # no terms, priority 3
    ]
    assert rank_key(big, values) == (0, -0.5, 5)
    assert rank_key(unknown, values) == (1, 0.0, 1)
    # headrooms equal to two decimals tie, and priority decides
    close = {"a": 50.001, "b": 50.004}
    first = method(term("share", metric="b"), priority=2, method_id="memory.first")
    second = method(term("share", metric="a"), priority=1, method_id="memory.second")
    assert [m.id for m in sorted([first, second], key=lambda m: rank_key(m, close))] == [
        "memory.second",
        "memory.first",
    ]


def roofline(**changes) -> Roofline:
    base = Roofline(
        delta_compute=0.77,
        delta_memory=0.06,
        delta_latency=0.31,
        bound="memory",
        near_peak=False,
        axis_budget={"compute": 2, "memory": 0, "latency": 1},
        label="bottleneck-gap heuristic",
        reasons=[],
    )
    return attrs.evolve(base, **changes)


def test_rebudget_gives_the_bound_axis_the_time_above_the_floor():
    # the bank-conflicted transpose of the corpus (case 05): memory units 94% busy, 41% of its floor
    budget, why = rebudget(roofline(), 0.41)
    assert budget == {"compute": 1, "memory": 1, "latency": 1}
    assert why == (
        "the kernel is memory-bound and runs at 41% of its floor, so the memory axis owns the 59% of its "
        "time above the floor: its gap 0.06 (from ncu's utilisation, which counts wasted work as use) was "
        "raised to 0.59 and the budget re-allocated by the seed's rule: compute 1, memory 1, latency 1 "
        "(roofline.json: compute 2, memory 0, latency 1)"
    )
    compute, _ = rebudget(roofline(bound="compute", delta_compute=0.0, delta_memory=0.5), 0.13)
    assert compute == {"compute": 2, "memory": 1, "latency": 0}  # gaps 0.87, 0.5, 0.31


@pytest.mark.parametrize(
    "changes, share",
    [
        ({"label": "roofline"}, 0.41),  # a workload roofline's gaps already start from its floors
        ({}, None),  # no floor
        ({"bound": "latency"}, 0.41),  # only a compute or memory bound owns the floor's gap
        ({"delta_memory": 0.6}, 0.4),  # the gap already reaches the floor's (1 - 0.4 == 0.6 exactly)
        ({"delta_memory": 0.7}, 0.41),
        ({"axis_budget": {"compute": 1, "memory": 1, "latency": 1}, "delta_memory": 0.5}, 0.41),
    ],
)
def test_rebudget_leaves_the_budget_alone(changes, share):
    given = roofline(**changes)
    budget, why = rebudget(given, share)
    if "axis_budget" in changes:  # raised 0.5 -> 0.59 re-allocates to the same budget: no words
        assert budget == changes["axis_budget"] and why == ""
        return
    assert budget == given.axis_budget and why == ""


def test_an_unknown_gap_of_the_bound_axis_is_raised_too():
    budget, why = rebudget(roofline(delta_memory=None), 0.2)
    assert budget == {"compute": 1, "memory": 1, "latency": 1}
    assert "its gap unknown (from ncu's utilisation" in why and "raised to 0.80" in why


def test_the_selection_carries_the_budget_s_reason():
    from kopt_core.knowledge.select import ProfileEvidence, SelectionContext, select_methods

    evidence = ProfileEvidence(budget={"memory": 1}, bound="memory", values={}, budget_why="raised")
    selection = select_methods(load_methods(), SelectionContext(evidence, "sm_90a", "cuda"))
    assert selection.budget_why == "raised"
    plain = attrs.evolve(evidence, budget_why="")
    assert select_methods(load_methods(), SelectionContext(plain, "sm_90a", "cuda")).budget_why == ""


def test_the_registry_gives_every_method_headroom_terms_on_known_keys():
    from kopt_core.knowledge.methods import evidence_keys

    keys = evidence_keys()
    for m in load_methods().methods:
        assert m.headroom, m.id
        for t in m.headroom:
            assert t.metric in keys, (m.id, t.metric)
            assert 0 < t.scale <= 1, (m.id, t)
