"""SASS signature rules at their edges, on the real H200 listings (tests/fixtures/h200) and variants made
from them by dropping or repeating instruction lines: an ``all`` rule needs every pattern, an ``any`` rule
one; ``fewer_than_baseline`` / ``more_than_baseline`` are strict (an equal count fails), and an ``all``
rule compares every pattern's count."""

from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path

import pytest

from kopt_core.sass import load_signatures, parse_sass, verify

# by name: the package's ``verify`` (the function) hides the submodule from attribute access
sv = importlib.import_module("kopt_core.sass.verify")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
CUTLASS = (FIXTURES / "cutlass_tc_sm80tc_on_sm90.sass.txt").read_text()  # mma.sync GEMM, 3 cp.async stages
TRITON_MM = (FIXTURES / "triton_matmul_sm90.sass.txt").read_text()  # wgmma GEMM (sm_90a)
NAIVE = (FIXTURES / "naive.sass.txt").read_text()  # naive SGEMM
SOFTMAX = (FIXTURES / "runs" / "triton_softmax" / "best_input.sass").read_text()

LDGDEPBAR = r"^LDGDEPBAR(\.|$)"
DEPBAR_LE = r"^DEPBAR\.LE"


def _is(mnemonic: str) -> re.Pattern:
    """An instruction line (address, optional predicate) whose mnemonic is exactly ``mnemonic``."""
    return re.compile(rf"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?{re.escape(mnemonic)}(?=[\s;])")


def without(text: str, mnemonic: str, count: int, *, keep_going: bool = False) -> str:
    """``text`` without the first ``count`` instruction lines of ``mnemonic`` (checked: there are that
    many, and with ``keep_going`` False no more)."""
    pattern = _is(mnemonic)
    lines = text.splitlines()
    hits = [index for index, line in enumerate(lines) if pattern.match(line)]
    assert len(hits) >= count and (keep_going or len(hits) == count), (mnemonic, len(hits))
    dropped = set(hits[:count])
    return "\n".join(line for index, line in enumerate(lines) if index not in dropped) + "\n"


def with_more(text: str, mnemonic: str, extra: int) -> str:
    """``text`` with the first instruction line of ``mnemonic`` repeated ``extra`` more times."""
    pattern = _is(mnemonic)
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if pattern.match(line))
    return "\n".join(lines[: index + 1] + [lines[index]] * extra + lines[index + 1 :]) + "\n"


def check(text: str, method: str, arch: str, baseline: str | None = None, signatures=None):
    listing = parse_sass(text)
    reference = parse_sass(baseline) if baseline is not None else None
    (verdict,) = verify(listing, [method], arch=arch, baseline=reference, signatures=signatures)
    return verdict


def test_the_variants_change_only_what_they_say():
    counts = parse_sass(CUTLASS).counts()
    assert (counts["LDGDEPBAR"], counts["DEPBAR.LE"]) == (5, 3)
    assert parse_sass(without(CUTLASS, "DEPBAR.LE", 3)).counts() == counts - Counter({"DEPBAR.LE": 3})
    assert parse_sass(without(CUTLASS, "LDGDEPBAR", 1, keep_going=True)).counts() == counts - Counter(
        {"LDGDEPBAR": 1}
    )
    assert parse_sass(with_more(CUTLASS, "FFMA", 2)).counts() == counts + Counter({"FFMA": 2})


# ---------------------------------------------------------------------------------------- all and any


@pytest.mark.parametrize("method", ["latency.double_buffering", "latency.multistage_pipeline"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
def test_an_all_rule_fails_when_any_one_pattern_is_missing(method, arch):
    rule = load_signatures().get(method).rule_for(arch)
    assert (rule.arch, rule.mode, rule.patterns, rule.relative) == (
        "default",
        "all",
        (LDGDEPBAR, DEPBAR_LE),
        "present",
    )
    whole = check(CUTLASS, method, arch)
    assert (whole.status, whole.reason) == ("pass", "every pattern matches")
    assert whole.matched == (("LDGDEPBAR", 5), ("DEPBAR.LE", 3))
    # cp.async commits without the waits on them: no double buffering
    no_wait = check(without(CUTLASS, "DEPBAR.LE", 3), method, arch)
    assert (no_wait.status, no_wait.reason) == ("fail", rf"nothing matches {DEPBAR_LE}")
    assert no_wait.matched == (("LDGDEPBAR", 5),)
    no_commit = check(without(CUTLASS, "LDGDEPBAR", 5), method, arch)
    assert (no_commit.status, no_commit.reason) == ("fail", rf"nothing matches {LDGDEPBAR}")
    assert no_commit.matched == (("DEPBAR.LE", 3),)
    neither = check(without(without(CUTLASS, "LDGDEPBAR", 5), "DEPBAR.LE", 3), method, arch)
    assert (neither.status, neither.reason) == ("fail", f"nothing matches {LDGDEPBAR}, {DEPBAR_LE}")
    assert neither.matched == ()
    # one of each is enough
    one_each = check(
        without(without(CUTLASS, "LDGDEPBAR", 4, keep_going=True), "DEPBAR.LE", 2, keep_going=True),
        method,
        arch,
    )
    assert (one_each.status, one_each.matched) == ("pass", (("DEPBAR.LE", 1), ("LDGDEPBAR", 1)))


def test_a_warpgroup_wait_is_not_a_cp_async_wait():
    # the wgmma GEMM waits on its cp.async groups (DEPBAR.LE x2) and on its wgmma groups
    # (WARPGROUP.DEPBAR.LE x2): without the first, the anchored pattern must not take the second
    counts = parse_sass(TRITON_MM).counts()
    assert (counts["LDGDEPBAR"], counts["DEPBAR.LE"], counts["WARPGROUP.DEPBAR.LE"]) == (6, 2, 2)
    verdict = check(without(TRITON_MM, "DEPBAR.LE", 2), "latency.double_buffering", "sm_80")
    assert (verdict.status, verdict.reason) == ("fail", rf"nothing matches {DEPBAR_LE}")
    assert verdict.matched == (("LDGDEPBAR", 6),)
    assert check(TRITON_MM, "latency.double_buffering", "sm_80").status == "pass"


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_an_any_rule_passes_on_one_pattern_and_fails_on_none(arch):
    rule = load_signatures().get("latency.double_buffering").rule_for(arch)
    assert (rule.arch, rule.mode, rule.patterns) == ("sm_90", "any", (LDGDEPBAR, r"^SYNCS\."))
    assert "SYNCS" not in " ".join(parse_sass(CUTLASS).counts())
    no_wait = check(without(CUTLASS, "DEPBAR.LE", 3), "latency.double_buffering", arch)
    assert (no_wait.status, no_wait.reason) == ("pass", "found 5 matching instruction(s)")
    assert no_wait.matched == (("LDGDEPBAR", 5),)
    one = check(without(CUTLASS, "LDGDEPBAR", 4, keep_going=True), "latency.double_buffering", arch)
    assert (one.status, one.reason) == ("pass", "found 1 matching instruction(s)")
    none = check(without(CUTLASS, "LDGDEPBAR", 5), "latency.double_buffering", arch)
    assert (none.status, none.reason, none.matched) == ("fail", "no instruction matches", ())


# --------------------------------------------------------------------------------- relative to a baseline


def _relative_reason(method: str, candidate: int, base: int) -> str:
    rule = load_signatures().get(method).rule_for("sm_90")
    assert rule.mode == "any"
    return f"{' | '.join(rule.patterns)}: {candidate} vs baseline {base}"


def test_fewer_than_baseline_is_strict_on_the_softmax_reciprocal():
    # the softmax divides once per row through MUFU.RCP: one instruction of strength_reduction's signature
    method = "compute.strength_reduction"
    assert load_signatures().get(method).rule_for("sm_90").relative == "fewer_than_baseline"
    assert parse_sass(SOFTMAX).counts()["MUFU.RCP"] == 1
    same = check(SOFTMAX, method, "sm_90a", baseline=SOFTMAX)
    assert (same.status, same.reason) == ("fail", _relative_reason(method, 1, 1))
    fewer = check(without(SOFTMAX, "MUFU.RCP", 1), method, "sm_90a", baseline=SOFTMAX)
    assert (fewer.status, fewer.reason) == ("pass", _relative_reason(method, 0, 1))
    more = check(with_more(SOFTMAX, "MUFU.RCP", 1), method, "sm_90a", baseline=SOFTMAX)
    assert (more.status, more.reason) == ("fail", _relative_reason(method, 2, 1))


def test_fewer_than_baseline_on_the_wgmma_gemm_s_index_math():
    method = "compute.strength_reduction"
    assert parse_sass(TRITON_MM).counts()["IMAD.HI"] == 16
    one_less = check(without(TRITON_MM, "IMAD.HI", 1, keep_going=True), method, "sm_90a", baseline=TRITON_MM)
    assert (one_less.status, one_less.reason) == ("pass", _relative_reason(method, 15, 16))
    assert one_less.matched == (("IMAD.HI", 15),)
    equal = check(TRITON_MM, method, "sm_90a", baseline=TRITON_MM)
    assert (equal.status, equal.reason) == ("fail", _relative_reason(method, 16, 16))


def test_no_spills_on_either_side_is_not_fewer_spills():
    method = "latency.register_pressure_reduction"
    verdict = check(NAIVE, method, "sm_90", baseline=NAIVE)
    assert (verdict.status, verdict.reason) == ("fail", _relative_reason(method, 0, 0))


def test_more_than_baseline_is_strict_on_the_cutlass_gemm():
    # compute.register_tiling counts the math instructions: 64 HMMA.16816.F32 and 128 FFMA
    method = "compute.register_tiling"
    assert load_signatures().get(method).rule_for("sm_90").relative == "more_than_baseline"
    same = check(CUTLASS, method, "sm_90", baseline=CUTLASS)
    assert (same.status, same.reason) == ("fail", _relative_reason(method, 192, 192))
    more = check(with_more(CUTLASS, "FFMA", 1), method, "sm_90", baseline=CUTLASS)
    assert (more.status, more.reason) == ("pass", _relative_reason(method, 193, 192))
    fewer = check(without(CUTLASS, "HMMA.16816.F32", 1, keep_going=True), method, "sm_90", baseline=CUTLASS)
    assert (fewer.status, fewer.reason) == ("fail", _relative_reason(method, 191, 192))


def _pipelining(relative: str):
    """A signature set of one method whose rule compares both cp.async patterns with the baseline."""
    rule = sv.SassRule(arch="default", mode="all", patterns=(LDGDEPBAR, DEPBAR_LE), relative=relative)
    signature = sv.Signature(method="test.pipelining", rules={"default": rule})
    return sv.SignatureSet(schema_version=1, signatures={"test.pipelining": signature}, source="test")


def test_an_all_rule_relative_to_a_baseline_compares_every_pattern():
    fewer = _pipelining("fewer_than_baseline")
    one_wait_less = without(CUTLASS, "DEPBAR.LE", 1, keep_going=True)
    verdict = check(one_wait_less, "test.pipelining", "sm_80", baseline=CUTLASS, signatures=fewer)
    # LDGDEPBAR is equal: not every pattern's count is fewer
    assert (verdict.status, verdict.reason) == (
        "fail",
        f"{LDGDEPBAR}: 5 vs baseline 5; {DEPBAR_LE}: 2 vs baseline 3",
    )
    one_of_each_less = without(one_wait_less, "LDGDEPBAR", 1, keep_going=True)
    verdict = check(one_of_each_less, "test.pipelining", "sm_80", baseline=CUTLASS, signatures=fewer)
    assert (verdict.status, verdict.reason) == (
        "pass",
        f"{LDGDEPBAR}: 4 vs baseline 5; {DEPBAR_LE}: 2 vs baseline 3",
    )
    more = _pipelining("more_than_baseline")
    verdict = check(CUTLASS, "test.pipelining", "sm_80", baseline=one_wait_less, signatures=more)
    assert (verdict.status, verdict.reason) == (
        "fail",
        f"{LDGDEPBAR}: 5 vs baseline 5; {DEPBAR_LE}: 3 vs baseline 2",
    )
    verdict = check(CUTLASS, "test.pipelining", "sm_80", baseline=one_of_each_less, signatures=more)
    assert verdict.status == "pass"


def test_a_relative_rule_without_a_usable_baseline_is_inconclusive():
    method = "compute.strength_reduction"
    verdict = check(SOFTMAX, method, "sm_90a")
    assert (verdict.status, verdict.reason) == (
        "inconclusive",
        "rule fewer_than_baseline needs a baseline listing and none was given",
    )
    empty = "Fatbin ptx code:\n================\narch = sm_90\n"
    verdict = check(without(SOFTMAX, "MUFU.RCP", 1), method, "sm_90a", baseline=empty)
    assert (verdict.status, verdict.reason) == ("inconclusive", "the baseline listing has no instructions")


HISTOGRAM_UINT4 = (
    Path(__file__).parents[1] / "fixtures/ladders/histogram/03_shared_atomics_uint4/evidence/full"
)


@pytest.mark.parametrize(
    "mnemonic, vectorized",
    [
        ("LDG.E.128.CONSTANT", True),  # a const __restrict__ uint4 load: the read-only path, after .128
        ("LDG.E.128", True),
        ("LDG.E.LTC128B.128", True),
        ("STG.E.128", True),
        ("LDGSTS.E.BYPASS.LTC128B.128", True),
        ("LDG.E.LTC128B", False),  # an L2 prefetch hint of 128 bytes, a 4-byte load
        ("LDG.E.64", False),
        ("LDG.E.U8.CONSTANT", False),
    ],
)
def test_the_128_bit_modifier_counts_wherever_it_stands(mnemonic, vectorized):
    """The histogram ladder's climb on the H200 (2026-12-02) found the anchored patterns missing the
    read-only LDG.E.128.CONSTANT and calling a vectorised kernel's method implementation_failed."""
    rule = load_signatures().get("memory.vectorized_access").rule_for("sm_90a")
    assert any(re.search(p, mnemonic) for p in rule.patterns) is vectorized


def test_the_histogram_s_uint4_loads_pass_vectorized_access():
    listing = parse_sass((HISTOGRAM_UINT4 / "kernel.sass").read_text())
    assert listing.counts()["LDG.E.128.CONSTANT"] >= 1 and not any(
        m.endswith(".128") for m in listing.counts() if m.startswith("LDG")
    )
    (verdict,) = verify(listing, ["memory.vectorized_access"], arch="sm_90a")
    assert verdict.status == "pass"
