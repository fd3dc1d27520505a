"""Reading ncu's CSV pages (kopt_core.ncu.parse) on real H200 reports and synthetic variants of them."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from kopt_core.errors import EXIT_HARDWARE, HardwareError
from kopt_core.ncu.parse import (
    aggregate_kernels,
    attach_findings,
    bare_metric_name,
    is_extensive,
    normalise,
    normalise_unit,
    parse_details_csv,
    parse_number,
    parse_raw_csv,
)

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
FULL_RAW = H200 / "naive_full_raw.csv"
BASIC_RAW = H200 / "naive_basic_raw.csv"
FULL_DETAILS = H200 / "naive_full_details.csv"

SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
L1_HIT = "l1tex__t_sector_hit_rate.pct"
BANK_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"


@pytest.fixture(scope="module")
def full():
    return parse_raw_csv(FULL_RAW.read_text(), source=str(FULL_RAW))


@pytest.fixture(scope="module")
def basic():
    return parse_raw_csv(BASIC_RAW.read_text(), source=str(BASIC_RAW))


# ------------------------------------------------------------------------------------ the full raw page


def test_full_raw_kernel_identity(full):
    assert full.source == str(FULL_RAW)
    assert len(full.kernels) == 1
    kernel = full.kernels[0]
    assert kernel.id == 0
    assert kernel.name == "sgemm_naive(const float *, const float *, float *, int, int, int)"
    assert kernel.grid == "(128, 128, 1)"
    assert kernel.block == "(16, 16, 1)"
    # identity columns are not metrics
    assert "Kernel Name" not in kernel.metrics and "ID" not in kernel.metrics


def test_full_raw_known_values(full):
    kernel = full.kernels[0]
    assert kernel.duration_ms == pytest.approx(3.140224, abs=1e-12)
    duration = kernel.metrics[DURATION]
    assert (duration.value, duration.unit, duration.raw, duration.raw_unit) == (
        pytest.approx(3.140224),
        "ms",
        "3.140224",
        "ms",
    )
    # printed as 65.540318 / 98.344936 (the fixture README rounds them to 65.54 / 98.34)
    assert kernel.metrics[SM].value == pytest.approx(65.540318, abs=1e-9)
    assert kernel.metrics[SM].unit == "%"
    assert round(kernel.metrics[SM].value, 2) == 65.54
    assert kernel.metrics[MEM].value == pytest.approx(98.344936, abs=1e-9)
    assert round(kernel.metrics[MEM].value, 2) == 98.34
    registers = kernel.metrics["launch__registers_per_thread"]
    assert registers.value == 32 and registers.unit == "register/thread"


def test_full_raw_units_are_normalised(full):
    metrics = full.kernels[0].metrics
    # Kbyte/block -> byte/block; Mbyte -> byte; Tbyte/s -> byte/second; Ghz -> Hz; us -> ms; %/Kbyte -> %/byte
    assert (metrics["launch__shared_mem_per_block"].value, metrics["launch__shared_mem_per_block"].unit) == (
        pytest.approx(1024.0),
        "byte/block",
    )
    assert (metrics[DRAM_READ].value, metrics[DRAM_READ].unit) == (pytest.approx(33_562_112.0), "byte")
    read_rate = metrics["l1tex__m_xbar2l1tex_read_bytes.sum.per_second"]
    assert (read_rate.value, read_rate.unit, read_rate.raw_unit) == (
        pytest.approx(1.324671e12),
        "byte/second",
        "Tbyte/s",
    )
    assert (metrics["dram__bytes.sum.per_second"].value, metrics["dram__bytes.sum.per_second"].unit) == (
        pytest.approx(14.424e9),
        "byte/second",
    )
    clock = metrics["dram__cycles_elapsed.avg.per_second"]
    assert (clock.value, clock.unit, clock.raw_unit) == (pytest.approx(3.199463e9), "Hz", "Ghz")
    assert metrics["lts__lts2xbar_cycles_active.avg.per_second"].value == pytest.approx(435.374342e6)  # Mhz
    interval = metrics["profiler__pmsampler_interval_time"]
    assert (interval.value, interval.unit) == (pytest.approx(0.0015), "ms")
    per_kbyte = metrics["derived__pct_occupancy_per_shared_mem_size"]
    assert (per_kbyte.value, per_kbyte.unit) == (pytest.approx(0.002614), "%/byte")
    sectors_per_ns = metrics["lts__t_sectors.sum.per_second"]
    assert (sectors_per_ns.value, sectors_per_ns.unit) == (pytest.approx(41.513211e9), "sector/second")
    # units ncu prints that kopt keeps
    assert metrics["sm__inst_executed.avg.per_cycle_active"].unit == "inst/cycle"
    assert metrics["smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"].unit == "byte/sector"


def test_full_raw_thousands_separators_and_text_cells(full):
    metrics = full.kernels[0].metrics
    assert metrics["launch__occupancy_per_register_count"].value == 5504  # printed "5,504"
    assert metrics["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"].value == 536_870_912  # "536,870,912"
    name = metrics["device__attribute_display_name"]
    assert (name.value, name.raw) == (None, "NVIDIA H200")
    no_data = metrics["sass__inst_executed_register_spilling_mem_local"]
    assert (no_data.value, no_data.raw, no_data.unit) == (None, "no data", "inst")


def test_full_raw_section_prefixed_columns(full):
    metrics = full.kernels[0].metrics
    # only present with a section prefix: indexed under the bare ncu name too, keeping the full column name
    bare = "dramc__throughput.avg.pct_of_peak_sustained_elapsed"
    prefixed = "FBSP.TriageCompute." + bare
    assert metrics[bare] is metrics[prefixed]
    assert metrics[bare].name == prefixed
    assert metrics[bare].value is None and metrics[bare].raw == ""  # an empty cell is unknown, never 0
    # present both ways: the bare name is the unprefixed column (the prefixed one is empty here)
    assert metrics[L1_HIT].name == L1_HIT
    assert metrics[L1_HIT].value == pytest.approx(87.845526)
    assert metrics["SM_B.TriageCompute." + L1_HIT].value is None
    # a prefixed column that has a value
    wavefronts = metrics["SM_A.TriageCompute.l1tex__throughput.avg.pct_of_peak_sustained_elapsed"]
    assert wavefronts.name.startswith("SM_A.TriageCompute.")


def test_bare_metric_name():
    assert bare_metric_name("FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed") == (
        "dramc__throughput.avg.pct_of_peak_sustained_elapsed"
    )
    assert bare_metric_name("sm__throughput.avg.pct_of_peak_sustained_elapsed") == (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    )
    assert (
        bare_metric_name("derived__lts__lts2xbar_bytes.sum.per_second")
        == "derived__lts__lts2xbar_bytes.sum.per_second"
    )
    assert bare_metric_name("inst_executed") == "inst_executed"


# ----------------------------------------------------------------------------------- the basic raw page


def test_basic_raw_skips_program_output(basic):
    text = BASIC_RAW.read_text()
    assert "==PROF==" in text and "relerr" in text  # the fixture really is mixed stdout
    assert len(basic.kernels) == 1
    assert basic.kernels[0].name.startswith("sgemm_naive(")


def test_basic_raw_thousands_separators_and_duration_in_ms(basic):
    kernel = basic.kernels[0]
    duration = kernel.metrics[DURATION]
    assert (duration.raw, duration.raw_unit) == ("3,133,312", "ns")
    assert kernel.duration_ms == pytest.approx(3.133312, abs=1e-12)
    assert duration.unit == "ms"
    cycles = kernel.metrics["gpc__cycles_elapsed.avg"]
    assert (cycles.raw, cycles.value, cycles.unit) == ("6,202,361.12", pytest.approx(6202361.12), "cycle")
    clock = kernel.metrics["dram__cycles_elapsed.avg.per_second"]
    assert (clock.raw, clock.raw_unit, clock.value, clock.unit) == (
        "3,199,456,677.15",
        "hz",
        pytest.approx(3_199_456_677.15),
        "Hz",
    )
    assert kernel.metrics[SM].value == pytest.approx(65.62)
    assert kernel.metrics[MEM].value == pytest.approx(98.47)
    assert kernel.metrics["device__attribute_confidential_computing_mode"].value is None
    assert kernel.metrics["device__attribute_confidential_computing_mode"].raw == "No-CC"


def test_same_quantity_printed_in_different_units_reads_the_same(full, basic):
    """Kbyte is SI-decimal: 32.768 Kbyte (full report) == 32,768 byte (basic report)."""
    f, b = full.kernels[0].metrics, basic.kernels[0].metrics
    for name in (
        "launch__shared_mem_config_size",
        "launch__shared_mem_per_block",
        "launch__persisting_l2_cache_size",
    ):
        assert f[name].raw_unit != b[name].raw_unit, name
        assert f[name].unit == b[name].unit, name
        assert f[name].value == pytest.approx(b[name].value), name
    assert f["launch__shared_mem_config_size"].value == pytest.approx(32768.0)


# ---------------------------------------------------------------------------------------- units, numbers


@pytest.mark.parametrize(
    "raw, unit, factor",
    [
        ("ns", "ms", 1e-6),
        ("nsecond", "ms", 1e-6),
        ("us", "ms", 1e-3),
        ("usecond", "ms", 1e-3),
        ("ms", "ms", 1.0),
        ("msecond", "ms", 1.0),
        ("s", "ms", 1e3),
        ("second", "ms", 1e3),
        ("byte", "byte", 1.0),
        ("Kbyte", "byte", 1e3),
        ("Mbyte", "byte", 1e6),
        ("Gbyte", "byte", 1e9),
        ("Tbyte", "byte", 1e12),
        ("KB", "byte", 1e3),
        ("MB", "byte", 1e6),
        ("Kibyte", "byte", 1024.0),
        ("KiB", "byte", 1024.0),
        ("Mibyte", "byte", 1024.0**2),
        ("byte/s", "byte/second", 1.0),
        ("Mbyte/s", "byte/second", 1e6),
        ("Gbyte/s", "byte/second", 1e9),
        ("Tbyte/s", "byte/second", 1e12),
        ("Gbyte/second", "byte/second", 1e9),
        ("Kbyte/usecond", "byte/second", 1e9),
        ("hz", "Hz", 1.0),
        ("Khz", "Hz", 1e3),
        ("Mhz", "Hz", 1e6),
        ("Ghz", "Hz", 1e9),
        ("GHz", "Hz", 1e9),
        ("cycle/nsecond", "Hz", 1e9),
        ("cycle/usecond", "Hz", 1e6),
        ("cycle/ns", "Hz", 1e9),
        ("cycle/second", "Hz", 1.0),
        ("sector/ns", "sector/second", 1e9),
        ("sector/ms", "sector/second", 1e3),
        ("%", "%", 1.0),
        ("", "", 1.0),
        ("inst/cycle", "inst/cycle", 1.0),
        ("sector", "sector", 1.0),
        ("register/thread", "register/thread", 1.0),
        ("byte/sector", "byte/sector", 1.0),
        ("Kbyte/block", "byte/block", 1e3),
        ("Kbyte/cycle", "byte/cycle", 1e3),
        ("%/Kbyte", "%/byte", 1e-3),
        ("Kinst", "inst", 1e3),
        ("Msector", "sector", 1e6),
        ("warp", "warp", 1.0),
        ("furlong/fortnight", "furlong/fortnight", 1.0),
    ],
)
def test_normalise_unit(raw, unit, factor):
    got_unit, got_factor = normalise_unit(raw)
    assert got_unit == unit
    assert got_factor == pytest.approx(factor, rel=1e-15)


def test_normalise_value_rounds_once():
    assert normalise(3133312.0, "ns") == (3.133312, "ms")
    assert normalise(1.5, "usecond") == (0.0015, "ms")
    assert normalise(None, "Mbyte") == (None, "byte")
    assert normalise(2.0, "Gbyte/second") == (2e9, "byte/second")


@pytest.mark.parametrize(
    "text, value",
    [
        ("6,107,420.93", 6107420.93),
        ("3,133,312", 3133312.0),
        ("3133312", 3133312.0),
        ("0", 0.0),
        ("-12.5", -12.5),
        ("1.5e3", 1500.0),
        (".25", 0.25),
        (" 42 ", 42.0),
        ("", None),
        ("  ", None),
        ("No-CC", None),
        ("(16, 16, 1)", None),
        ("no data", None),
        ("n/a", None),
        ("nan", None),
        ("inf", None),
        ("1,5", None),
        ("12,34,567", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


# ------------------------------------------------------------------------------ tolerance, failures


def _table(path: Path) -> tuple[list[str], list[str], list[str]]:
    """header, units and the first kernel row of a raw-page fixture."""
    text = path.read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return rows[0], rows[1], rows[2]


def _csv(*rows: list[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for row in rows:
        writer.writerow(row)
    return out.getvalue()


def test_noise_between_and_after_rows_is_skipped():
    header, units, row = _table(FULL_RAW)
    second = list(row)
    second[header.index("ID")] = "1"
    text = (
        "==PROF== Connected to process 1\nsome program output, with, commas\n"
        + _csv(header, units)
        + '==WARNING== a "quoted word" in a warning\n'
        + _csv(row)
        + '"an odd "quoted line from the program\nplain output\n'
        + _csv(second)
        + "==ERROR== something after the table\n==PROF== Disconnected from process 1\n"
    )
    report = parse_raw_csv(text)
    assert [kernel.id for kernel in report.kernels] == [0, 1]
    assert all(kernel.duration_ms == pytest.approx(3.140224) for kernel in report.kernels)


def test_no_header_is_a_hardware_error():
    with pytest.raises(HardwareError, match="ncu report has no kernels") as caught:
        parse_raw_csv(
            "==PROF== Connected to process 1\n==ERROR== no kernels were profiled\n", source="run.log"
        )
    assert caught.value.exit_code == EXIT_HARDWARE == 3
    assert "run.log" in str(caught.value)
    with pytest.raises(HardwareError, match="ncu report has no kernels"):
        parse_raw_csv("")


def test_header_without_kernel_rows_is_a_hardware_error():
    header, units, _ = _table(FULL_RAW)
    with pytest.raises(HardwareError, match="ncu report has no kernels"):
        parse_raw_csv(_csv(header, units) + "==PROF== Disconnected\n")
    with pytest.raises(HardwareError, match="ncu report has no kernels"):
        parse_raw_csv(_csv(header))


def test_missing_duration_is_unknown():
    header, units, row = _table(FULL_RAW)
    row = list(row)
    row[header.index(DURATION)] = ""
    kernel = parse_raw_csv(_csv(header, units, row)).kernels[0]
    assert kernel.duration_ms is None
    assert kernel.metrics[DURATION].value is None


# ------------------------------------------------------------------------------ several kernels: aggregate

THREE = [
    # id, name, duration (ms as printed), sm %, dram read (Mbyte), l1 hit % ("" = not measured), conflicts
    ("0", "gemm_main", "2.000000", "80.000000", "10.000000", "50.000000", "3"),
    ("1", "gemm_reduce", "0.500000", "20.000000", "1.000000", "", "1,000"),
    ("2", "gemm_epilogue", "1.500000", "40.000000", "4.500000", "90.000000", "7"),
]


def _three_kernel_report():
    header, units, row = _table(FULL_RAW)
    assert units[header.index(DURATION)] == "ms" and units[header.index(DRAM_READ)] == "Mbyte"
    rows = []
    for kernel_id, name, duration, sm, dram, hit, conflicts in THREE:
        copy = list(row)
        for column, value in (
            ("ID", kernel_id),
            ("Kernel Name", name),
            (DURATION, duration),
            (SM, sm),
            (DRAM_READ, dram),
            (L1_HIT, hit),
            (BANK_CONFLICTS, conflicts),
        ):
            copy[header.index(column)] = value
        rows.append(copy)
    return parse_raw_csv(_csv(header, units, *rows), source="three kernels")


def test_three_kernels_are_read_separately():
    report = _three_kernel_report()
    assert [k.id for k in report.kernels] == [0, 1, 2]
    assert [k.name for k in report.kernels] == ["gemm_main", "gemm_reduce", "gemm_epilogue"]
    assert [k.duration_ms for k in report.kernels] == [2.0, 0.5, 1.5]
    assert report.kernels[1].metrics[L1_HIT].value is None
    assert report.kernels[1].metrics[BANK_CONFLICTS].value == 1000


def test_aggregate_of_three_kernels():
    aggregate = _three_kernel_report().aggregate
    assert aggregate.id == -1
    assert aggregate.name == "aggregate of 3 kernels"
    assert aggregate.grid == "(128, 128, 1)" and aggregate.block == "(16, 16, 1)"  # the same in every kernel
    # duration: the sum
    assert aggregate.duration_ms == pytest.approx(4.0, abs=1e-12)
    assert aggregate.metrics[DURATION].value == pytest.approx(4.0, abs=1e-12)
    # a % metric: the duration-weighted mean
    assert aggregate.metrics[SM].value == pytest.approx((2.0 * 80 + 0.5 * 20 + 1.5 * 40) / 4.0, abs=1e-12)
    assert aggregate.metrics[SM].value == pytest.approx(57.5, abs=1e-12)
    assert aggregate.metrics[SM].unit == "%"
    # a ".sum" count in bytes: the sum
    assert aggregate.metrics[DRAM_READ].value == pytest.approx((10.0 + 1.0 + 4.5) * 1e6, abs=1e-6)
    assert aggregate.metrics[DRAM_READ].unit == "byte"
    # a ".sum" count without a unit: the sum
    assert aggregate.metrics[BANK_CONFLICTS].value == 1010
    # a metric one kernel lacks: over the kernels that have it, weighted by their durations
    assert aggregate.metrics[L1_HIT].value == pytest.approx((2.0 * 50 + 1.5 * 90) / 3.5, abs=1e-12)
    # text metrics that every kernel printed alike keep their text
    assert aggregate.metrics["device__attribute_display_name"].raw == "NVIDIA H200"


def test_aggregate_without_durations_is_an_unweighted_mean():
    report = _three_kernel_report()
    import attrs

    kernels = [attrs.evolve(k, duration_ms=None) if k.id == 1 else k for k in report.kernels]
    aggregate = aggregate_kernels(kernels)
    assert aggregate.duration_ms is None  # one kernel's duration is unknown: so is the total
    assert aggregate.metrics[SM].value == pytest.approx((80 + 20 + 40) / 3, abs=1e-12)


def test_aggregate_of_one_kernel_is_that_kernel(full):
    kernel, aggregate = full.kernels[0], full.aggregate
    assert aggregate.id == -1
    assert aggregate.name == kernel.name
    assert aggregate.duration_ms == kernel.duration_ms
    assert aggregate.metrics == kernel.metrics
    assert aggregate_kernels([]) is None


@pytest.mark.parametrize(
    "name, unit, extensive",
    [
        ("gpu__time_duration.sum", "ms", True),
        ("dram__bytes_read.sum", "byte", True),
        ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "", True),
        ("sm__cycles_active.avg", "cycle", True),
        ("smsp__inst_executed.avg", "inst", True),
        ("smsp__pcsamp_warps_issue_stalled_long_scoreboard", "warp", True),
        ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", False),
        ("dram__bytes_read.sum.pct_of_peak_sustained_elapsed", "%", False),
        ("dram__bytes.sum.per_second", "byte/second", False),
        ("dram__cycles_elapsed.avg.per_second", "Hz", False),
        ("sm__inst_executed.avg.per_cycle_active", "inst/cycle", False),
        ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "inst", False),
        ("smsp__average_warp_latency_per_inst_issued.ratio", "cycle", False),
        ("sm__warps_active.avg.per_cycle_active", "warp", False),
        ("smsp__warps_active.sum.peak_sustained", "warp", False),
        ("sm__maximum_warps_avg_per_active_cycle", "warp", False),
        ("launch__registers_per_thread", "register/thread", False),
        ("launch__grid_size", "", False),
        ("launch__occupancy_cluster_pct", "%", False),
        ("FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed", "%", False),
        ("SM_B.TriageCompute.l1tex__t_sectors.sum", "sector", True),
    ],
)
def test_is_extensive(name, unit, extensive):
    assert is_extensive(name, unit) is extensive


# --------------------------------------------------------------------------------------- details page


def test_details_findings():
    findings = parse_details_csv(FULL_DETAILS.read_text())
    assert list(findings) == [0]
    found = findings[0]
    assert len(found) == 8
    opt = [f for f in found if f.kind == "OPT"]
    assert {f.rule for f in opt} >= {"MemoryCacheAccessPattern", "CPIStall", "IssueSlotUtilization"}
    access = next(f for f in opt if f.rule == "MemoryCacheAccessPattern")
    assert access.section == "MemoryWorkloadAnalysis_Tables"
    assert access.estimated_speedup_pct == pytest.approx(43.03)
    assert "only 18.0 of the 32 bytes" in access.message
    stall = next(f for f in opt if f.rule == "CPIStall")
    assert "52.0%" in stall.message and stall.section == "WarpStateStats"
    for finding in found:
        assert finding.message and finding.rule and finding.section and finding.kind in {"OPT", "INF", "WRN"}
    info = [f for f in found if f.kind == "INF"]
    assert info and all(f.estimated_speedup_pct is None for f in info)


def test_attach_findings(full):
    findings = parse_details_csv(FULL_DETAILS.read_text())
    report = attach_findings(full, findings)
    assert report.kernels[0].findings == tuple(findings[0])
    assert report.aggregate.id == -1 and report.aggregate.findings == tuple(findings[0])
    assert report.kernels[0].metrics is full.kernels[0].metrics
    assert full.kernels[0].findings == ()  # records are frozen: the original is untouched
    # several kernels: each gets its own, the aggregate all of them
    three = _three_kernel_report()
    extra = {2: findings[0][:1], 0: findings[0][1:3]}
    attached = attach_findings(three, extra)
    assert [len(k.findings) for k in attached.kernels] == [2, 0, 1]
    assert attached.aggregate.findings == tuple(findings[0][1:3]) + tuple(findings[0][:1])
    assert attached.aggregate.metrics[SM].value == pytest.approx(57.5)


def test_details_with_noise_and_without_kernels():
    text = FULL_DETAILS.read_text()
    noisy = "==PROF== Connected\nprogram says hi\n" + text + "==PROF== Disconnected\n"
    assert parse_details_csv(noisy) == parse_details_csv(text)
    header = text.splitlines()[0]
    with pytest.raises(HardwareError, match="ncu report has no kernels"):
        parse_details_csv(header + "\n")
    with pytest.raises(HardwareError, match="ncu report has no kernels"):
        parse_details_csv("nothing was profiled\n")
