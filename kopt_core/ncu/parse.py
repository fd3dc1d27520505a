"""Reading Nsight Compute's CSV pages into profile records.

``parse_raw_csv`` reads ``ncu --csv --page raw`` (a header row, a units row, one row per kernel);
``parse_details_csv`` reads the rule results of ``ncu --csv --page details``; ``attach_findings`` puts
the second onto the first.

What the readers tolerate
  * Anything that is not the CSV table: the profiled program's own output and ``==PROF==`` /
    ``==WARNING==`` / ``==ERROR==`` lines before, between or after the rows. The table starts at the
    first line that starts with ``"ID",`` and names ``"Kernel Name"``; after it only lines that start
    with a quote and parse to as many fields as the header are rows.
  * Numbers with and without thousands separators ("6,107,420.93", "3133312"). An empty cell, or one
    that is not a number ("No-CC", "(16, 16, 1)", "no data", "n/a"), has value None (unknown, never 0)
    and keeps its text in ``raw``.
  * Units that differ from report to report (ncu scales them to the size of the number): every value is
    converted to one unit per quantity, see ``normalise_unit``.
  * Section-prefixed columns ("FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed"):
    the metric is kept under its full column name and indexed under its bare ncu name as well.

Unit normalisation (``normalise_unit``)
  * time -> "ms": ns/nsecond, us/usecond, ms/msecond, s/second.
  * size -> "byte": byte; Kbyte, Mbyte, Gbyte, Tbyte, Pbyte and KB, MB, GB, TB are SI-decimal (x1e3 per
    step); Kibyte/KiB, Mibyte/MiB, ... are binary (x1024 per step). That ncu's "Kbyte" is 1e3 bytes is
    what the captured H200 reports show: the same launch printed "32.768 Kbyte" in one report and
    "32,768 byte" in the other (launch__shared_mem_config_size), and the 32 MiB PC-sampling buffer
    prints as "33.554432 Mbyte".
  * frequency -> "Hz": hz, Khz, Mhz, Ghz (any case), and cycle/nsecond, cycle/usecond, cycle/msecond,
    cycle/second (cycles per unit time).
  * rate -> "<quantity>/second": byte/s, Kbyte/s, ... Tbyte/s, Gbyte/second -> "byte/second";
    sector/ns -> "sector/second"; any count over a time.
  * "%" unchanged. Other compound units have a size or SI-prefixed count converted on either side
    ("Kbyte/block" -> "byte/block", "%/Kbyte" -> "%/byte"); the rest (inst/cycle, sector,
    register/thread, byte/sector, ...) are kept as printed. A count with an SI prefix ("Kinst",
    "Msector") becomes the bare count ("inst", "sector").

Several kernels: the aggregate (see ``aggregate_kernels``)
  ``ProfileReport.aggregate`` is one KernelProfile with id -1 and name "aggregate of N kernels"; its
  duration is the sum of the kernels' durations (None when any kernel's duration is unknown). Each
  metric is combined over the kernels that have a value for it (a kernel without it is left out, not
  counted as 0):
    * extensive counts are SUMMED: a metric whose name ends in ".sum", or whose unit is a count or an
      amount (byte, sector(s), inst, cycle, request, branches, warp, ms);
    * everything else (percentages, ratios, rates, frequencies, per-cycle and per-thread figures, and
      any unit not listed above) is the duration-weighted MEAN, sum(d_i * v_i) / sum(d_i); an unweighted
      mean when a kernel that has the metric has no known duration.
  A name that says it is a ratio wins over the unit: ".pct", ".ratio", ".max_rate", ".per_*",
  ".pct_of_peak_*", ".peak_sustained*" roll-ups and base names containing "_per_", "average" or ending
  in "_pct" are always averaged. Non-numeric metrics keep their text when every kernel printed the same.
  With a single kernel the aggregate is that kernel's profile with id -1.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

import attrs

from kopt_core.errors import ConfigError, HardwareError
from kopt_core.records.profile import KernelProfile, MetricValue, ProfileReport, RuleFinding

# Columns of the raw page that describe the launch rather than measure it.
IDENTITY_COLUMNS = frozenset(
    {
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
    }
)
DURATION_METRIC = "gpu__time_duration.sum"

# ---------------------------------------------------------------------------------------------- numbers

_NUMBER = re.compile(r"^[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def parse_number(text: str) -> float | None:
    """The number ncu printed, or None: empty, not a number, or not finite. Thousands separators
    ("6,107,420.93") are accepted only in groups of three, so "1,5" is not read as 15."""
    cell = text.strip()
    if not cell or not _NUMBER.match(cell):
        return None
    value = float(cell.replace(",", ""))
    return value if math.isfinite(value) else None


# ------------------------------------------------------------------------------------------------ units

_DECIMAL_PREFIX = {"K": 10**3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BINARY_PREFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}

_SECONDS: dict[str, Fraction] = {}
for _names, _seconds in (
    (("ns", "nsecond", "nseconds", "nsec"), Fraction(1, 10**9)),
    (("us", "usecond", "useconds", "usec", "\u00b5s", "\u03bcs"), Fraction(1, 10**6)),
    (("ms", "msecond", "mseconds", "msec"), Fraction(1, 10**3)),
    (("s", "second", "seconds", "sec"), Fraction(1)),
):
    for _name in _names:
        _SECONDS[_name] = _seconds

_BYTES: dict[str, Fraction] = {"byte": Fraction(1), "bytes": Fraction(1)}
for _p, _f in _DECIMAL_PREFIX.items():
    _BYTES[f"{_p}byte"] = _BYTES[f"{_p}bytes"] = Fraction(_f)
    _BYTES[f"{_p.upper()}B"] = Fraction(_f)
for _p, _f in _BINARY_PREFIX.items():
    _BYTES[f"{_p}byte"] = _BYTES[f"{_p}bytes"] = _BYTES[f"{_p}B"] = Fraction(_f)

_HERTZ = {
    "hz": Fraction(1),
    "khz": Fraction(10**3),
    "mhz": Fraction(10**6),
    "ghz": Fraction(10**9),
    "thz": Fraction(10**12),
}

# Count units ncu may print with an SI prefix when it scales a large number ("Kinst", "Msector").
_COUNTS = frozenset(
    {
        "inst",
        "sector",
        "sectors",
        "cycle",
        "cycles",
        "request",
        "requests",
        "warp",
        "warps",
        "thread",
        "threads",
        "block",
        "blocks",
        "branches",
        "wavefront",
        "wavefronts",
        "pass",
        "sample",
        "register",
    }
)


def _quantity(text: str) -> tuple[str, Fraction] | None:
    """A size or a (possibly SI-prefixed) count, in its base unit; None for anything else."""
    if text in _BYTES:
        return "byte", _BYTES[text]
    if text in _COUNTS:
        return text, Fraction(1)
    if len(text) > 1 and text[0] in _DECIMAL_PREFIX and text[1:] in _COUNTS:
        return text[1:], Fraction(_DECIMAL_PREFIX[text[0]])
    return None


def _normalise(raw_unit: str) -> tuple[str, Fraction]:
    unit = raw_unit.strip()
    if not unit or unit == "%":
        return unit, Fraction(1)
    if unit in _SECONDS:
        return "ms", _SECONDS[unit] * 1000
    if unit.lower() in _HERTZ:
        return "Hz", _HERTZ[unit.lower()]
    simple = _quantity(unit)
    if simple is not None:
        return simple
    if unit.count("/") == 1:
        top, bottom = (part.strip() for part in unit.split("/"))
        if bottom in _SECONDS:
            if top in ("cycle", "cycles"):
                return "Hz", 1 / _SECONDS[bottom]
            top_unit, top_factor = _quantity(top) or (top, Fraction(1))
            return f"{top_unit}/second", top_factor / _SECONDS[bottom]
        top_unit, top_factor = _quantity(top) or (top, Fraction(1))
        bottom_unit, bottom_factor = _quantity(bottom) or (bottom, Fraction(1))
        return f"{top_unit}/{bottom_unit}", top_factor / bottom_factor
    return unit, Fraction(1)


def normalise_unit(raw_unit: str) -> tuple[str, float]:
    """(kopt's unit, the factor a printed value is multiplied by), e.g. "usecond" -> ("ms", 1e-3),
    "Tbyte/s" -> ("byte/second", 1e12), "cycle/nsecond" -> ("Hz", 1e9), "inst/cycle" -> ("inst/cycle", 1).
    The rules are in this module's docstring."""
    unit, factor = _normalise(raw_unit)
    return unit, float(factor)


def normalise(value: float | None, raw_unit: str) -> tuple[float | None, str]:
    """A printed value and its unit in kopt's units; None stays None."""
    unit, factor = _normalise(raw_unit)
    if value is None:
        return None, unit
    if factor == 1:
        return float(value), unit
    # numerator then denominator: one rounding for "3,133,312 ns" -> 3.133312 ms, not two
    return value * factor.numerator / factor.denominator, unit


# ------------------------------------------------------------------------------------------ metric names


def bare_metric_name(column: str) -> str:
    """The ncu metric name inside a column name: from the first dot-separated token that contains "__"
    ("FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed" ->
    "dramc__throughput.avg.pct_of_peak_sustained_elapsed"); a name without such a token is its own."""
    parts = column.split(".")
    for index, part in enumerate(parts):
        if "__" in part:
            return ".".join(parts[index:])
    return column


def _is_metric_column(column: str) -> bool:
    return column not in IDENTITY_COLUMNS and " " not in column and column != ""


# ------------------------------------------------------------------------------------------- CSV tables


def _balanced(text: str) -> bool:
    return text.count('"') % 2 == 0


def _fields(record: str) -> list[str]:
    return next(csv.reader(io.StringIO(record)), [])


def _is_header(line: str) -> bool:
    return line.lstrip().startswith('"ID",') and '"Kernel Name"' in line


def _read_table(text: str, what: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the CSV table in ``text``, skipping everything around it."""
    lines = text.splitlines()
    start = next((index for index, line in enumerate(lines) if _is_header(line)), None)
    if start is None:
        raise HardwareError(
            f'ncu report has no kernels: no CSV header (a line starting with "ID", naming "Kernel Name") '
            f"in {what}",
            hint="was anything profiled? check the ncu log for ==ERROR== lines and the kernel filter",
        )
    header = _fields(lines[start].strip())
    width = len(header)
    rows: list[list[str]] = []
    pending: str | None = None

    def take(record: str) -> None:
        fields = _fields(record)
        if len(fields) == width and fields != header:
            rows.append(fields)

    for line in lines[start + 1 :]:
        line = line.rstrip("\r")
        stripped = line.strip()
        if pending is not None:
            # a line that is a whole row by itself ends a record that never closed (stray output)
            if stripped.startswith('"') and _balanced(stripped) and len(_fields(stripped)) == width:
                pending = None
            else:
                pending += "\n" + line
                if _balanced(pending):
                    take(pending)
                    pending = None
                continue
        if not stripped.startswith('"'):
            continue  # program output, ==PROF== / ==WARNING== / ==ERROR== lines
        if _balanced(stripped):
            take(stripped)
        else:
            pending = stripped  # a quoted cell that spans lines
    return header, rows


# -------------------------------------------------------------------------------------------- raw page


def parse_raw_csv(text: str, source: str = "") -> ProfileReport:
    """The ``--page raw`` CSV as a ProfileReport: one KernelProfile per kernel row and their aggregate.

    Raises HardwareError ("ncu report has no kernels: ...") when there is no header row or no kernel row.
    """
    what = source or "the ncu output"
    header, rows = _read_table(text, what)
    id_col = header.index("ID")
    units: list[str] = [""] * len(header)
    if rows and rows[0][id_col].strip() == "":
        units = rows[0]
        rows = rows[1:]
    rows = [row for row in rows if row[id_col].strip() != ""]
    if not rows:
        raise HardwareError(
            f"ncu report has no kernels: the CSV in {what} has a header but no kernel rows",
            hint="the kernel filter matched nothing, or the profiled range launched no kernel",
        )

    columns = [
        (index, name, bare_metric_name(name)) for index, name in enumerate(header) if _is_metric_column(name)
    ]
    # candidates for each bare name: the unprefixed column first, then prefixed ones in column order
    candidates: dict[str, list[int]] = {}
    for index, name, bare in columns:
        candidates.setdefault(bare, [])
        if name == bare:
            candidates[bare].insert(0, index)
        else:
            candidates[bare].append(index)

    def cell(row: list[str], column: str) -> str:
        return row[header.index(column)].strip() if column in header else ""

    kernels = []
    for position, row in enumerate(rows):
        values: dict[int, MetricValue] = {}
        for index, name, _bare in columns:
            raw, raw_unit = row[index].strip(), units[index].strip()
            value, unit = normalise(parse_number(raw), raw_unit)
            values[index] = MetricValue(name=name, value=value, unit=unit, raw=raw, raw_unit=raw_unit)
        metrics: dict[str, MetricValue] = {}
        for bare, indexes in candidates.items():
            chosen = next((i for i in indexes if values[i].value is not None), indexes[0])
            metrics[bare] = values[chosen]
        for index, name, bare in columns:
            if name != bare:
                metrics[name] = values[index]
        duration = metrics.get(DURATION_METRIC)
        duration_ms = duration.value if duration is not None and duration.unit == "ms" else None
        kernel_id = parse_number(row[id_col])
        kernels.append(
            KernelProfile(
                id=int(kernel_id) if kernel_id is not None else position,
                name=cell(row, "Kernel Name"),
                duration_ms=duration_ms,
                grid=cell(row, "Grid Size"),
                block=cell(row, "Block Size"),
                metrics=metrics,
            )
        )
    return ProfileReport(kernels=tuple(kernels), aggregate=aggregate_kernels(kernels), source=source)


RAW_PAGE_HELP = (
    'a raw page has one row per kernel: a header "ID","Process ID",...,"Kernel Name",... then one column '
    'per metric ("gpu__time_duration.sum", ...); export one with '
    "`ncu --import report.ncu-rep --csv --page raw > raw.csv`"
)
_DETAILS_COLUMNS = frozenset({"Section Name", "Metric Name", "Metric Value"})


def parse_imported_csv(text: str, source: str = "") -> ProfileReport:
    """A raw-page CSV a user gives (``kopt profile --import``) as a ProfileReport. Anything else (empty,
    binary, a foreign CSV, a details page, a truncated export, no metric with a number) is bad input: a
    ConfigError (exit 4) saying what a raw page looks like and how to export one. (``parse_raw_csv``'s
    HardwareError stays for ncu's own output, where no kernel row means the profiling went wrong.)"""
    what = source or "the CSV"

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{what} is not the raw page of an ncu report: {why}", hint=RAW_PAGE_HELP)

    if not text.strip():
        raise bad("it is empty")
    head = text[:4096]
    if "\x00" in head or head.count("\ufffd") > len(head) // 100:
        raise bad("it is binary, not CSV text (an .ncu-rep report? import that file as it is)")
    header_line = next((line for line in text.splitlines() if _is_header(line)), None)
    if header_line is None:
        raise bad('it has no header row starting with "ID" and naming "Kernel Name"')
    header = _fields(header_line.strip())
    if _DETAILS_COLUMNS <= set(header):
        raise bad(
            "it is a details page (one row per metric: Section Name, Metric Name, Metric Value); kopt "
            "reads the raw page (one row per kernel, one column per metric)"
        )
    if not any(_is_metric_column(column) for column in header):
        raise bad("its header names no metric column")
    try:
        report = parse_raw_csv(text, source=source)
    except HardwareError:
        raise bad("it has a header but no complete kernel row (is it truncated?)") from None
    if not any(m.value is not None for kernel in report.kernels for m in kernel.metrics.values()):
        raise bad("no metric column holds a number")
    return report


# ------------------------------------------------------------------------------------------- aggregate

_EXTENSIVE_UNITS = frozenset(
    {"byte", "sector", "sectors", "inst", "cycle", "request", "branches", "warp", "ms"}
)


def is_extensive(name: str, unit: str) -> bool:
    """True when the metric is a count or amount that adds up across kernels (see the module docstring);
    False for percentages, ratios, rates and everything else, which are averaged."""
    bare = bare_metric_name(name)
    base, *rollups = bare.split(".")
    if unit == "%" or unit == "Hz" or "/" in unit:
        return False
    for part in rollups:
        if part in ("pct", "ratio", "max_rate") or part.startswith(("per_", "pct_of_peak", "peak_sustained")):
            return False
    if base.endswith("_pct") or "_per_" in base or "average" in base:
        return False
    if rollups and rollups[-1] == "sum":
        return True
    return unit in _EXTENSIVE_UNITS


def _combine(key: str, kernels: list[KernelProfile]) -> MetricValue:
    having = [(kernel, kernel.metrics[key]) for kernel in kernels if key in kernel.metrics]
    first = having[0][1]
    known = [(kernel.duration_ms, metric.value) for kernel, metric in having if metric.value is not None]
    if not known:
        raws = {metric.raw for _, metric in having}
        return MetricValue(
            name=first.name,
            value=None,
            unit=first.unit,
            raw=raws.pop() if len(raws) == 1 else "",
            raw_unit=first.raw_unit,
        )
    if is_extensive(first.name, first.unit):
        value = math.fsum(v for _, v in known)
    else:
        weighted = [(d, v) for d, v in known if d is not None and d > 0]
        if len(weighted) == len(known):  # every kernel has a positive duration
            value = math.fsum(d * v for d, v in weighted) / math.fsum(d for d, _ in weighted)
        else:
            value = math.fsum(v for _, v in known) / len(known)
    return MetricValue(name=first.name, value=value, unit=first.unit, raw="", raw_unit=first.raw_unit)


def aggregate_kernels(kernels: Iterable[KernelProfile]) -> KernelProfile | None:
    """The aggregate KernelProfile (id -1) of ``kernels``; None when there are none.
    Rules: module docstring."""
    kernels = list(kernels)
    if not kernels:
        return None
    if len(kernels) == 1:
        return attrs.evolve(kernels[0], id=-1)
    keys: dict[str, None] = {}
    for kernel in kernels:
        keys.update(dict.fromkeys(kernel.metrics))
    durations = [kernel.duration_ms for kernel in kernels if kernel.duration_ms is not None]
    grids = {kernel.grid for kernel in kernels}
    blocks = {kernel.block for kernel in kernels}
    return KernelProfile(
        id=-1,
        name=f"aggregate of {len(kernels)} kernels",
        duration_ms=math.fsum(durations) if len(durations) == len(kernels) else None,
        grid=grids.pop() if len(grids) == 1 else "",
        block=blocks.pop() if len(blocks) == 1 else "",
        metrics={key: _combine(key, kernels) for key in keys},
        findings=tuple(finding for kernel in kernels for finding in kernel.findings),
    )


# ---------------------------------------------------------------------------------------- details page


def parse_details_csv(text: str) -> dict[int, list[RuleFinding]]:
    """The rule results of the ``--page details`` CSV, per kernel ID (every kernel in the page has an
    entry, [] when no rule fired). A rule row is one with a "Rule Name"; its "Rule Type" (OPT, WRN, INF,
    ...) is the finding's kind, "Rule Description" its message and "Estimated Speedup" its estimated
    speedup in percent (None when empty). Metric rows (no rule name) are skipped.

    Raises HardwareError when there is no header row or no kernel row.
    """
    header, rows = _read_table(text, "the ncu details page")
    column = {name: index for index, name in enumerate(header)}
    rows = [row for row in rows if row[column["ID"]].strip() != ""]
    if not rows:
        raise HardwareError("ncu report has no kernels: the details page has a header but no kernel rows")

    def get(row: list[str], name: str) -> str:
        return row[column[name]].strip() if name in column else ""

    findings: dict[int, list[RuleFinding]] = {}
    for row in rows:
        kernel_id = parse_number(get(row, "ID"))
        if kernel_id is None:
            continue
        found = findings.setdefault(int(kernel_id), [])
        rule = get(row, "Rule Name")
        if not rule:
            continue
        found.append(
            RuleFinding(
                section=get(row, "Section Name"),
                rule=rule,
                kind=get(row, "Rule Type"),
                message=get(row, "Rule Description"),
                estimated_speedup_pct=parse_number(get(row, "Estimated Speedup")),
            )
        )
    return findings


def attach_findings(report: ProfileReport, findings: Mapping[int, Iterable[RuleFinding]]) -> ProfileReport:
    """``report`` with each kernel's findings set from ``findings`` (by kernel ID; a kernel not in it keeps
    its own), and the aggregate rebuilt so it carries every kernel's findings."""
    kernels = [
        attrs.evolve(kernel, findings=tuple(findings[kernel.id])) if kernel.id in findings else kernel
        for kernel in report.kernels
    ]
    if report.aggregate is None or len(kernels) == 1:
        aggregate = aggregate_kernels(kernels)
    else:
        aggregate = attrs.evolve(
            report.aggregate, findings=tuple(finding for kernel in kernels for finding in kernel.findings)
        )
    return attrs.evolve(report, kernels=tuple(kernels), aggregate=aggregate)
