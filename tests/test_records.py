"""Records survive the trip to JSON and back; the JSON writer is atomic."""

from __future__ import annotations

import json
import math
import os

import attrs
import pytest

from kopt_core.jsonio import read_json, write_json
from kopt_core.records import (
    Artifact,
    BenchOptions,
    BenchRequest,
    BenchResult,
    BufferCheck,
    CorrectnessCheck,
    KernelInterface,
    KernelResources,
    Mismatch,
    Param,
    ProfiledKernel,
    ProfileSummary,
    TimingStats,
    from_data,
    migrate,
    read_bench_result,
    read_profile_summary,
    to_data,
    versions,
)


def _interface() -> KernelInterface:
    return KernelInterface(
        entry="solve",
        params=[
            Param(name="x", kind="buffer", ctype="const float*", dtype="float32", is_const=True),
            Param(name="N", kind="scalar", ctype="int", dtype="int32"),
        ],
        source="k.cu",
        line=3,
    )


def _result() -> BenchResult:
    artifact = Artifact(
        backend="cuda",
        source="k.cu",
        path="/tmp/lib.so",
        launcher="kopt_cuda.launch:load",
        interface=_interface(),
        flags=["-O3"],
        resources=[KernelResources(name="_Z1kv", registers=32)],
    )
    stats = TimingStats(
        mode="graph",
        l2="cold",
        clock="cuda_events",
        launches_per_sample=64,
        n=3,
        median_ms=0.01,
        p95_ms=0.012,
        mean_ms=0.0105,
        min_ms=0.0098,
        max_ms=0.012,
        stddev_ms=0.001,
        cv=math.nan,
        median_ci_rel=math.inf,
        stop_reason="time budget",
        warmup_ms=200.0,
        warmup_launches=1000,
        samples_ms=[0.0098, 0.01, 0.012],
    )
    check = CorrectnessCheck(
        seed=0,
        phase="before_timing",
        output_init="poisoned",
        passed=False,
        inputs_unchanged=True,
        buffers=[
            BufferCheck(
                buffer="y",
                passed=False,
                mismatches=2,
                numel=8,
                worst=Mismatch(buffer="y", index=[7], got=None, expected=1.5),
            )
        ],
    )
    return BenchResult(
        kernel="k.cu",
        backend="cuda",
        status="failed",
        build=artifact,
        kernel_timing=stats,
        correctness=[check],
        options=BenchOptions(seeds=[4, 5]),
    )


def test_bench_result_round_trip_through_json(tmp_path):
    result = _result()
    path = write_json(tmp_path / "bench.json", to_data(result))
    data = read_json(path)
    assert data["schema_version"] == 2
    # JSON has no NaN or infinity: unknown values are written as null
    assert data["kernel_timing"]["cv"] is None and data["kernel_timing"]["median_ci_rel"] is None
    back = from_data(data, BenchResult)
    assert back.build == result.build
    assert back.correctness == result.correctness
    assert back.options.seeds == (4, 5)
    assert back.kernel_timing.samples_ms == (0.0098, 0.01, 0.012)


def test_unknown_keys_are_tolerated_on_read():
    data = to_data(_result())
    data["added_by_a_newer_kopt"] = {"x": 1}
    assert from_data(data, BenchResult).kernel == "k.cu"


def test_bench_request_round_trip():
    request = BenchRequest(
        artifact=_result().build, reference="ref.py", dims={"N": 4}, options=BenchOptions()
    )
    assert from_data(json.loads(json.dumps(to_data(request))), BenchRequest) == request


def test_migration_steps_run_in_order(monkeypatch):
    monkeypatch.setitem(
        versions.MIGRATIONS,
        "doc",
        {1: lambda d: {"schema_version": 1, "b": d["a"]}, 2: lambda d: {**d, "c": 3}},
    )
    assert migrate("doc", {"schema_version": 1, "a": 2}, 3) == {"schema_version": 3, "b": 2, "c": 3}
    with pytest.raises(ValueError, match="newer"):
        migrate("doc", {"schema_version": 9}, 3)
    with pytest.raises(ValueError, match="no migration"):
        migrate("other", {"schema_version": 1}, 2)


def test_atomic_write_keeps_the_old_document_when_serialisation_fails(tmp_path):
    target = tmp_path / "state.json"
    write_json(target, {"v": 1})
    with pytest.raises(ValueError):
        write_json(target, {"v": float("nan")})  # not JSON: must not clobber the file
    assert read_json(target) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left behind


def test_atomic_write_replaces_in_one_rename(tmp_path, monkeypatch):
    target = tmp_path / "doc.json"
    write_json(target, {"v": 1})
    calls = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append((a, b)), real_replace(a, b)))
    write_json(target, {"v": 2})
    assert len(calls) == 1 and calls[0][1] == target
    assert read_json(target) == {"v": 2}


def test_read_document_migrates_and_says_what_is_wrong(tmp_path, monkeypatch):
    path = tmp_path / "bench.json"
    write_json(path, {**to_data(_result()), "schema_version": 0, "name": "k.cu"})
    monkeypatch.setitem(
        versions.MIGRATIONS,
        "bench",
        {0: lambda d: {**d, "kernel": d.pop("name")}, 1: versions.bench_v1_to_v2},
    )
    assert read_bench_result(path).kernel == "k.cu"
    write_json(path, {**to_data(_result()), "schema_version": 3})
    with pytest.raises(ValueError, match="newer"):
        read_bench_result(path)
    write_json(path, {"kernel": "k.cu"})
    with pytest.raises(ValueError, match="not a bench document: backend is missing"):
        read_bench_result(path)
    write_json(path, [1])
    with pytest.raises(ValueError, match="not a JSON object"):
        read_bench_result(path)


def test_an_imported_profile_summary_leaves_what_it_does_not_know_unknown(tmp_path):
    summary = ProfileSummary(
        report="r.csv",
        bundle="imported",
        bundle_reason="imported from r.csv",
        kernels=[ProfiledKernel(id=0, name="k", duration_ms=1.5)],
        ncu_duration_ms=1.5,
    )
    path = write_json(tmp_path / "profile.json", to_data(summary))
    data = read_json(path)
    assert data["sass"] is None and data["attempts"] == [] and data["harness_median_ms"] is None
    assert data["kernels"] == [{"id": 0, "name": "k", "duration_ms": 1.5, "grid": "", "block": ""}]
    assert read_profile_summary(path) == summary


# ------------------------------------------------------------------------ the documents of an iteration


def _loop_records():
    from kopt_core.records import (
        AblationSpec,
        AttributionRecord,
        BranchOutcome,
        BranchSpec,
        Candidates,
        ExploreRecord,
        MethodAttribution,
        MethodSassCheck,
        SassCheckRecord,
    )
    from kopt_core.records.paired import AblationEffect

    candidates = Candidates(
        iteration=1,
        generator="claude",
        methods=["memory.vectorized_loads"],
        branches=[
            BranchSpec(
                id="b1",
                file="branches/b1/kernel.cu",
                methods=["memory.vectorized_loads"],
                hyperparameters={"BLOCK_M": 128, "swizzle": "xor", "stages": [2, 3]},
                note="float4 loads",
            )
        ],
        ablations=[
            AblationSpec(method="memory.vectorized_loads", file="ablations/memory.vectorized_loads/k.cu")
        ],
    )
    ran = BranchOutcome(
        id="b1",
        file="branches/b1/kernel.cu",
        compile_pass=True,
        contract_pass=True,
        correctness_pass=True,
        race_safe=None,
        race_note="racecheck: not run (no shared memory)",
        timing_valid=True,
        median_ms=0.5,
        robust_cv=0.02,
        requested_dims={"M": 64},
        realised_dims={"x": [64, 64]},
        bench="branches/b1/bench.json",
        build_seconds=4.5,
        cache_hit=True,
    )
    failed = BranchOutcome(
        id="b2",
        file="branches/b2/kernel.cu",
        compile_pass=True,
        contract_pass=True,
        error="mismatch",
        error_stage="correctness",
    )
    explore = ExploreRecord(
        iteration=1,
        branches=[ran, failed],
        champion="b1",
        champion_ms=0.5,
        compile_jobs=2,
        compile_jobs_reason="auto: 2 workers",
    )
    effect = AblationEffect(
        a="iterv1/kernel.cu",
        b="ablations/memory.vectorized_loads/k.cu",
        verdict="beyond_noise",
        beyond_noise=True,
        delta_ms=0.1,
        delta_low_ms=0.08,
        delta_high_ms=0.12,
        slowdown=0.2,
        slowdown_low=0.16,
        slowdown_high=0.24,
        threshold=0.01,
        blocks_used=20,
        reasons=["ok"],
    )
    attribution = AttributionRecord(
        iteration=1,
        champion="iterv1/kernel.cu",
        threshold=0.01,
        champion_ms=0.5,
        methods=[
            MethodAttribution(
                method="memory.vectorized_loads",
                status="measured",
                ms_champion=0.5,
                ms_without=0.6,
                attribution_ms=0.1,
                ci_low_ms=0.08,
                ci_high_ms=0.12,
                relative=0.2,
                beyond_noise=True,
                effect=effect,
            ),
            MethodAttribution(method="latency.ilp", status="inconclusive", reason="no ablation kernel"),
        ],
    )
    sass = SassCheckRecord(
        iteration=1,
        artifact="/b/k.so",
        baseline_artifact=None,
        arch="sm_90a",
        methods=[
            MethodSassCheck(
                method="memory.vectorized_loads", status="fail", strong=True, detail="no LDG.128"
            ),
            MethodSassCheck(method="latency.ilp", status="not_applicable", detail="no opcode"),
        ],
    )
    return candidates, explore, attribution, sass


def test_the_iteration_documents_round_trip_through_json(tmp_path):
    from kopt_core.records import read_attribution, read_explore, read_sass_check
    from kopt_core.records.versions import read_document

    candidates, explore, attribution, sass = _loop_records()
    for record, read in (
        (candidates, lambda p: read_document(p, type(candidates), "candidates", what=str(p))),
        (explore, read_explore),
        (attribution, read_attribution),
        (sass, read_sass_check),
    ):
        path = write_json(tmp_path / "doc.json", to_data(record))
        data = read_json(path)
        assert data["schema_version"] == 1
        assert read(path) == record
    unknown = attrs.evolve(explore.branches[0], robust_cv=math.nan)  # JSON has no NaN: unknown is null
    path = write_json(tmp_path / "explore.json", to_data(attrs.evolve(explore, branches=[unknown])))
    assert read_json(path)["branches"][0]["robust_cv"] is None
    back = read_explore(write_json(tmp_path / "explore.json", to_data(explore)))
    assert back.branch("b1").passed and not back.branch("b2").passed and back.branch("b3") is None
    assert back.branches[0].realised_dims == {"x": [64, 64]} and back.champion == "b1"
    assert read_attribution(write_json(tmp_path / "a.json", to_data(attribution))).get("latency.ilp").reason
    assert read_sass_check(write_json(tmp_path / "s.json", to_data(sass))).get("nope") is None


def test_a_branch_passes_only_every_strict_gate():
    from kopt_core.records import BranchOutcome

    ok = dict(compile_pass=True, contract_pass=True, correctness_pass=True, timing_valid=True)
    assert BranchOutcome(id="b1", file="f", **ok).passed  # race not checked: not a failure
    assert BranchOutcome(id="b1", file="f", race_safe=True, **ok).passed
    assert not BranchOutcome(id="b1", file="f", race_safe=False, **ok).passed
    for gate in ok:
        assert not BranchOutcome(id="b1", file="f", **{**ok, gate: False}).passed


def test_explore_names_only_passing_branches_champion_or_frontier():
    from kopt_core.records import BranchOutcome, ExploreRecord

    ok = BranchOutcome(
        id="b1", file="f", compile_pass=True, contract_pass=True, correctness_pass=True, timing_valid=True
    )
    bad = BranchOutcome(id="b2", file="g")
    with pytest.raises(ValueError, match="champion 'b2' is not a passing branch"):
        ExploreRecord(iteration=1, branches=[ok, bad], champion="b2")
    with pytest.raises(ValueError, match="frontier b2"):
        ExploreRecord(iteration=1, branches=[ok, bad], champion="b1", frontier=["b2"])
    with pytest.raises(ValueError, match="frontier b1"):
        ExploreRecord(iteration=1, branches=[ok, bad], champion="b1", frontier=["b1"])


def test_the_iteration_documents_read_strictly(tmp_path):
    from kopt_core.records import read_attribution, read_sass_check

    _, _, attribution, sass = _loop_records()
    data = to_data(sass)
    data["methods"][1]["status"] = "skipped"
    with pytest.raises(ValueError, match=r"methods\[1\] is not valid.*status must be one of pass, fail"):
        read_sass_check(write_json(tmp_path / "s.json", data))
    data = to_data(attribution)
    data["methods"][1]["beyond_noise"] = True  # an inconclusive answer cannot have a verdict
    with pytest.raises(ValueError, match=r"methods\[1\] is not valid.*beyond_noise null"):
        read_attribution(write_json(tmp_path / "a.json", data))
    data["schema_version"] = 2
    with pytest.raises(ValueError, match="newer"):
        read_attribution(write_json(tmp_path / "a.json", data))


def test_the_run_and_kopt_sass_share_one_sass_vocabulary():
    from kopt_core.records.loop import SASS_STATUSES
    from kopt_core.sass.verify import STATUSES

    assert SASS_STATUSES == STATUSES


def test_the_migration_table_chains_each_kind_from_its_oldest_version_to_the_current_one():
    """Each step is the function named for it, and the steps run without a gap up to the version kopt
    writes now: a slip in the table (a step skipped, repeated or wired to the wrong function) is
    invisible when the skipped step only adds fields whose defaults the record already has."""
    from kopt_core.records import versions

    current = {
        "state": versions.STATE_SCHEMA_VERSION,
        "env": versions.ENV_SCHEMA_VERSION,
        versions.SELECTION_KIND: versions.SELECTION_SCHEMA_VERSION,
        "bench": versions.BENCH_SCHEMA_VERSION,
        "paired": versions.PAIRED_SCHEMA_VERSION,
    }
    assert set(versions.MIGRATIONS) == set(current)
    names = {"state": "state", "env": "env", versions.SELECTION_KIND: "selection"}
    names.update(bench="bench", paired="paired")
    for kind, steps in versions.MIGRATIONS.items():
        assert sorted(steps) == list(range(min(steps), current[kind])), kind
        for start, step in steps.items():
            assert step.__name__ == f"{names[kind]}_v{start}_to_v{start + 1}", (kind, start)
