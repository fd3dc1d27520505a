"""The method registry (references/method_registry.json) and its loader (kopt_core.knowledge.methods)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kopt_core.errors import ConfigError
from kopt_core.knowledge.methods import AXES, MethodRegistry, load_methods
from kopt_core.ncu.metrics import load_registry

REPO = Path(__file__).resolve().parents[2]
REFERENCES = REPO / "kopt_core" / "references"
REGISTRY = REFERENCES / "method_registry.json"
SCHEMA = REFERENCES / "schemas" / "v1" / "method_registry.schema.json"

REQUIRED = (
    "compute.tensor_core",
    "compute.wgmma",
    "compute.warp_specialization",
    "memory.cp_async",
    "memory.tma",
    "memory.vectorized_access",
    "memory.smem_tiling",
    "memory.coalescing",
    "latency.double_buffering",
    "latency.occupancy_tuning",
)


@pytest.fixture(scope="module")
def registry() -> MethodRegistry:
    return load_methods()


def test_file_validates_against_schema():
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(json.loads(REGISTRY.read_text()))


def test_loads_at_least_40_methods_over_all_axes(registry):
    assert len(registry.methods) >= 40
    for axis in AXES:
        assert registry.by_axis(axis), axis
    assert {m.axis for m in registry.methods} == set(AXES)


def test_required_ids_present(registry):
    for method_id in REQUIRED:
        assert registry.get(method_id) is not None, method_id


def test_by_axis_sorted_by_unique_priority(registry):
    for axis in AXES:
        priorities = [m.priority for m in registry.by_axis(axis)]
        assert priorities == sorted(priorities) and len(set(priorities)) == len(priorities)
    memory = [m.id for m in registry.by_axis("memory")]
    assert memory.index("memory.coalescing") < memory.index("memory.tma_multicast")
    compute = [m.id for m in registry.by_axis("compute")]
    assert compute.index("compute.tensor_core") < compute.index("compute.fast_math")


def test_every_trigger_metric_is_a_registry_key(registry):
    from kopt_core.knowledge.evidence import DERIVED_EVIDENCE

    keys = set(load_registry().keys()) | set(DERIVED_EVIDENCE)
    for method in registry.methods:
        assert method.trigger.metrics(), method.id
        for metric in method.trigger.metrics():
            assert metric in keys, (method.id, metric)
        for skip in method.skip_if:
            if skip.kind == "metric":
                assert skip.metric in keys, (method.id, skip.metric)


def test_relations_consistent(registry):
    ids = set(registry.ids())
    for method in registry.methods:
        assert method.id.split(".")[0] == method.axis
        assert method.sass_signature == method.id
        for other in (*method.relations.conflicts, *method.relations.complements):
            assert other in ids and other != method.id
        for other in method.relations.conflicts:
            assert method.id in registry.get(other).relations.conflicts
    wgmma = registry.get("compute.wgmma")
    assert wgmma.relations.conflicts == ()
    assert {"memory.tma", "compute.warp_specialization"} <= set(wgmma.relations.complements)
    assert registry.get("latency.double_buffering").relations.same_budget is not None
    assert (
        registry.get("latency.double_buffering").relations.same_budget
        == registry.get("latency.multistage_pipeline").relations.same_budget
    )


def test_numerics_classes(registry):
    for method_id in ("compute.fast_math", "compute.tf32", "compute.fp8", "memory.reduced_precision_storage"):
        assert registry.get(method_id).numerics == "approximate", method_id
    assert registry.get("compute.split_k").numerics == "preconditioned"
    assert registry.get("memory.coalescing").numerics == "bitwise_preserving"


def test_wgmma_gate_is_explicit_not_numeric(registry):
    assert registry.applies_on("compute.wgmma", "sm_90a") == (True, ())
    for arch in ("sm_90", "sm_80", "sm_100", "sm_120"):
        applies, missing = registry.applies_on("compute.wgmma", arch)
        assert not applies and missing == ("wgmma",), arch
    assert registry.applies_on("latency.setmaxnreg", "sm_90a")[0]
    assert not registry.applies_on("latency.setmaxnreg", "sm_100")[0]


def test_cp_async_gate(registry):
    assert registry.applies_on("memory.cp_async", "sm_80")[0]
    assert registry.applies_on("memory.cp_async", "sm_90")[0]
    assert registry.applies_on("memory.cp_async", "sm_90a")[0]
    assert registry.applies_on("memory.cp_async", "sm_75") == (False, ("cp_async",))


def test_hopper_features(registry):
    for arch in ("sm_90", "sm_90a"):
        for method_id in (
            "memory.tma",
            "compute.thread_block_clusters",
            "memory.distributed_shared_memory",
            "compute.warp_specialization",
            "memory.stmatrix",
        ):
            assert registry.applies_on(method_id, arch)[0], (method_id, arch)
    assert not registry.applies_on("memory.tma", "sm_89")[0]
    assert registry.applies_on("compute.fp8", "sm_89")[0]
    assert not registry.applies_on("compute.fp8", "sm_86")[0]


def test_trigger_unknown_metric_is_inconclusive(registry):
    trigger = registry.get("memory.coalescing").trigger
    assert not trigger.holds({})
    assert trigger.holds({"uncoalesced_excess_share": 0.5})
    assert not trigger.holds({"uncoalesced_excess_share": 0.1})  # known and below: not inconclusive
    assert trigger.holds({"uncoalesced_excess_share": None, "load_sectors_over_ideal": 8.0})


def test_a_condition_group_holds_only_when_all_of_it_holds(registry):
    trigger = registry.get("memory.smem_tiling").trigger
    saturated_hits = {
        "l1tex_throughput_pct": 99.0,
        "l1_hit_rate_pct": 88.0,
        "global_load_sectors_per_request": 4.0,
    }
    assert trigger.holds(saturated_hits)
    assert not trigger.holds({**saturated_hits, "l1_hit_rate_pct": 5.0})  # a busy L1 that misses: streaming
    # 16 sectors a request: the hits are a thread's partial sectors read again, not reuse across threads
    assert not trigger.holds({**saturated_hits, "global_load_sectors_per_request": 16.0})
    assert not trigger.holds({"l1tex_throughput_pct": 99.0})  # the hit rate unknown: never assumed
    assert set(trigger.metrics()) == {
        "l1tex_throughput_pct",
        "l1_hit_rate_pct",
        "l2_throughput_pct",
        "l2_hit_rate_pct",
        "lsu_pipe_utilization_pct",
        "global_load_sectors_per_request",
    }


# ------------------------------------------------------------------------------------ broken copies


def _broken(tmp_path, edit) -> Path:
    document = json.loads(REGISTRY.read_text())
    edit(document)
    path = tmp_path / "method_registry.json"
    path.write_text(json.dumps(document))
    return path


def _method(document, method_id):
    return next(m for m in document["methods"] if m["id"] == method_id)


def test_unknown_trigger_metric_rejected(tmp_path):
    def edit(d):
        _method(d, "memory.coalescing")["trigger"]["any"][0]["metric"] = "no_such_metric"

    path = _broken(tmp_path, edit)
    with pytest.raises(ConfigError, match="unknown metric key 'no_such_metric'") as info:
        load_methods(path)
    assert str(path) in str(info.value)


def test_unknown_metric_inside_a_group_rejected_with_its_path(tmp_path):
    def edit(d):
        _method(d, "memory.smem_tiling")["trigger"]["any"][0]["all"][1]["metric"] = "no_such_metric"

    with pytest.raises(ConfigError, match=r"trigger\.any\[0\]\.all\[1\]\.metric: unknown metric key"):
        load_methods(_broken(tmp_path, edit))


def test_a_group_of_one_is_rejected_by_the_schema(tmp_path):
    def edit(d):
        _method(d, "memory.smem_tiling")["trigger"]["any"][0]["all"] = [
            {"metric": "l1_hit_rate_pct", "op": ">=", "value": 50}
        ]

    with pytest.raises(ConfigError):
        load_methods(_broken(tmp_path, edit))


def test_asymmetric_conflict_rejected(tmp_path):
    def edit(d):
        _method(d, "compute.split_k")["relations"]["conflicts"] = []

    with pytest.raises(ConfigError, match="asymmetric conflict"):
        load_methods(_broken(tmp_path, edit))


def test_duplicate_priority_rejected(tmp_path):
    def edit(d):
        _method(d, "memory.tma")["priority"] = _method(d, "memory.coalescing")["priority"]

    with pytest.raises(ConfigError, match="duplicate priority"):
        load_methods(_broken(tmp_path, edit))


def test_other_inconsistencies_rejected(tmp_path):
    cases = {
        "unknown method id": lambda d: _method(d, "compute.wgmma")["relations"]["complements"].append(
            "memory.nope"
        ),
        "is not defined in any architecture": lambda d: _method(d, "memory.tma")["requires"].append(
            "warp_drive"
        ),
        "has prefix 'memory' but axis 'latency'": lambda d: _method(d, "memory.tma").update(axis="latency"),
        "duplicate method id": lambda d: d["methods"].append(dict(_method(d, "memory.tma"), priority=99)),
    }
    for message, edit in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_methods(_broken(tmp_path, edit))


def test_schema_violation_rejected(tmp_path):
    def edit(d):
        _method(d, "memory.tma")["numerics"] = "roughly"

    with pytest.raises(ConfigError, match="numerics"):
        load_methods(_broken(tmp_path, edit))


def test_the_catalog_has_one_card_per_method_and_the_template_fills():
    import re
    import string

    from kopt_core.refdata import packaged_text

    catalog, _ = packaged_text("optimization_catalog.md")
    cards = re.findall(r"^### (\S+) ", catalog, re.M)
    assert sorted(cards) == sorted(load_methods().ids())
    template, _ = packaged_text("templates/iteration_report.md")
    fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    assert fields == {
        "iteration",
        "kernel",
        "bound",
        "label",
        "delta_compute",
        "delta_memory",
        "delta_latency",
        "axis_budget",
        "floor_share",
        "top_metrics",
        "chosen_by",
        "selected",
        "skipped",
        "underfilled",
        "notes",
    }
    assert template.format(**{name: "x" for name in fields}).startswith("# Iteration x")


def test_each_card_states_its_methods_priority_and_trigger_metrics():
    import re

    from kopt_core.refdata import packaged_text

    catalog, _ = packaged_text("optimization_catalog.md")
    cards = dict(re.findall(r"^### (\S+) .*?\n(.*?)(?=^### |\Z)", catalog, re.M | re.S))
    for method in load_methods().methods:
        card = cards[method.id]
        assert f"priority {method.priority};" in card, method.id
        evidence = next(line for line in card.splitlines() if line.startswith("- **Evidence"))
        for metric in method.trigger.metrics():
            assert f"`{metric}`" in evidence, (method.id, metric)
