"""The metric registry (references/metric_registry.json) and the resolver (kopt_core.ncu.metrics)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kopt_core.errors import ConfigError
from kopt_core.ncu.metrics import (
    AXES,
    MetricRegistry,
    MetricSpec,
    Resolved,
    load_registry,
    resolve,
    resolve_metric,
    values,
    without_eventless_zeros,
)
from kopt_core.ncu.parse import parse_raw_csv
from kopt_core.records.profile import KernelProfile, MetricValue

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "h200"
REFERENCES = REPO / "kopt_core" / "references"
REGISTRY = REFERENCES / "metric_registry.json"
SCHEMA = REFERENCES / "schemas" / "v1" / "metric_registry.schema.json"

CORE_KEYS = (
    "sm_throughput_pct",
    "memory_throughput_pct",
    "duration_ms",
    "registers_per_thread",
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
    "dram_throughput_pct",
    "l1tex_throughput_pct",
    "l2_throughput_pct",
)
STALL_KEYS = (
    "warp_stall_long_scoreboard_pct",
    "warp_stall_lg_throttle_pct",
    "warp_stall_not_selected_pct",
    "warp_stall_wait_pct",
    "warp_stall_barrier_pct",
    "warp_stall_mio_throttle_pct",
    "warp_stall_math_pipe_throttle_pct",
    "warp_stall_short_scoreboard_pct",
)
# What the basic (light) set does not collect: these must come out unknown, never 0.
BASIC_UNKNOWN = (
    "ipc",
    "issued_ipc",
    "branch_efficiency_pct",
    "divergent_branches",
    "threads_per_inst",
    "inst_executed",
    "dram_bytes",
    "dram_read_bytes",
    "dram_write_bytes",
    "dram_bandwidth",
    "l1_hit_rate_pct",
    "l2_hit_rate_pct",
    "global_load_sectors_per_request",
    "global_load_efficiency_pct",
    "global_store_efficiency_pct",
    "global_load_sectors",
    "global_store_sectors",
    "global_atomic_sectors",
    "global_reduction_sectors",
    "global_rmw_sectors",
    "threads_pred_on_per_inst",
    "local_load_sectors",
    "local_store_sectors",
    "uncoalesced_excess_sectors",
    "shared_bank_conflicts",
    "shared_excess_wavefronts",
    "register_spill_insts",
    "eligible_warps_per_scheduler",
    "active_warps_per_scheduler",
    "warp_cycles_per_issued_inst",
    "warp_stall_long_scoreboard_pct",
    "warp_stall_short_scoreboard_pct",
    "warp_stall_barrier_pct",
    "warp_stall_mio_throttle_pct",
    "warp_stall_lg_throttle_pct",
    "warp_stall_tex_throttle_pct",
    "warp_stall_math_pipe_throttle_pct",
    "warp_stall_wait_pct",
    "warp_stall_not_selected_pct",
    "warp_stall_selected_pct",
    "warp_stall_dispatch_stall_pct",
    "warp_stall_no_instruction_pct",
    "warp_stall_branch_resolving_pct",
    "warp_stall_membar_pct",
    "warp_stall_drain_pct",
    "warp_stall_sleeping_pct",
    "warp_stall_gmma_pct",
    "warp_stall_imc_miss_pct",
)


@pytest.fixture(scope="module")
def registry() -> MetricRegistry:
    return load_registry()


@pytest.fixture(scope="module")
def full():
    return parse_raw_csv((H200 / "naive_full_raw.csv").read_text())


@pytest.fixture(scope="module")
def basic():
    return parse_raw_csv((H200 / "naive_basic_raw.csv").read_text())


def _profile(**metrics: tuple[float | None, str]) -> KernelProfile:
    return KernelProfile(
        id=0,
        name="k",
        metrics={
            name: MetricValue(name=name, value=value, unit=unit) for name, (value, unit) in metrics.items()
        },
    )


def _broken_copy(tmp_path: Path, change) -> Path:
    document = json.loads(REGISTRY.read_text())
    change(document)
    path = tmp_path / "metric_registry.json"
    path.write_text(json.dumps(document))
    return path


# -------------------------------------------------------------------------------------------- registry


def test_packaged_registry_validates_against_its_schema():
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(json.loads(REGISTRY.read_text()))


def test_registry_loads(registry):
    assert registry.schema_version == 1
    assert "2025.3.1" in registry.ncu_versions_checked
    assert Path(registry.source).name == "metric_registry.json"
    assert len(registry.metrics) >= 30
    assert all(isinstance(spec, MetricSpec) for spec in registry.metrics)
    assert load_registry(REGISTRY) == registry  # an explicit path reads the same document


def test_registry_covers_every_axis(registry):
    assert {spec.axis for spec in registry.metrics} == set(AXES)
    for axis, at_least in (("compute", 8), ("memory", 10), ("latency", 10), ("info", 3)):
        assert len(registry.by_axis(axis)) >= at_least, axis
    assert {spec.key for spec in registry.by_axis("latency")} >= set(STALL_KEYS) | {"achieved_occupancy_pct"}
    assert {"sm_throughput_pct", "tensor_pipe_utilization_pct", "ipc"} <= {
        s.key for s in registry.by_axis("compute")
    }
    assert {"memory_throughput_pct", "dram_throughput_pct", "dram_bytes"} <= {
        s.key for s in registry.by_axis("memory")
    }
    with pytest.raises(ValueError):
        registry.by_axis("speed")


def test_registry_entries(registry):
    keys = [spec.key for spec in registry.metrics]
    assert len(keys) == len(set(keys))
    for spec in registry.metrics:
        assert spec.missing == "unknown"
        assert spec.bad_when in ("high", "low", "neither")
        assert (
            spec.ncu_names or spec.derive is not None
        ) and spec.description  # only a derived key has no name
        assert "full" in spec.sets
        assert registry.get(spec.key) is spec
    assert registry.get("no_such_metric") is None
    # the gap computation: utilisation is bad when low, a stall share is bad when high
    assert registry.get("sm_throughput_pct").bad_when == "low"
    assert registry.get("memory_throughput_pct").bad_when == "low"
    assert registry.get("achieved_occupancy_pct").bad_when == "low"
    for key in STALL_KEYS:
        spec = registry.get(key)
        assert (spec.bad_when, spec.unit, spec.axis) == ("high", "%", "latency")
        assert spec.derive is not None and (spec.derive.kind, spec.derive.group) == ("share_of", "warp_stall")


def test_ncu_names_are_unique_across_metrics(registry):
    names = [name for spec in registry.metrics for name in spec.ncu_names]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert duplicates == []


def test_primary_names_appear_in_the_fixtures(registry, full):
    """The first name of each metric (or its derivation's inputs) is one the real full report carries."""
    metrics = full.kernels[0].metrics
    for spec in registry.metrics:
        derive = spec.derive
        inputs = []
        if derive is not None and derive.kind == "ratio_of":
            inputs = [derive.numerator, derive.denominator]
        elif derive is not None and derive.kind == "sum_of":
            inputs = list(derive.terms)
        named = bool(spec.ncu_names) and spec.ncu_names[0] in metrics
        assert named or (inputs and all(name in metrics for name in inputs)), spec.key


def test_a_key_without_ncu_names_is_derived(registry, full):
    spec = registry.get("wave_duration_us")
    assert spec.ncu_names == () and spec.derive.kind == "ratio_of"
    resolved = resolve(registry, full.kernels[0])["wave_duration_us"]
    # the naive SGEMM fixture: 3.140224 ms over 15.52 waves
    assert resolved.status == "derived" and resolved.value == pytest.approx(3140.224 / 15.52)


def test_an_average_over_no_events_reads_unknown_not_zero(registry):
    assert {spec.key for spec in registry.metrics if spec.zero == "no_events"} == {
        "branch_efficiency_pct",
        "global_load_efficiency_pct",
        "global_store_efficiency_pct",
    }
    branch = registry.get("branch_efficiency_pct")
    name = branch.ncu_names[0]

    def read(value):
        return resolve_metric(registry, branch, {name: MetricValue(name=name, unit="%", value=value)})

    assert (read(0.0).value, read(0.0).status, read(0.0).ncu_name) == (None, "unknown", None)
    assert (read(0.5).value, read(0.5).status) == (0.5, "measured")
    assert read(100.0).value == 100.0
    # a metric without that rule keeps its zero
    stall = registry.get("registers_per_thread")
    zero = {stall.ncu_names[0]: MetricValue(name=stall.ncu_names[0], unit=stall.unit, value=0.0)}
    assert resolve_metric(registry, stall, zero).value == 0.0
    # evidence written before the rule reads as a new analysis would
    assert without_eventless_zeros(
        registry,
        {"branch_efficiency_pct": 0.0, "global_store_efficiency_pct": 12.5, "dram_bytes": 0.0, "x": None},
    ) == {"branch_efficiency_pct": None, "global_store_efficiency_pct": 12.5, "dram_bytes": 0.0, "x": None}


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d["metrics"][0].__setitem__("axis", "speed"), "$.metrics[0].axis"),
        (lambda d: d["metrics"][3].__setitem__("missing", "zero"), "$.metrics[3].missing"),
        (lambda d: d["metrics"][1].__setitem__("bad_when", "sometimes"), "$.metrics[1].bad_when"),
        (lambda d: d["metrics"][2].__setitem__("sets", ["everything"]), "$.metrics[2].sets[0]"),
        (lambda d: d["metrics"][0].pop("unit"), "$.metrics[0]"),
        (lambda d: d.__setitem__("schema_version", 2), "$.schema_version"),
    ],
)
def test_broken_registry_is_a_config_error(tmp_path, change, where):
    path = _broken_copy(tmp_path, change)
    with pytest.raises(ConfigError) as caught:
        load_registry(path)
    message = str(caught.value)
    assert str(path) in message
    assert where in message
    assert caught.value.exit_code == 4


def test_inconsistent_registry_is_a_config_error(tmp_path):
    def duplicate_name(document):
        document["metrics"][1]["ncu_names"].append(document["metrics"][0]["ncu_names"][0])

    def duplicate_key(document):
        document["metrics"][1]["key"] = document["metrics"][0]["key"]

    def unknown_group(document):
        stall = next(m for m in document["metrics"] if m["key"] == "warp_stall_wait_pct")
        stall["derive"]["group"] = "no_such_group"

    def unreachable_share(document):
        stall = next(m for m in document["metrics"] if m["key"] == "warp_stall_wait_pct")
        stall["ncu_names"] = ["smsp__warp_issue_stalled_wait_per_warp_active.pct"]

    for change, words in (
        (duplicate_name, "is already a name of"),
        (duplicate_key, "is already the key of"),
        (unknown_group, "no group 'no_such_group'"),
        (unreachable_share, "never be taken"),
    ):
        path = _broken_copy(tmp_path, change)
        with pytest.raises(ConfigError, match=words) as caught:
            load_registry(path)
        assert str(path) in str(caught.value)


def test_unreadable_registry_is_a_config_error(tmp_path):
    path = tmp_path / "metric_registry.json"
    path.write_text("{ not json")
    with pytest.raises(ConfigError, match="not valid JSON") as caught:
        load_registry(path)
    assert str(path) in str(caught.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_registry(tmp_path / "missing.json")


# -------------------------------------------------------------------------------------------- resolver


def test_resolver_on_the_full_report(registry, full):
    resolved = resolve(registry, full.aggregate)
    assert list(resolved) == list(registry.keys())
    assert all(isinstance(item, Resolved) for item in resolved.values())
    for key in CORE_KEYS:
        assert resolved[key].status == "measured", key
        assert resolved[key].value is not None, key
    assert resolved["sm_throughput_pct"].value == pytest.approx(65.540318)
    assert resolved["sm_throughput_pct"].ncu_name == "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    assert resolved["memory_throughput_pct"].value == pytest.approx(98.344936)
    assert (resolved["duration_ms"].value, resolved["duration_ms"].unit) == (pytest.approx(3.140224), "ms")
    assert resolved["registers_per_thread"].value == 32
    assert resolved["achieved_occupancy_pct"].value == pytest.approx(98.310516)
    assert (
        resolved["dram_throughput_pct"].ncu_name == "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
    )
    # every metric of the registry is in a full-set report
    assert [key for key, item in resolved.items() if item.status == "unknown"] == []


def test_stall_shares_on_the_full_report(registry, full):
    resolved = resolve(registry, full.aggregate)
    for key in STALL_KEYS:
        assert resolved[key].status == "derived", key
        assert resolved[key].unit == "%"
        assert resolved[key].ncu_name.startswith("smsp__average_warps_issue_stalled_")
    # 21.572790 of 41.463435 cycles between issues: ncu's CPIStall rule says "about 52.0%"
    long_scoreboard = resolved["warp_stall_long_scoreboard_pct"].value
    assert long_scoreboard == pytest.approx(100 * 21.572790 / 41.463435, rel=1e-12)
    assert round(long_scoreboard, 1) == 52.0
    assert resolved["warp_stall_lg_throttle_pct"].value == pytest.approx(
        100 * 10.390012 / 41.463435, rel=1e-12
    )
    assert resolved["warp_stall_barrier_pct"].value == 0.0  # measured zero, not unknown
    shares = [item.value for key, item in resolved.items() if key.startswith("warp_stall_")]
    assert 99.0 < sum(shares) < 101.0
    biggest = max((item.value, key) for key, item in resolved.items() if key.startswith("warp_stall_"))
    assert biggest[1] == "warp_stall_long_scoreboard_pct"


def test_derived_memory_metrics_on_the_full_report(registry, full):
    resolved = resolve(registry, full.aggregate)
    assert (resolved["dram_bytes"].status, resolved["dram_bytes"].value) == (
        "derived",
        pytest.approx(33_562_112 + 11_732_480),
    )
    assert resolved["dram_bytes"].ncu_name == "dram__bytes_read.sum + dram__bytes_write.sum"
    assert resolved["global_load_sectors_per_request"].value == pytest.approx(1_073_741_824 / 536_870_912)
    assert resolved["global_load_efficiency_pct"].value == pytest.approx(
        100 * 18 / 32
    )  # ncu: "18.0 of the 32 bytes"


def test_resolver_on_the_basic_report(registry, basic):
    resolved = resolve(registry, basic.aggregate)
    for key in (
        "sm_throughput_pct",
        "memory_throughput_pct",
        "duration_ms",
        "registers_per_thread",
        "achieved_occupancy_pct",
    ):
        assert resolved[key].status == "measured", key
    assert resolved["duration_ms"].value == pytest.approx(3.133312)  # printed "3,133,312" ns
    assert resolved["sm_frequency_hz"].value == pytest.approx(1_979_490_432.17)
    unknown = [key for key, item in resolved.items() if item.status == "unknown"]
    assert sorted(unknown) == sorted(BASIC_UNKNOWN)
    for key in BASIC_UNKNOWN:
        assert resolved[key].value is None, key  # unknown, never 0
        assert resolved[key].ncu_name is None
    # the registry's "sets" says the same
    assert sorted(spec.key for spec in registry.metrics if "basic" not in spec.sets) == sorted(BASIC_UNKNOWN)


def test_measured_units_match_the_registry(registry, full, basic):
    for report in (full, basic):
        metrics = report.aggregate.metrics
        for key, item in resolve(registry, report.aggregate).items():
            if item.status == "measured":
                assert metrics[item.ncu_name].unit == registry.get(key).unit, key


def test_missing_metrics_are_unknown_never_zero(registry):
    resolved = resolve(registry, KernelProfile(id=0, name="nothing"))
    assert {item.status for item in resolved.values()} == {"unknown"}
    assert all(item.value is None for item in resolved.values())
    assert values(resolved) == dict.fromkeys(registry.keys())
    # present as a column but empty
    empty = _profile(**{"sm__throughput.avg.pct_of_peak_sustained_elapsed": (None, "%")})
    assert resolve(registry, empty)["sm_throughput_pct"] == Resolved(
        "sm_throughput_pct", None, "%", None, "unknown"
    )


def test_share_of_sums_the_family_when_there_is_no_total(registry):
    ratio = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    profile = _profile(
        **{
            ratio.format("long_scoreboard"): (6.0, "inst"),
            ratio.format("barrier"): (3.0, "inst"),
            ratio.format("selected"): (1.0, "inst"),
        }
    )
    resolved = resolve(registry, profile)
    assert resolved["warp_stall_long_scoreboard_pct"].value == pytest.approx(60.0)
    assert resolved["warp_stall_barrier_pct"].value == pytest.approx(30.0)
    assert resolved["warp_stall_wait_pct"].status == "unknown"  # not in the report: unknown, not 0


def test_share_of_pc_sampling_excludes_not_issued(registry):
    pcsamp = "smsp__pcsamp_warps_issue_stalled_{}"
    profile = _profile(
        **{
            pcsamp.format("long_scoreboard"): (300.0, "warp"),
            pcsamp.format("long_scoreboard_not_issued"): (900.0, "warp"),
            pcsamp.format("no_instructions"): (100.0, "inst"),
            pcsamp.format("selected"): (100.0, "warp"),
        }
    )
    resolved = resolve(registry, profile)
    assert resolved["warp_stall_long_scoreboard_pct"].value == pytest.approx(60.0)
    assert resolved["warp_stall_no_instruction_pct"].value == pytest.approx(20.0)
    assert resolved["warp_stall_no_instruction_pct"].ncu_name == pcsamp.format("no_instructions")


def test_ready_made_stall_percentage_is_measured(registry):
    profile = _profile(**{"smsp__warp_issue_stalled_barrier_per_warp_active.pct": (12.5, "%")})
    item = resolve(registry, profile)["warp_stall_barrier_pct"]
    assert (item.value, item.status, item.ncu_name) == (
        12.5,
        "measured",
        "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    )


def test_share_of_with_all_zero_stalls_is_unknown(registry):
    ratio = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    profile = _profile(
        **{ratio.format("long_scoreboard"): (0.0, "inst"), ratio.format("barrier"): (0.0, "inst")}
    )
    assert resolve(registry, profile)["warp_stall_long_scoreboard_pct"].status == "unknown"


def test_aliases_and_derivations(registry):
    # an older name of dram throughput
    item = resolve(registry, _profile(**{"dram__throughput.avg.pct_of_peak_sustained_elapsed": (41.0, "%")}))[
        "dram_throughput_pct"
    ]
    assert (item.value, item.status, item.ncu_name) == (
        41.0,
        "measured",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    )
    # the first alias with a value wins
    both = _profile(
        **{
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": (None, "%"),
            "dram__throughput.avg.pct_of_peak_sustained_elapsed": (7.0, "%"),
        }
    )
    assert resolve(registry, both)["dram_throughput_pct"].value == 7.0
    # a name in another unit is not this metric
    wrong_unit = _profile(**{"gpu__time_duration.sum": (5.0, "cycle")})
    assert resolve(registry, wrong_unit)["duration_ms"].status == "unknown"
    # a ready-made metric beats its derivation
    ready = _profile(
        **{
            "dram__bytes.sum": (10.0, "byte"),
            "dram__bytes_read.sum": (1.0, "byte"),
            "dram__bytes_write.sum": (2.0, "byte"),
        }
    )
    item = resolve(registry, ready)["dram_bytes"]
    assert (item.value, item.status) == (10.0, "measured")
    # a sum needs every term; a ratio a non-zero denominator
    partial = _profile(**{"dram__bytes_read.sum": (1.0, "byte")})
    assert resolve(registry, partial)["dram_bytes"].status == "unknown"
    zero = _profile(
        **{
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": (8.0, "sector"),
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": (0.0, ""),
        }
    )
    assert resolve(registry, zero)["global_load_sectors_per_request"].status == "unknown"


def test_resolve_metric_single_key(registry, full):
    spec = registry.get("l2_hit_rate_pct")
    item = resolve_metric(registry, spec, full.kernels[0].metrics)
    assert (item.key, item.value, item.unit, item.status) == (
        "l2_hit_rate_pct",
        pytest.approx(98.70384),
        "%",
        "measured",
    )
    assert item.known
