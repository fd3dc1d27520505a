"""kopt_torch.scores: fast_p's denominator and strictness, the geometric mean, the summary and the table."""

from __future__ import annotations

import json
import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kopt_torch.scores import Row, fast_p, geomean_speedup, significant, summary, table


def ok(
    problem: str, speedup: float | None, *, level: int | None = 1, compile_speedup: float | None = None
) -> Row:
    baseline = 1.0
    solution_ms = None if speedup is None else baseline / speedup
    return Row(
        problem=problem,
        solution=f"{problem}__sol.py",
        level=level,
        correct=True,
        failure=None,
        reason="",
        baseline_ms=baseline,
        solution_ms=solution_ms,
        speedup=speedup,
        compile_speedup=compile_speedup,
    )


def failed(
    problem: str, failure: str = "wrong_output", *, level: int | None = 1, reason: str = "max abs 0.3"
) -> Row:
    return Row(
        problem=problem,
        solution=f"{problem}__sol.py",
        level=level,
        correct=False,
        failure=failure,
        reason=reason,
        baseline_ms=1.0,
        solution_ms=None,
        speedup=None,
    )


# -- fast_p -------------------------------------------------------------------------------------------------


def test_fast_p_denominator_counts_failures():
    rows = [ok("a", 3.0), ok("b", 3.0), failed("c"), failed("d", "compile_error")]
    assert fast_p(rows, 1.0) == 0.5
    assert fast_p(rows[:2], 1.0) == 1.0


def test_fast_p_is_strict_at_p():
    rows = [ok("a", 1.0), ok("b", 1.5), ok("c", 2.0), ok("d", 2.0000001)]
    assert fast_p(rows, 1.0) == 0.75
    assert fast_p(rows, 1.5) == 0.5
    assert fast_p(rows, 2.0) == 0.25


def test_fast_0_is_the_correct_share():
    rows = [ok("a", 0.1), ok("b", 5.0), failed("c"), failed("d"), failed("e")]
    assert fast_p(rows, 0.0) == 2 / 5


def test_a_correct_row_without_a_timing_is_not_fast():
    rows = [ok("a", None), ok("b", 2.0)]
    assert fast_p(rows, 0.0) == 0.5


def test_fast_p_of_nothing_is_zero():
    assert fast_p([], 1.0) == 0.0
    assert fast_p([], 0.0, against="compile") == 0.0


def test_fast_p_against_compile():
    rows = [ok("a", 3.0, compile_speedup=0.5), ok("b", 3.0, compile_speedup=1.2), ok("c", 3.0)]
    assert fast_p(rows, 1.0) == 1.0
    assert fast_p(rows, 1.0, against="compile") == pytest.approx(1 / 3)


def test_unknown_baseline_is_refused():
    with pytest.raises(ValueError, match="against"):
        fast_p([ok("a", 2.0)], 1.0, against="cudnn")


# -- geomean ------------------------------------------------------------------------------------------------


def test_geomean_of_2_and_8_is_4():
    assert geomean_speedup([ok("a", 2.0), ok("b", 8.0)]) == pytest.approx(4.0)


def test_geomean_ignores_failures_and_untimed_rows():
    rows = [ok("a", 2.0), ok("b", 8.0), failed("c"), ok("d", None)]
    assert geomean_speedup(rows) == pytest.approx(4.0)


def test_geomean_of_none_is_none():
    assert geomean_speedup([]) is None
    assert geomean_speedup([failed("a"), ok("b", None)]) is None
    assert geomean_speedup([ok("a", 2.0)], against="compile") is None


def test_geomean_against_compile():
    rows = [ok("a", 9.0, compile_speedup=0.5), ok("b", 9.0, compile_speedup=2.0)]
    assert geomean_speedup(rows, against="compile") == pytest.approx(1.0)


# -- properties over random suites --------------------------------------------------------------------------

speedups = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def rows_strategy(draw: st.DrawFn) -> list[Row]:
    count = draw(st.integers(min_value=0, max_value=30))
    rows = []
    for i in range(count):
        if draw(st.booleans()):
            rows.append(
                ok(f"p{i}", draw(st.one_of(st.none(), speedups)), level=draw(st.sampled_from([1, 2, 3])))
            )
        else:
            rows.append(failed(f"p{i}", draw(st.sampled_from(["wrong_output", "compile_error", "timeout"]))))
    return rows


ps = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)


@given(rows=rows_strategy(), p=ps, q=ps)
def test_fast_p_is_a_share_and_non_increasing_in_p(rows, p, q):
    low, high = sorted((p, q))
    assert 0.0 <= fast_p(rows, high) <= fast_p(rows, low) <= 1.0
    # Never more than the correct share.
    correct = sum(row.correct for row in rows)
    assert fast_p(rows, low) * len(rows) <= correct + 1e-9


@given(rows=rows_strategy())
def test_fast_0_equals_the_correct_share_when_every_correct_row_is_timed(rows):
    timed = [row for row in rows if not row.correct or row.speedup is not None]
    correct = sum(row.correct for row in timed)
    assert fast_p(timed, 0.0) == (correct / len(timed) if timed else 0.0)


@given(rows=rows_strategy())
def test_geomean_lies_between_the_smallest_and_largest_speedup(rows):
    values = [row.speedup for row in rows if row.correct and row.speedup is not None]
    mean = geomean_speedup(rows)
    if not values:
        assert mean is None
    else:
        assert mean is not None
        assert min(values) * (1 - 1e-9) <= mean <= max(values) * (1 + 1e-9)


@given(rows=rows_strategy())
def test_summary_counts_add_up(rows):
    result = summary(rows)
    assert result["problems"] == len(rows)
    assert result["correct"] + sum(result["by_failure"].values()) == len(rows)
    assert sum(level["problems"] for level in result["by_level"].values()) == len(rows)
    for key in ("fast_0", "fast_1", "fast_1.5", "fast_2"):
        assert result[key] == fast_p(rows, float(key.split("_")[1]))


# -- summary ------------------------------------------------------------------------------------------------


def test_summary_keys_and_levels():
    rows = [ok("a", 2.0, level=1), ok("b", 8.0, level=1), failed("c", level=2), ok("d", 0.5, level=2)]
    result = summary(rows)
    assert result["problems"] == 4
    assert result["correct"] == 3
    assert result["fast_0"] == 0.75
    assert result["fast_1"] == 0.5
    assert result["fast_1.5"] == 0.5
    assert result["fast_2"] == 0.25
    assert result["geomean_speedup"] == pytest.approx(2.0)
    assert result["by_failure"] == {"wrong_output": 1}
    assert list(result["by_level"]) == ["1", "2"]
    assert result["by_level"]["1"]["fast_2"] == 0.5
    assert result["by_level"]["1"]["geomean_speedup"] == pytest.approx(4.0)
    assert result["by_level"]["2"]["problems"] == 2
    assert result["by_level"]["2"]["fast_0"] == 0.5
    assert "fast_1_compile" not in result


def test_summary_failures_by_count():
    rows = [
        failed("a", "timeout"),
        failed("b", "wrong_output"),
        failed("c", "wrong_output"),
        failed("d", None),
    ]
    assert list(summary(rows)["by_failure"].items()) == [("wrong_output", 2), ("timeout", 1), ("unknown", 1)]


def test_summary_compile_keys_only_when_a_row_has_one():
    rows = [ok("a", 2.0, compile_speedup=1.5), ok("b", 2.0, level=2)]
    result = summary(rows)
    assert result["fast_1_compile"] == 0.5
    assert result["geomean_speedup_compile"] == pytest.approx(1.5)
    assert result["by_level"]["2"]["fast_1_compile"] == 0.0


def test_rows_without_a_level_count_in_the_totals_only():
    result = summary([ok("a", 2.0, level=None), ok("b", 2.0, level=3)])
    assert result["problems"] == 2
    assert list(result["by_level"]) == ["3"]


def test_summary_of_nothing():
    result = summary([])
    assert result["problems"] == 0 and result["fast_1"] == 0.0 and result["geomean_speedup"] is None
    assert result["by_level"] == {} and result["by_failure"] == {}


# -- table --------------------------------------------------------------------------------------------------


def test_table_holds_every_problem_and_the_scores():
    rows = [ok("p_one", 2.3125), failed("p_two", "compile_error", reason="nvcc: error"), ok("p_three", None)]
    text = table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| problem | solution | correct |")
    body = lines[2 : 2 + len(rows)]
    for row, line in zip(rows, body, strict=True):
        assert line.startswith(f"| {row.problem} |")
        assert line.count(" | ") == 7  # eight cells
    assert lines[2 + len(rows)] == ""
    assert "2.31x" in body[0]
    assert "compile_error: nvcc: error" in body[1]
    assert "—" in body[2]  # a correct row with no timing
    scores = "\n".join(lines[3 + len(rows) :])
    for key in ("fast_0", "fast_1", "fast_1.5", "fast_2", "geomean speedup"):
        assert key in scores
    assert "fast_1: 0.333" in scores and "geomean speedup: 2.31x" in scores


def test_table_escapes_pipes_and_newlines():
    rows = [failed("a|b", reason="expected x | got y\nsecond line")]
    (line,) = [line for line in table(rows).splitlines() if line.startswith("| a")]
    assert "a\\|b" in line
    assert "expected x \\| got y second line" in line
    # Every unescaped | is a cell border: exactly nine of them.
    assert line.replace("\\|", "").count("|") == 9


def test_table_uses_a_given_summary():
    rows = [ok("a", 2.0)]
    given_summary = {**summary(rows), "fast_1": 0.123}
    assert "fast_1: 0.123" in table(rows, given_summary)


def test_table_shows_compile_scores_when_present():
    text = table([ok("a", 2.0, compile_speedup=1.25)])
    assert "against torch.compile" in text and "1.25x" in text


def test_table_shows_warnings_and_missing_values():
    row = Row(
        "a",
        None,
        None,
        False,
        "wrong_output",
        "",
        None,
        None,
        None,
        warnings=("no_custom_kernel", "side_stream"),
    )
    (line,) = [line for line in table([row]).splitlines() if line.startswith("| a ")]
    assert "no_custom_kernel, side_stream" in line
    assert line.count("—") == 4  # solution, eager ms, solution ms, speedup


@pytest.mark.parametrize(
    "value, text",
    [
        (2.3145, "2.31"),
        (12.345, "12.3"),
        (1234.0, "1230"),
        (0.012345, "0.0123"),
        (1.0, "1"),
        (2.0, "2"),
        (0.5, "0.5"),
        (0.1004, "0.1"),
        (9.996, "10"),
        (0.0, "0"),
        (100.0, "100"),
        (123456.0, "123000"),
        (-2.5, "-2.5"),
    ],
)
def test_three_significant_digits(value, text):
    assert significant(value) == text


def test_summary_survives_json():
    rows = [ok("a", 2.0, level=1), failed("b", level=10), ok("c", 3.0, level=2, compile_speedup=1.1)]
    result = summary(rows)
    assert json.loads(json.dumps(result, sort_keys=True)) == result
    assert list(result["by_level"]) == ["1", "2", "10"]  # numeric order


def test_whole_speedups_read_without_trailing_zeros():
    text = table([ok("a", 2.0)])
    assert "| 2x |" in text and "- fast_0: 1\n" in text + "\n"


def test_significant_handles_non_finite():
    assert significant(math.inf) == "inf"


# -- the exact table and the speedups that are no speedup (killing the mutants of kopt_torch/scores.py) ---


@pytest.mark.parametrize("bad", [0.0, -2.0, math.inf, math.nan])
def test_a_speedup_that_could_not_be_measured_is_neither_fast_nor_in_the_geomean(bad):
    unmeasured = attrs.evolve(ok("b", 1.0), speedup=bad, compile_speedup=bad)
    rows = [ok("a", 4.0, compile_speedup=2.0), unmeasured]
    assert fast_p(rows, 0.0) == 0.5 and fast_p(rows, 1.0) == 0.5
    assert fast_p(rows, 0.0, against="compile") == 0.5
    assert geomean_speedup(rows) == pytest.approx(4.0)
    assert geomean_speedup([unmeasured]) is None


def test_failures_are_ordered_by_count_then_by_name():
    rows = [failed("a", "zeta"), failed("b", "alpha"), failed("c", "zeta"), failed("d", "beta")]
    assert list(summary(rows)["by_failure"].items()) == [("zeta", 2), ("alpha", 1), ("beta", 1)]


def test_an_unknown_baseline_names_itself():
    with pytest.raises(ValueError, match=r"against must be one of \('eager', 'compile'\), not 'nvcc'"):
        geomean_speedup([ok("a", 2.0)], against="nvcc")


def test_the_table_line_by_line():
    long = "x" * 130
    rows = [
        ok("p1", 2.5),
        failed("p2", reason=long),
        Row("p3", None, 2, False, None, "", 0.25, None, None),
        Row("p4", "s4.py", 2, False, "error", "x" * 120, 0.5, None, None),
    ]
    text = table(rows)
    assert text.splitlines() == [
        "| problem | solution | correct | failure / reason | eager ms | solution ms | speedup | warnings |",
        "|---|---|---|---|---|---|---|---|",
        "| p1 | p1__sol.py | yes | — | 1 | 0.4 | 2.5x | — |",
        f"| p2 | p2__sol.py | no | wrong_output: {'x' * 119}… | 1 | — | — | — |",
        "| p3 | — | no | unknown | 0.25 | — | — | — |",
        f"| p4 | s4.py | no | error: {'x' * 120} | 0.5 | — | — | — |",
        "",
        "- 1 of 4 correct",
        "- fast_0: 0.25",
        "- fast_1: 0.25",
        "- fast_1.5: 0.25",
        "- fast_2: 0.25",
        "- geomean speedup: 2.5x",
        "- failures: error 1, unknown 1, wrong_output 1",
    ]
    with_compile = table([ok("p1", 2.5, compile_speedup=0.5), ok("p2", 3.0, compile_speedup=1.5)])
    assert with_compile.splitlines()[-2:] == [
        "- fast_1 against torch.compile: 0.5",
        "- geomean speedup against torch.compile: 0.866x",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (9.996, "10"),
        (99.96, "100"),
        (0.09996, "0.1"),
        (123.4, "123"),
        (1.5, "1.5"),
        (0.5, "0.5"),
        (-2.345, "-2.35"),
    ],
)
def test_significant_digits_at_a_power_of_ten(value, text):
    assert significant(value) == text
