"""Column and unit choices of the raw-page reader (kopt_core.ncu.parse) on the real H200 CSVs
(tests/fixtures/h200) and variants made from them: which column a bare metric name reads when the bare and
section-prefixed columns are both present, and when the first row is the units row."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from kopt_core.ncu.parse import parse_raw_csv

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
FULL_RAW = (H200 / "naive_full_raw.csv").read_text()  # ncu --import --csv --page raw: header, units, kernel
BASIC_RAW = (H200 / "naive_basic_raw.csv").read_text()  # a live run: program output around the table

CYCLES = "sm__cycles_active.avg"
TPC_CYCLES = "TPC.TriageCompute." + CYCLES
DURATION = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"

# every metric the full raw page prints both bare and with a section prefix: (bare, prefixed, the cells
# as printed: bare, prefixed)
BOTH = [
    (CYCLES, TPC_CYCLES, "6146460.575758", "6147496.621212"),
    (
        "lts__throughput.avg.pct_of_peak_sustained_elapsed",
        "LTS.TriageCompute.lts__throughput.avg.pct_of_peak_sustained_elapsed",
        "19.164534",
        "",
    ),
    (
        "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
        "SM_A.TriageCompute.l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
        "98.344936",
        "",
    ),
    ("l1tex__t_sector_hit_rate.pct", "SM_B.TriageCompute.l1tex__t_sector_hit_rate.pct", "87.845526", ""),
]


def _table(text: str) -> tuple[str, list[str], list[str], list[list[str]]]:
    """(what comes before the table, the header, the units row, the kernel rows) of a raw page."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    table = [line for line in lines[start:] if line.startswith('"')]  # no program output after it
    header, *rows = csv.reader(io.StringIO("\n".join(table)))
    units, *kernels = [row for row in rows if len(row) == len(header)]
    return "\n".join(lines[:start]) + "\n", header, units, kernels


def _csv(*rows: list[str], before: str = "") -> str:
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for row in rows:
        writer.writerow(row)
    return before + out.getvalue()


def _columns(header, row, order):
    """``header`` and ``row`` with the columns at the indexes of ``order`` moved to the end."""
    keep = [i for i in range(len(header)) if i not in order] + list(order)
    return [header[i] for i in keep], [row[i] for i in keep]


def test_the_fixture_has_what_these_tests_read():
    _, header, units, kernels = _table(FULL_RAW)
    assert units[header.index("ID")] == "" and [k[header.index("ID")] for k in kernels] == ["0"]
    for bare, prefixed, bare_cell, prefixed_cell in BOTH:
        # ncu prints the prefixed copy first
        assert header.index(prefixed) < header.index(bare)
        assert (kernels[0][header.index(bare)], kernels[0][header.index(prefixed)]) == (
            bare_cell,
            prefixed_cell,
        )


# --------------------------------------------------------------------------------------- column choice


@pytest.mark.parametrize(("bare", "prefixed", "bare_cell", "prefixed_cell"), BOTH)
def test_a_bare_name_reads_the_bare_column_when_both_are_printed(bare, prefixed, bare_cell, prefixed_cell):
    metrics = parse_raw_csv(FULL_RAW).kernels[0].metrics
    assert (metrics[bare].name, metrics[bare].raw, metrics[bare].value) == (bare, bare_cell, float(bare_cell))
    # the prefixed column is kept under its own name, with its own cell
    assert (metrics[prefixed].name, metrics[prefixed].raw) == (prefixed, prefixed_cell)
    assert metrics[prefixed].value == (float(prefixed_cell) if prefixed_cell else None)


def test_the_bare_column_wins_whatever_the_column_order():
    # both cycle counts have values (6146460.58 bare, 6147496.62 per TPC): the bare one is sm__cycles_active
    _, header, units, (row,) = _table(FULL_RAW)
    for moved in ([header.index(TPC_CYCLES)], [header.index(CYCLES)]):
        new_header, new_row = _columns(header, row, moved)
        _, new_units = _columns(header, units, moved)
        metrics = parse_raw_csv(_csv(new_header, new_units, new_row)).kernels[0].metrics
        assert (metrics[CYCLES].name, metrics[CYCLES].value, metrics[CYCLES].unit) == (
            CYCLES,
            6146460.575758,
            "cycle",
        )
        assert metrics[TPC_CYCLES].value == 6147496.621212


def test_an_empty_bare_cell_falls_back_to_the_prefixed_column():
    _, header, units, (row,) = _table(FULL_RAW)
    row = list(row)
    row[header.index(CYCLES)] = ""
    metrics = parse_raw_csv(_csv(header, units, row)).kernels[0].metrics
    assert metrics[CYCLES] is metrics[TPC_CYCLES]
    assert (metrics[CYCLES].name, metrics[CYCLES].value) == (TPC_CYCLES, 6147496.621212)
    # both empty: the bare name reads its own (unknown) column, never the prefixed one
    row[header.index(TPC_CYCLES)] = ""
    metrics = parse_raw_csv(_csv(header, units, row)).kernels[0].metrics
    assert (metrics[CYCLES].name, metrics[CYCLES].value, metrics[CYCLES].raw) == (CYCLES, None, "")


def test_without_a_bare_column_the_first_prefixed_column_with_a_value_wins():
    _, header, units, (row,) = _table(FULL_RAW)
    other = "TPC.Other." + CYCLES  # the bare column renamed: two prefixed copies, TPC_CYCLES first
    header = [other if name == CYCLES else name for name in header]
    metrics = parse_raw_csv(_csv(header, units, row)).kernels[0].metrics
    assert (metrics[CYCLES].name, metrics[CYCLES].value) == (TPC_CYCLES, 6147496.621212)
    row = list(row)
    row[header.index(TPC_CYCLES)] = ""
    metrics = parse_raw_csv(_csv(header, units, row)).kernels[0].metrics
    assert (metrics[CYCLES].name, metrics[CYCLES].value) == (other, 6146460.575758)


# ------------------------------------------------------------------------------------------ units row


def test_the_units_row_under_the_header_gives_the_units():
    metrics = parse_raw_csv(FULL_RAW).kernels[0].metrics
    dram = metrics[DRAM_READ]
    assert (dram.value, dram.unit, dram.raw, dram.raw_unit) == (33_562_112.0, "byte", "33.562112", "Mbyte")
    basic = parse_raw_csv(BASIC_RAW).kernels
    assert [k.id for k in basic] == [0]
    duration = basic[0].metrics[DURATION]
    assert (duration.value, duration.unit, duration.raw, duration.raw_unit) == (
        pytest.approx(3.133312, abs=1e-12),
        "ms",
        "3,133,312",
        "ns",
    )
    assert basic[0].duration_ms == pytest.approx(3.133312, abs=1e-12)


def test_a_first_row_that_is_a_kernel_is_not_taken_for_units():
    # the full raw page without its units row: the kernel stays a kernel, its values as printed, unitless
    _, header, _, (row,) = _table(FULL_RAW)
    report = parse_raw_csv(_csv(header, row))
    assert [k.id for k in report.kernels] == [0]
    kernel = report.kernels[0]
    assert kernel.name == "sgemm_naive(const float *, const float *, float *, int, int, int)"
    dram = kernel.metrics[DRAM_READ]
    assert (dram.value, dram.unit, dram.raw, dram.raw_unit) == (33.562112, "", "33.562112", "")
    assert (kernel.metrics[DURATION].value, kernel.metrics[DURATION].unit) == (3.140224, "")
    assert kernel.duration_ms is None  # a duration without its unit is not taken as milliseconds
    second = list(row)
    second[header.index("ID")] = "1"
    assert [k.id for k in parse_raw_csv(_csv(header, row, second)).kernels] == [0, 1]


def test_a_live_run_without_a_units_row_keeps_its_kernel():
    before, header, _, (row,) = _table(BASIC_RAW)
    assert "==PROF==" in before
    report = parse_raw_csv(_csv(header, row, before=before))
    assert [k.id for k in report.kernels] == [0]
    duration = report.kernels[0].metrics[DURATION]
    assert (duration.value, duration.unit, duration.raw_unit) == (3_133_312.0, "", "")
