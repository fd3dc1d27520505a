"""The optimization ladders (tests/fixtures/ladders, issue 27): published series whose steps kopt's team
rewrote, each labelled with the method of the next step as its author named it.

On the CPU: the ladders span what the issue asks (8 ladders and 50 steps at least, a third or more held
out, the split naming every ladder once), every case.json is well formed, its labels name registry methods
(or the three ids that come to the registry with the issue) and never a method as both needed and
wasted, only a ladder's last step is unlabelled, and every step passes kopt's static contract at its
ladder's dims. Scoring them and the live-against-import check are in test_profile_import_parity.py and
scripts/selection_corpus.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kopt_core.knowledge.methods import load_methods
from kopt_core.plugins import get_plugin_manager
from kopt_core.steps.bench import static_contract
from kopt_core.steps.select import KNOWN_DTYPES

from .corpus_script import load

REPO = Path(__file__).resolve().parents[2]
LADDERS = REPO / "tests" / "fixtures" / "ladders"
# The ids the labels use that come to the method registry with issue 27: until it has them they count as
# known here; once it does, the registry alone decides.
PENDING_IDS: frozenset[str] = frozenset()  # every label id is in the registry since issue 27


script = load()
CASES = {case["name"]: case for case in script.load_cases(LADDERS)}
SPLIT = json.loads((LADDERS / "split.json").read_text())
LADDER_NAMES = sorted(p.parent.name for p in LADDERS.glob("*/ladder.json"))


def test_the_ladders_span_what_the_issue_asks():
    assert len(LADDER_NAMES) >= 8 and len(CASES) >= 50
    assert sorted(SPLIT["tune"] + SPLIT["held_out"]) == LADDER_NAMES  # each ladder once, in one split
    assert not set(SPLIT["tune"]) & set(SPLIT["held_out"])
    assert len(SPLIT["held_out"]) * 3 >= len(LADDER_NAMES)
    assert {c["split"] for c in CASES.values()} == {"tune", "held_out"}


@pytest.mark.parametrize("ladder", LADDER_NAMES)
def test_a_ladder_lists_its_steps_in_order_and_cites_its_sources(ladder):
    declared = json.loads((LADDERS / ladder / "ladder.json").read_text())
    steps = sorted(name.split("/", 1)[1] for name in CASES if name.startswith(f"{ladder}/"))
    assert declared["steps"] == steps and len(steps) >= 4
    assert declared["sources"] and all(s["url"].startswith("https://") for s in declared["sources"])
    numbers = [CASES[f"{ladder}/{s}"]["step"] for s in steps]
    assert numbers == list(range(1, len(steps) + 1))
    # the label of step k is the method of step k + 1: every step has one but the last
    labelled = [bool(CASES[f"{ladder}/{s}"].get("labels")) for s in steps]
    assert labelled == [True] * (len(steps) - 1) + [False]
    assert CASES[f"{ladder}/{steps[-1]}"]["next_step"] is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_json_is_well_formed_and_its_labels_name_methods(name):
    case = CASES[name]
    known = {m.id for m in load_methods().methods} | PENDING_IDS
    assert case["backend"] in ("cuda", "cutlass", "triton") and case["kernel"].is_file()
    assert case["ref"].is_file() and case["dtype"] in KNOWN_DTYPES
    assert case["dims"] and all(isinstance(v, int) and v > 0 for v in case["dims"].values())
    assert case["ladder"] == name.split("/", 1)[0] and case["author_step"]
    labels = case.get("labels")
    if labels is None:
        return
    must = {m for group in labels["must"] for m in group}
    assert labels["must"] and all(labels["must"])
    assert must <= known, must - known
    assert set(labels["waste"]) <= known, set(labels["waste"]) - known
    assert not must & set(labels["waste"]), "a method both needed and wasted"
    assert 6 <= len(labels["waste"]) <= 8 and case["flaw"] and case["next_step"]


def test_the_pending_ids_are_the_only_ids_outside_the_registry():
    registry = {m.id for m in load_methods().methods}
    used = {
        m
        for case in CASES.values()
        if case.get("labels")
        for m in [*(x for g in case["labels"]["must"] for x in g), *case["labels"]["waste"]]
    }
    assert used - registry <= PENDING_IDS


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_step_passes_the_static_contract(name):
    """What `kopt preflight` checks before a build: the entry point parses, every dim it takes is given,
    the reference imports and takes the kernel's arguments (the builds run on the H200 with the profile)."""
    case = CASES[name]
    info, _, candidate = static_contract(
        get_plugin_manager(), case["kernel"], case["ref"], case["dims"], backend=case["backend"]
    )
    assert info.name == case["backend"] and Path(candidate.path) == case["kernel"].resolve()


def test_scoring_skips_the_last_steps_and_reports_each_split_and_ladder():
    """Every labelled step is scored (a row per bundle it has evidence for) or reported as lacking
    evidence; the last steps are not scored; the rates come per split and per ladder."""
    result = script.score_corpus(LADDERS)
    labelled = sorted(n for n, c in CASES.items() if c.get("labels"))
    assert result["errors"] == []
    assert sorted({r["case"] for r in result["rows"]} | set(result["without_evidence"])) == labelled
    assert sorted(result["unlabelled"]) == sorted(set(CASES) - set(labelled))
    assert len(result["unlabelled"]) == len(LADDER_NAMES)
    scored = {r["ladder"] for r in result["rows"]}
    assert set(result["by_ladder"]) == scored
    assert set(result["by_split"]) == {r["split"] for r in result["rows"]}
    for ladder, rates in result["by_ladder"].items():
        assert rates["all"]["profiles"] == sum(1 for r in result["rows"] if r["ladder"] == ladder)


def test_every_miss_is_listed_with_the_scan_s_reason_for_each_missed_method():
    result = script.score_corpus(LADDERS)
    text = script.render_misses(result)
    misses = [r for r in result["rows"] if not r["hit"]]
    assert len(text.splitlines()) == 2 + len(misses)
    for row in misses:
        line = next(x for x in text.splitlines() if x.startswith(f"| `{row['case']}` | {row['bundle']} |"))
        for method in (m for group in row["missed"] for m in group):
            assert f"`{method}`: " in line
            if method in PENDING_IDS:
                assert f"`{method}`: not a method of the registry" in line
