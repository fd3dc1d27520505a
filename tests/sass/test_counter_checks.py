"""Methods with no SASS footprint checked by the ncu counter their signature names (sass_signatures.json
``counters``): the champion's profile against the iteration's input profile. Padding a transpose's tile
(the transpose ladder, H200 profiles of steps 02 and 03) leaves 0.2% of the bank conflicts; the counter
decides pass, fail or inconclusive, never a strong failure, and a method without a counter rule stays
not_applicable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kopt_core.records.loop import MethodSassCheck
from kopt_core.run.layout import CHAMPION_PREFIX, NCU_TOP_FILE
from kopt_core.run.sass_check import with_counters
from kopt_core.sass.verify import CounterRule, Signature, counter_verdict, load_signatures

TRANSPOSE = Path(__file__).parents[1] / "fixtures" / "ladders" / "transpose_nvidia"
RULE = Signature(
    method="memory.bank_conflict_avoidance",
    not_applicable="padding changes addresses, not opcodes",
    counters=CounterRule(metric="shared_bank_conflicts", at_most=0.5, why="fewer conflicts"),
)


@pytest.mark.parametrize(
    "before, after, status",
    [
        (100.0, 50.0, "pass"),  # exactly at_most: the method did what its rule asks
        (100.0, 50.001, "fail"),
        (100.0, 0.0, "pass"),
        (100.0, 120.0, "fail"),
        (1.0, 0.0, "pass"),  # one conflict removed is a count, not noise below 1
        (0.0, 0.0, "inconclusive"),  # nothing to remove
        (None, 10.0, "inconclusive"),
        (10.0, None, "inconclusive"),
    ],
)
def test_the_counter_must_fall_to_at_most_its_share(before, after, status):
    verdict = counter_verdict(RULE, {"shared_bank_conflicts": before}, {"shared_bank_conflicts": after})
    assert verdict is not None and verdict.status == status and verdict.method == RULE.method
    assert "shared_bank_conflicts" in verdict.reason


def test_the_verdict_says_what_was_expected_and_what_was_found():
    verdict = counter_verdict(RULE, {"shared_bank_conflicts": 200.0}, {"shared_bank_conflicts": 50.0})
    assert verdict.expected == "ncu shared_bank_conflicts at most 0.5x the iteration's input kernel"
    assert verdict.reason == "shared_bank_conflicts 200 -> 50 (0.25x): fewer conflicts"
    unknown_before = counter_verdict(RULE, {}, {"shared_bank_conflicts": 1.0})
    assert unknown_before.reason == "shared_bank_conflicts unknown in the input kernel's profile"
    unknown_after = counter_verdict(RULE, {"shared_bank_conflicts": 1.0}, {})
    assert unknown_after.reason == "shared_bank_conflicts unknown in the champion's profile"
    nothing = counter_verdict(RULE, {"shared_bank_conflicts": 0.0}, {"shared_bank_conflicts": 0.0})
    assert nothing.reason == "shared_bank_conflicts 0 -> 0: nothing to remove"
    assert nothing.expected == verdict.expected


def test_a_method_without_a_counter_rule_has_no_counter_verdict():
    plain = Signature(method="latency.ilp", not_applicable="independent accumulators are not an opcode")
    assert counter_verdict(plain, {"x": 1.0}, {"x": 0.0}) is None
    assert counter_verdict(None, {}, {}) is None


def test_every_counter_of_the_shipped_signatures_is_a_registry_metric_beside_not_applicable():
    from kopt_core.ncu.metrics import load_registry

    keys = set(load_registry().keys())
    counted = [s for s in load_signatures().signatures.values() if s.counters is not None]
    assert {s.method for s in counted} >= {"memory.bank_conflict_avoidance", "memory.coalescing"}
    for signature in counted:
        assert signature.not_applicable and not signature.rules, signature.method
        assert signature.counters.metric in keys, signature.method
        assert 0 < signature.counters.at_most < 1


def _iteration(tmp_path: Path, before: str, after: str | None) -> Path:
    folder = tmp_path / "iterv2"
    folder.mkdir()
    shutil.copy(TRANSPOSE / before / "evidence/full/ncu_top.json", folder / NCU_TOP_FILE)
    if after is not None:
        shutil.copy(
            TRANSPOSE / after / "evidence/full/ncu_top.json", folder / f"{CHAMPION_PREFIX}{NCU_TOP_FILE}"
        )
    return folder


def _not_applicable(method: str) -> MethodSassCheck:
    return MethodSassCheck(method=method, status="not_applicable", detail="no SASS footprint")


def test_padding_the_transpose_tile_passes_by_its_bank_conflicts(tmp_path):
    folder = _iteration(tmp_path, "02_smem_coalesced", "03_padded")
    checks = with_counters(
        [_not_applicable("memory.bank_conflict_avoidance"), _not_applicable("latency.ilp")], folder
    )
    padded, ilp = checks
    assert padded.method == "memory.bank_conflict_avoidance"
    assert (padded.status, padded.evidence, padded.strong) == ("pass", "counters", False)
    assert padded.detail.startswith("ncu shared_bank_conflicts at most 0.5x the iteration's input kernel; ")
    assert "shared_bank_conflicts 6.573e+07 -> 1.461e+05" in padded.detail
    assert (ilp.status, ilp.evidence) == ("not_applicable", "sass")  # no counter rule: as it was


def test_a_champion_that_kept_its_conflicts_fails_weakly(tmp_path):
    folder = _iteration(tmp_path, "02_smem_coalesced", "02_smem_coalesced")
    (check,) = with_counters([_not_applicable("memory.bank_conflict_avoidance")], folder)
    assert (check.status, check.strong, check.evidence) == ("fail", False, "counters")


def test_a_kernel_without_conflicts_cannot_show_their_removal(tmp_path):
    folder = _iteration(tmp_path, "01_naive", "02_smem_coalesced")  # the naive transpose has none
    (check,) = with_counters([_not_applicable("memory.bank_conflict_avoidance")], folder)
    assert check.status == "inconclusive" and "nothing to remove" in check.detail


def test_the_coalescing_counter_reads_the_excess_sectors(tmp_path):
    folder = _iteration(tmp_path, "01_naive", "02_smem_coalesced")
    (check,) = with_counters([_not_applicable("memory.coalescing")], folder)
    assert check.status == "pass" and "uncoalesced_excess_sectors" in check.detail


def test_without_the_champion_s_profile_the_verdict_stays_and_names_the_command(tmp_path):
    folder = _iteration(tmp_path, "02_smem_coalesced", None)
    methods = ["memory.bank_conflict_avoidance", "memory.coalescing"]
    check, other = with_counters([_not_applicable(m) for m in methods], folder)
    assert other.method == "memory.coalescing" and other.detail.endswith("(kopt profile --which kernel)")
    assert check.status == "not_applicable" and check.evidence == "sass"
    assert check.detail.endswith(f"needs {CHAMPION_PREFIX}{NCU_TOP_FILE} (kopt profile --which kernel)")


def test_other_verdicts_are_never_replaced_by_a_counter_and_every_method_is_decided(tmp_path):
    folder = _iteration(tmp_path, "02_smem_coalesced", "03_padded")
    failed = MethodSassCheck(method="memory.bank_conflict_avoidance", status="fail", detail="x")
    plain = _not_applicable("latency.ilp")
    checks = with_counters([failed, plain, _not_applicable("memory.bank_conflict_avoidance")], folder)
    assert checks[:2] == [failed, plain] and checks[2].status == "pass" and len(checks) == 3


def test_without_the_input_profile_the_verdict_names_that_file(tmp_path):
    folder = _iteration(tmp_path, "02_smem_coalesced", "03_padded")
    (folder / NCU_TOP_FILE).unlink()
    (check,) = with_counters([_not_applicable("memory.bank_conflict_avoidance")], folder)
    assert check.status == "not_applicable"
    assert check.detail.endswith(f"its counter check needs {NCU_TOP_FILE} (kopt iter open)")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"status": "pass", "evidence": "ncu"}, "evidence must be sass or counters"),
        ({"status": "fail", "strong": True, "evidence": "counters"}, "never strong"),
    ],
)
def test_a_check_record_refuses_unknown_evidence_and_strong_counter_failures(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MethodSassCheck(method="memory.coalescing", **kwargs)


def test_the_evidence_field_round_trips_and_defaults_to_the_sass(tmp_path):
    from kopt_core.records import from_data, to_data

    data = to_data(_not_applicable("memory.coalescing"))
    assert data["evidence"] == "sass"
    old = {k: v for k, v in data.items() if k != "evidence"}  # a sass_check.json from before the field
    assert from_data(json.loads(json.dumps(old)), MethodSassCheck).evidence == "sass"
    counted = MethodSassCheck(method="memory.coalescing", status="pass", evidence="counters")
    assert from_data(to_data(counted), MethodSassCheck) == counted


def test_privatised_histogram_atomics_pass_by_their_global_read_modify_write_sectors(tmp_path):
    """histogram/01 (a global atomicAdd per byte) to 02 (shared-memory sub-histograms): 1.9e8 global
    reduction sectors fall to 3.4e4."""
    histogram = TRANSPOSE.parent / "histogram"
    folder = tmp_path / "iterv1"
    folder.mkdir()
    shutil.copy(histogram / "01_global_atomics/evidence/full/ncu_top.json", folder / NCU_TOP_FILE)
    champion = folder / f"{CHAMPION_PREFIX}{NCU_TOP_FILE}"
    shutil.copy(histogram / "02_shared_atomics/evidence/full/ncu_top.json", champion)
    (check,) = with_counters([_not_applicable("memory.atomic_privatization")], folder)
    assert (check.status, check.evidence) == ("pass", "counters")
    assert "global_rmw_sectors 1.898e+08 -> 3.379e+04" in check.detail
