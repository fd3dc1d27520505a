"""KernelBench's scores over a suite's rows: fast_p, the geometric-mean speedup, the summary and the table.

This module decides how a suite's outcomes add up to KernelBench's numbers. fast_p is the share of *every*
problem attempted, failures included, whose solution is correct and more than p times as fast as the
baseline: strictly more, so a speedup of exactly p is not fast_p. fast_0 is therefore the share that is
correct and timed (KernelBench's ``correct and speedup > 0``); a correct row the suite could not time
counts as not fast. The geometric-mean speedup is over the correct rows with a speedup. Against
``"compile"`` the same is computed with each row's speedup over ``torch.compile`` (a row without one is
not fast). A row is taken as recorded: nothing here re-derives a speedup from the times.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from attrs import field, frozen

PS = (0.0, 1.0, 1.5, 2.0)  # the thresholds the summary and the table report
AGAINST = ("eager", "compile")
MISSING = "—"
_REASON_CHARS = 120  # a table cell's share of a failure's reason; the row's JSON keeps all of it


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@frozen
class Row:
    """One problem/solution pair's outcome, as the suite records it."""

    problem: str
    solution: str | None
    level: int | None
    correct: bool
    failure: str | None  # the failure class when not correct ("wrong_output"), None when correct
    reason: str  # why, for people ("" when correct)
    baseline_ms: float | None  # the eager baseline's median
    solution_ms: float | None
    speedup: float | None  # baseline_ms / solution_ms; None unless correct and both timed
    compile_ms: float | None = None
    compile_speedup: float | None = None  # compile_ms / solution_ms
    warnings: tuple[str, ...] = field(default=(), converter=_as_tuple)  # static warning codes


def _speedup(row: Row, against: str) -> float | None:
    if against == "eager":
        return row.speedup
    if against == "compile":
        return row.compile_speedup
    raise ValueError(f"against must be one of {AGAINST}, not {against!r}")


def _usable(speedup: float | None) -> bool:
    # A speedup the suite could not have measured (None, NaN, inf, <= 0) is no speedup at all.
    return speedup is not None and math.isfinite(speedup) and speedup > 0


def fast_p(rows: Sequence[Row], p: float, *, against: str = "eager") -> float:
    """The share of all rows that are correct with a speedup strictly greater than ``p`` (0.0 for no rows)."""
    if against not in AGAINST:
        raise ValueError(f"against must be one of {AGAINST}, not {against!r}")
    if not rows:
        return 0.0
    fast = 0
    for row in rows:
        speedup = _speedup(row, against)
        if row.correct and speedup is not None and _usable(speedup) and speedup > p:
            fast += 1
    return fast / len(rows)


def geomean_speedup(rows: Sequence[Row], *, against: str = "eager") -> float | None:
    """The geometric mean of the correct rows' speedups; None when no correct row has one."""
    logs = [
        math.log(speedup)
        for row in rows
        if row.correct and (speedup := _speedup(row, against)) is not None and _usable(speedup)
    ]
    if not logs:
        return None
    return math.exp(math.fsum(logs) / len(logs))


def _fast_key(p: float) -> str:
    return f"fast_{p:g}"


def _scores(rows: Sequence[Row], with_compile: bool) -> dict[str, Any]:
    scores: dict[str, Any] = {"problems": len(rows), "correct": sum(1 for row in rows if row.correct)}
    for p in PS:
        scores[_fast_key(p)] = fast_p(rows, p)
    scores["geomean_speedup"] = geomean_speedup(rows)
    if with_compile:
        scores["fast_1_compile"] = fast_p(rows, 1.0, against="compile")
        scores["geomean_speedup_compile"] = geomean_speedup(rows, against="compile")
    failures = Counter(row.failure or "unknown" for row in rows if not row.correct)
    # Most frequent first, then by name: the order a reader wants and a stable one.
    scores["by_failure"] = dict(sorted(failures.items(), key=lambda item: (-item[1], item[0])))
    return scores


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    """The suite's scores::

        {"problems", "correct", "fast_0", "fast_1", "fast_1.5", "fast_2", "geomean_speedup",
         "by_failure": {failure class: count},   # incorrect rows; "unknown" when a row names none
         "by_level": {str(level): {the same keys but by_level}}}   # levels in numeric order

    plus ``fast_1_compile`` and ``geomean_speedup_compile`` (at the top and in every level) when any row
    has a speedup over torch.compile. Rows without a level count in the totals, not in by_level."""
    with_compile = any(row.compile_speedup is not None for row in rows)
    result = _scores(rows, with_compile)
    levels = sorted({row.level for row in rows if row.level is not None})
    # Keys are strings, as in the suite's JSON, so a summary read back equals the one written.
    result["by_level"] = {
        str(level): _scores([row for row in rows if row.level == level], with_compile) for level in levels
    }
    return result


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, trailing zeros dropped and never in exponent form (2.3145
    -> "2.31", 2.0 -> "2", 1234 -> "1230", 0.012345 -> "0.0123")."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - exponent)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exponent:  # 9.996 -> 10.0, not 10.00
        exponent += 1
        rounded = round(value, digits - 1 - exponent)
    decimals = digits - 1 - exponent
    if decimals <= 0:
        return str(int(rounded))
    return f"{rounded:.{decimals}f}".rstrip("0").rstrip(".")


def _number(value: float | None) -> str:
    return MISSING if value is None else significant(value)


def _times(value: float | None) -> str:
    return MISSING if value is None else f"{significant(value)}x"


def _cell(text: str) -> str:
    """Text a Markdown table cell can hold: one line, ``|`` escaped, never empty."""
    text = " ".join(text.split()).replace("|", "\\|")
    return text or MISSING


def _failure_cell(row: Row) -> str:
    if row.correct:
        return MISSING
    reason = " ".join(row.reason.split())
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 1] + "…"
    failure = row.failure or "unknown"
    return _cell(f"{failure}: {reason}" if reason else failure)


def _score_lines(scores: dict[str, Any]) -> list[str]:
    lines = [f"- {scores['correct']} of {scores['problems']} correct"]
    for p in PS:
        key = _fast_key(p)
        if key in scores:
            lines.append(f"- {key}: {_number(scores[key])}")
    lines.append(f"- geomean speedup: {_times(scores.get('geomean_speedup'))}")
    if "fast_1_compile" in scores:
        lines.append(f"- fast_1 against torch.compile: {_number(scores['fast_1_compile'])}")
        lines.append(
            f"- geomean speedup against torch.compile: {_times(scores.get('geomean_speedup_compile'))}"
        )
    failures = scores.get("by_failure") or {}
    if failures:
        lines.append(
            "- failures: " + ", ".join(f"{_cell(str(name))} {count}" for name, count in failures.items())
        )
    return lines


def table(rows: Sequence[Row], summary_dict: dict[str, Any] | None = None) -> str:
    """A Markdown table of the rows, a blank line, then the score lines (``summary(rows)`` unless given)."""
    lines = [
        "| problem | solution | correct | failure / reason | eager ms | solution ms | speedup | warnings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = (
            _cell(row.problem),
            _cell(row.solution or ""),
            "yes" if row.correct else "no",
            _failure_cell(row),
            _number(row.baseline_ms),
            _number(row.solution_ms),
            _times(row.speedup),
            _cell(", ".join(row.warnings)),
        )
        lines.append("| " + " | ".join(cells) + " |")
    scores = summary_dict if summary_dict is not None else summary(rows)
    return "\n".join([*lines, "", *_score_lines(scores)])
