"""kopt_core.ncu.parse where the other parse tests left mutants alive, on the real H200 pages
(tests/fixtures/h200) and variants of them: quoted cells that span lines (ncu's rule descriptions), stray
output in and around the table, the header a table starts at, kernel IDs, missing columns, the units
ncu scales, which metrics add up across kernels, the aggregate's fields and every error message and hint,
and ``parse_imported_csv`` (``kopt profile --import``) in-process, where only the CLI reached it before."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from kopt_core.errors import ConfigError, HardwareError
from kopt_core.ncu.parse import (
    RAW_PAGE_HELP,
    aggregate_kernels,
    attach_findings,
    is_extensive,
    normalise_unit,
    parse_details_csv,
    parse_imported_csv,
    parse_number,
    parse_raw_csv,
)
from kopt_core.records.profile import KernelProfile, MetricValue, ProfileReport, RuleFinding

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
FULL_RAW = (H200 / "naive_full_raw.csv").read_text()  # ncu --import --csv --page raw: header, units, kernel
DETAILS = (H200 / "naive_full_details.csv").read_text()  # ncu --csv --page details

DURATION = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def page(*rows: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return out.getvalue()


def raw_table() -> tuple[list[str], list[str], list[str]]:
    """The full raw page's header, units row and kernel row."""
    header, units, kernel = rows_of(FULL_RAW)
    assert (units[header.index("ID")], kernel[header.index("ID")]) == ("", "0")
    return header, units, kernel


# ------------------------------------------------------------------------- the details page, line by line

DETAILS_HEADER = rows_of(DETAILS.splitlines()[0])[0]
# the rule rows of the real page (its metric rows print fewer cells than the header and are never rows)
RULES = [row for row in rows_of(DETAILS)[1:] if len(row) == len(DETAILS_HEADER)]
DESCRIPTION = DETAILS_HEADER.index("Rule Description")


def test_the_details_fixture_is_what_these_tests_change():
    assert len(RULES) == 8
    assert [row[DETAILS_HEADER.index("Rule Name")] for row in RULES[:2]] == [
        "SOLBottleneck",
        "SOLFPRoofline",
    ]
    assert all("\n" not in row[DESCRIPTION] for row in RULES)


def with_description(row: list[str], text: str) -> list[str]:
    changed = list(row)
    changed[DESCRIPTION] = text
    return changed


# a description over four lines: one ends in spaces, one in an X, one starts with a quoted word
SPANNING = 'First line.\nsecond ends in spaces  \nthird ends in X\n"quoted" fourth, with, commas'


def test_a_rule_description_that_spans_lines_is_read_whole_in_any_position():
    first, second, *rest = RULES
    # the spanning row first under the header, then a row, then another spanning row, then the rest
    text = page(
        DETAILS_HEADER,
        with_description(first, SPANNING),
        second,
        with_description(rest[0], "two\nlines"),
        with_description(rest[1], "and\ntwo more"),
        *rest[2:],
    )
    (found,) = parse_details_csv(text).values()
    assert [f.message for f in found] == [
        SPANNING,
        second[DESCRIPTION],
        "two\nlines",
        "and\ntwo more",
        *(row[DESCRIPTION] for row in rest[2:]),
    ]
    assert [f.rule for f in found] == [row[DETAILS_HEADER.index("Rule Name")] for row in RULES]


def test_a_continuation_line_with_as_many_fields_as_the_header_is_still_part_of_its_cell():
    header = '"ID","Kernel Name","Rule Name","Rule Description"\n'
    # 'two, three, four, five"' read alone splits into four fields, as many as the header has
    text = header + '"0","k","R1","one\ntwo, three, four, five"\n"0","k","R2","x"\n'
    assert [(f.rule, f.message) for f in parse_details_csv(text)[0]] == [
        ("R1", "one\ntwo, three, four, five"),
        ("R2", "x"),
    ]


def test_stray_output_that_opens_a_quote_is_ended_by_the_next_whole_row():
    first, second, *rest = RULES
    text = page(DETAILS_HEADER, first) + '"progress: 50%\n'
    text += page(second, with_description(rest[0], "spans\ntwo lines"), *rest[1:])
    (found,) = parse_details_csv(text).values()
    assert [f.message for f in found] == [
        first[DESCRIPTION],
        second[DESCRIPTION],
        "spans\ntwo lines",
        *(row[DESCRIPTION] for row in rest[1:]),
    ]


def test_metric_rows_as_wide_as_the_header_are_skipped_and_every_rule_after_them_read():
    metric = [""] * len(DETAILS_HEADER)
    for column, value in zip(DETAILS_HEADER, rows_of(DETAILS)[1], strict=False):
        metric[DETAILS_HEADER.index(column)] = value
    assert metric[DETAILS_HEADER.index("Metric Name")] == "DRAM Frequency" and metric[DESCRIPTION] == ""
    text = page(DETAILS_HEADER, metric, RULES[0], metric, *RULES[1:])
    assert [f.rule for f in parse_details_csv(text)[0]] == [
        row[DETAILS_HEADER.index("Rule Name")] for row in RULES
    ]


def test_a_row_whose_id_is_not_a_number_is_skipped_and_the_rows_after_it_read():
    bad = list(RULES[0])
    bad[DETAILS_HEADER.index("ID")] = "n/a"
    findings = parse_details_csv(page(DETAILS_HEADER, bad, *RULES[1:]))
    assert list(findings) == [0] and len(findings[0]) == 7


def test_a_details_page_without_section_or_speedup_columns_reads_them_as_unknown():
    header = ["ID", "Kernel Name", "Rule Name", "Rule Type", "Rule Description"]
    text = page(header, ["3", "k", "CPIStall", "OPT", "stalls"])
    assert parse_details_csv(text) == {
        3: [
            RuleFinding(section="", rule="CPIStall", kind="OPT", message="stalls", estimated_speedup_pct=None)
        ]
    }


def test_a_details_page_whose_rows_have_no_id_has_no_kernels():
    blank = list(RULES[0])
    blank[DETAILS_HEADER.index("ID")] = ""
    with pytest.raises(HardwareError) as raised:
        parse_details_csv(page(DETAILS_HEADER, blank))
    assert (
        raised.value.message == "ncu report has no kernels: the details page has a header but no kernel rows"
    )


def test_a_details_page_without_a_header_names_the_details_page():
    with pytest.raises(HardwareError) as raised:
        parse_details_csv("==PROF== Disconnected\n")
    assert raised.value.message == (
        'ncu report has no kernels: no CSV header (a line starting with "ID", naming "Kernel Name") '
        "in the ncu details page"
    )
    assert (
        raised.value.hint
        == "was anything profiled? check the ncu log for ==ERROR== lines and the kernel filter"
    )


# ------------------------------------------------------------------------------------ the raw page


def test_the_table_starts_at_the_line_that_starts_with_id_and_names_the_kernel():
    header, units, kernel = raw_table()
    other = '"ID","value"\n"1","2"\n'  # the program's own CSV: it starts with "ID" but names no kernel
    named = 'log: "Kernel Name" is printed below\n'
    text = other + named + "   " + page(header, units, kernel)  # an indented header is still the header
    report = parse_raw_csv(text, source="log")
    assert [k.id for k in report.kernels] == [0]
    assert report.kernels[0].metrics[DURATION].value == 3.140224


def test_kernel_ids_are_read_from_the_id_column_and_a_non_numeric_one_is_its_position():
    header, units, kernel = raw_table()
    id_col = header.index("ID")
    rows = []
    for kernel_id in ("5", "9", "x1"):
        row = list(kernel)
        row[id_col] = kernel_id
        rows.append(row)
    blank = list(kernel)
    blank[id_col] = ""  # a row without an ID (after the units row) is no kernel
    report = parse_raw_csv(page(header, units, rows[0], blank, *rows[1:]))
    assert [k.id for k in report.kernels] == [5, 9, 2]
    assert report.source == ""


def test_a_raw_page_without_identity_columns_leaves_grid_and_block_empty():
    header, units, kernel = raw_table()
    keep = [i for i, name in enumerate(header) if name not in ("Grid Size", "Block Size")]
    report = parse_raw_csv(
        page([header[i] for i in keep], [units[i] for i in keep], [kernel[i] for i in keep])
    )
    (profile,) = report.kernels
    assert (profile.grid, profile.block, profile.name) == ("", "", kernel[header.index("Kernel Name")])


def test_a_header_with_a_trailing_comma_makes_no_metric_of_the_empty_column():
    header, units, kernel = raw_table()
    text = "\n".join(line + "," for line in page(header, units, kernel).splitlines()) + "\n"
    (profile,) = parse_raw_csv(text).kernels
    assert "" not in profile.metrics
    assert profile.metrics[DURATION].value == 3.140224


def test_raw_page_errors_name_the_ncu_output_and_say_what_to_check():
    with pytest.raises(HardwareError) as raised:
        parse_raw_csv("==ERROR== The application returned an error code (1)\n")
    assert raised.value.message.endswith("in the ncu output")
    header, units, _ = raw_table()
    with pytest.raises(HardwareError) as raised:
        parse_raw_csv(page(header, units), source="ncu.csv")
    assert (raised.value.message, raised.value.hint) == (
        "ncu report has no kernels: the CSV in ncu.csv has a header but no kernel rows",
        "the kernel filter matched nothing, or the profiled range launched no kernel",
    )


# ------------------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize("text", ["1e999", "-1e400", "1,000e308"])
def test_a_number_too_large_for_a_float_is_unknown(text):
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("raw", "unit", "factor"),
    [
        ("cycles/nsecond", "Hz", 1e9),
        ("cycles/usecond", "Hz", 1e6),
        ("cycle/second", "Hz", 1.0),
        ("flop/s", "flop/second", 1.0),
        ("Kflop/msecond", "Kflop/second", 1e3),
        ("W", "W", 1.0),
        ("sector/request/cycle", "sector/request/cycle", 1.0),
        ("", "", 1.0),
        ("%", "%", 1.0),
    ],
)
def test_units_ncu_prints_for_rates_and_unknown_units(raw, unit, factor):
    assert normalise_unit(raw) == (unit, factor)


# ---------------------------------------------------------------------- what adds up across kernels


@pytest.mark.parametrize(
    ("name", "unit", "extensive"),
    [
        ("smsp__inst_executed.sum", "inst", True),
        ("smsp__inst_executed.sum", "%", False),  # the unit wins over ".sum"
        ("smsp__inst_executed.sum", "Hz", False),
        ("smsp__inst_executed.sum", "inst/cycle", False),
        ("smsp__foo.pct", "inst", False),  # a ratio by its name wins over a count unit
        ("smsp__foo.ratio", "inst", False),
        ("smsp__foo.max_rate", "inst", False),
        ("smsp__foo.sum.pct_of_peak_sustained_elapsed", "byte", False),
        ("smsp__foo.sum.peak_sustained", "byte", False),
        ("smsp__foo.sum.per_second", "byte", False),
        ("smsp__foo_pct", "byte", False),
        ("smsp__foo_per_bar.sum", "byte", False),
        ("lts__average_t_sector_hit_rate.sum", "byte", False),
        ("smsp__foo", "byte", True),
        ("smsp__foo", "register", False),  # not an amount that adds up
    ],
)
def test_a_metric_is_summed_only_when_its_name_and_unit_say_it_adds_up(name, unit, extensive):
    assert is_extensive(name, unit) is extensive


# -------------------------------------------------------------------------------------- the aggregate


def metric(name: str, value: float | None, unit: str, raw: str = "", raw_unit: str = "") -> MetricValue:
    return MetricValue(name=name, value=value, unit=unit, raw=raw, raw_unit=raw_unit)


def kernel(kernel_id: int, duration: float | None, grid: str, block: str, *metrics: MetricValue, findings=()):
    return KernelProfile(
        id=kernel_id,
        name=f"k{kernel_id}",
        duration_ms=duration,
        grid=grid,
        block=block,
        metrics={m.name: m for m in metrics},
        findings=findings,
    )


FINDING_A = RuleFinding(section="S", rule="A", kind="OPT", message="a", estimated_speedup_pct=10.0)
FINDING_B = RuleFinding(section="S", rule="B", kind="INF", message="b")


def test_the_aggregate_combines_each_metric_over_the_kernels_that_have_it():
    first = kernel(
        0,
        2.0,
        "(4, 1, 1)",
        "(128, 1, 1)",
        metric(SM, 30.0, "%", "30", "%"),
        metric("launch__occupancy_limit_note", None, "", "n/a", ""),
        metric("only_in_first", 7.0, "inst", "7", "inst"),
        findings=(FINDING_A,),
    )
    second = kernel(
        1,
        0.0,  # a kernel of no measurable time: the mean over the kernels is unweighted
        "(8, 1, 1)",
        "(128, 1, 1)",
        metric(SM, 60.0, "%", "60", "%"),
        metric("launch__occupancy_limit_note", None, "", "none", ""),
        findings=(FINDING_B,),
    )
    aggregate = aggregate_kernels([first, second])
    assert aggregate == KernelProfile(
        id=-1,
        name="aggregate of 2 kernels",
        duration_ms=2.0,
        grid="",  # the kernels' grids differ
        block="(128, 1, 1)",
        metrics={
            SM: metric(SM, 45.0, "%", "", "%"),
            "launch__occupancy_limit_note": metric("launch__occupancy_limit_note", None, "", "", ""),
            "only_in_first": metric("only_in_first", 7.0, "inst", "", "inst"),
        },
        findings=(FINDING_A, FINDING_B),
    )


def test_an_unknown_metric_keeps_the_text_every_kernel_printed():
    first = kernel(0, 1.0, "(1, 1, 1)", "(32, 1, 1)", metric("x__note", None, "ms", "no data", "msecond"))
    second = kernel(1, 1.0, "(1, 1, 1)", "(32, 1, 1)", metric("x__note", None, "ms", "no data", "msecond"))
    combined = aggregate_kernels([first, second])
    assert combined.metrics == {"x__note": metric("x__note", None, "ms", "no data", "msecond")}
    assert (combined.grid, combined.block) == ("(1, 1, 1)", "(32, 1, 1)")


def test_the_aggregate_keeps_a_grid_or_block_only_when_every_kernel_has_the_same():
    first = kernel(0, 1.0, "(2, 1, 1)", "(64, 1, 1)", metric(DURATION, 1.0, "ms"))
    second = kernel(1, 1.0, "(2, 1, 1)", "(256, 1, 1)", metric(DURATION, 1.0, "ms"))
    combined = aggregate_kernels([first, second])
    assert (combined.grid, combined.block, combined.duration_ms) == ("(2, 1, 1)", "", 2.0)


# ---------------------------------------------------------------------------------- attach_findings


def test_findings_attached_to_a_report_without_an_aggregate_build_one():
    first = kernel(0, 1.0, "(1, 1, 1)", "(32, 1, 1)", metric(DURATION, 1.0, "ms"))
    second = kernel(4, 3.0, "(1, 1, 1)", "(32, 1, 1)", metric(DURATION, 3.0, "ms"))
    attached = attach_findings(ProfileReport(kernels=(first, second)), {4: [FINDING_A]})
    assert attached.kernels[1].findings == (FINDING_A,)
    assert attached.aggregate == aggregate_kernels(attached.kernels)
    assert attached.aggregate.findings == (FINDING_A,) and attached.aggregate.duration_ms == 4.0


# --------------------------------------------------------------------------------- an imported page


def imported_error(text: str, source: str = "") -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        parse_imported_csv(text, source=source)
    assert raised.value.hint == RAW_PAGE_HELP
    return raised.value


def test_an_imported_raw_page_reads_as_ncus_own():
    assert parse_imported_csv(FULL_RAW, source="raw.csv") == parse_raw_csv(FULL_RAW, source="raw.csv")
    assert parse_imported_csv(FULL_RAW).source == ""


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "it is empty"),
        (" \n\t\n", "it is empty"),
        ("SQLite format 3\x00", "it is binary, not CSV text (an .ncu-rep report? import that file as it is)"),
        ("a,b\n1,2\n", 'it has no header row starting with "ID" and naming "Kernel Name"'),
        (
            page(
                ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Value"],
                ["0", "k", "S", "M", "1"],
            ),
            "it is a details page (one row per metric: Section Name, Metric Name, Metric Value); kopt "
            "reads the raw page (one row per kernel, one column per metric)",
        ),
        (
            page(["ID", "Kernel Name", "Launch Note", ""], ["0", "k", "x", "1"]),
            "its header names no metric column",
        ),
        (
            page(["ID", "Kernel Name", DURATION], ["", "", "ms"]),
            "it has a header but no complete kernel row (is it truncated?)",
        ),
        (
            page(["ID", "Kernel Name", DURATION], ["", "", "ms"], ["0", "k", "n/a"]),
            "no metric column holds a number",
        ),
    ],
)
def test_an_imported_file_that_is_no_raw_page_says_why(text, why):
    assert (
        imported_error(text, source="mine.csv").message
        == f"mine.csv is not the raw page of an ncu report: {why}"
    )
    assert imported_error(text).message == f"the CSV is not the raw page of an ncu report: {why}"


def test_binary_means_a_nul_or_more_than_one_replacement_character_in_a_hundred_of_the_first_4096():
    head = "x" * 990 + "\ufffd" * 10  # 1000 characters, 10 replaced: text, with no header
    assert "no header row" in imported_error(head).message
    assert "binary" in imported_error("x" * 989 + "\ufffd" * 11).message
    # a NUL beyond the first 4096 characters is not looked at
    assert len(FULL_RAW) > 4097
    late = FULL_RAW[:4096] + "\x00" + FULL_RAW[4096:]
    assert "\x00" not in FULL_RAW and "binary" not in str(parse_imported_csv_or_error(late))
    early = FULL_RAW[:4095] + "\x00" + FULL_RAW[4095:]
    assert "binary" in imported_error(early).message


def parse_imported_csv_or_error(text: str):
    try:
        return parse_imported_csv(text)
    except ConfigError as error:
        return error.message


def test_an_imported_page_whose_numbers_overflow_holds_no_number():
    header, units, kernel = raw_table()
    numbers = {i for i, cell in enumerate(kernel) if parse_number(cell) is not None and header[i] != "ID"}
    row = [("1e999" if i in numbers else cell) for i, cell in enumerate(kernel)]
    assert math.isinf(float("1e999"))
    assert imported_error(page(header, units, row)).message.endswith("no metric column holds a number")
