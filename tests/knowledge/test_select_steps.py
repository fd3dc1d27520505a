"""kopt select on the real naive-SGEMM profile from the H200: standalone, and in a run folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kopt_example_backend
from kopt_core.jsonio import write_json
from kopt_core.knowledge.methods import load_methods
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env, EnvGpu
from kopt_core.run.init import init_run
from kopt_core.run.iteration import select_in_run
from kopt_core.steps.profile import ImportContext, import_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "h200"
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
SGEMM = {"flops": 2 * 2048**3, "bytes_min": 4 * 3 * 2048**2}


def kopt(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, KOPT_PLUGINS=""),
    )


def test_standalone_selection_writes_methods_and_analysis(tmp_path):
    import_profile(
        FIXTURES / "naive_full_raw.csv", tmp_path, context=ImportContext(model=SGEMM, dtype="float32")
    )
    proc = kopt(
        "select",
        "--roofline",
        tmp_path / "roofline.json",
        "--ncu-top",
        tmp_path / "ncu_top.json",
        "--dtype",
        "float32",
        "--sass",
        FIXTURES / "naive.sass.txt",
    )
    assert proc.returncode == 0, proc.stderr
    methods = json.loads((tmp_path / "methods.json").read_text())
    roofline = json.loads((tmp_path / "roofline.json").read_text())
    assert methods["budget"] == roofline["axis_budget"] and methods["bound"] == roofline["bound"]
    assert len(methods["selected"]) <= sum(roofline["axis_budget"].values())
    assert all(p["evidence"] for p in methods["selected"])  # every pick says what triggered it
    assert methods["kernel_tags"]["tensor_core_mma"] is False  # read off the naive SGEMM's SASS
    for axis, slots in roofline["axis_budget"].items():
        picked = sum(1 for p in methods["selected"] if p["axis"] == axis)
        assert picked == slots or axis in methods["underfilled"]  # an unspent slot always says why
    analysis = (tmp_path / "analysis.md").read_text()
    assert "## Methods selected" in analysis and "## Methods skipped" in analysis
    assert "compute.tensor_core" in analysis  # skipped, with its reason


def test_the_naive_sgemm_gets_what_a_performance_engineer_would_try_first(tmp_path):
    """L1 at 99% serving 88% hits, loads outnumbering FMAs, no excess sectors: stage tiles in shared memory
    and compute a register tile per thread; not coalescing (the row operand is a broadcast), not a
    persistent grid (each wave lives 200 us)."""
    import_profile(
        FIXTURES / "naive_full_raw.csv", tmp_path, context=ImportContext(model=SGEMM, dtype="float32")
    )
    assert (
        kopt(
            "select",
            "--roofline",
            tmp_path / "roofline.json",
            "--ncu-top",
            tmp_path / "ncu_top.json",
            "--dtype",
            "float32",
            "--sass",
            FIXTURES / "naive.sass.txt",
        ).returncode
        == 0
    )
    methods = json.loads((tmp_path / "methods.json").read_text())
    assert [p["id"] for p in methods["selected"]] == ["compute.register_tiling", "memory.smem_tiling"]
    skipped = {s["id"]: s["reason"] for s in methods["skipped"]}
    assert "uncoalesced_excess_sectors <= 0" in skipped["memory.coalescing"]
    # every method is gated before the ranking: the persistent grid's own trigger says why it is out
    assert skipped["compute.persistent_kernel"].startswith("not triggered by the evidence")
    assert "wave_duration_us < 20 (measured 202" in skipped["compute.persistent_kernel"]
    values = json.loads((tmp_path / "ncu_top.json").read_text())["values"]
    assert values["waves_per_sm"] >= 2 and values["wave_duration_us"] > 200  # many waves, each long
    assert not load_methods().get("compute.persistent_kernel").trigger.holds(values)
    assert skipped["memory.vectorized_access"].startswith("not reached")
    assert "kernel lacks shared_memory_staging" in skipped["latency.double_buffering"]
    assert "latency" in methods["underfilled"]


def test_standalone_needs_both_files(tmp_path):
    assert kopt("select", "--roofline", tmp_path / "roofline.json").returncode == 4


def run_with_the_naive_profile(make_pm, tmp_path):
    """A run of the example backend whose iterv1/ holds the real naive-SGEMM profile (no GPU needed)."""
    pm = make_pm(kopt_example_backend)
    for name in ("saxpy.py", "saxpy_ref.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    write_json(
        tmp_path / "env.json",
        to_data(Env(backend="pytorch", generation_allowed=True, gpu=EnvGpu(capability="9.0"))),
    )
    store = init_run(
        pm,
        baseline=tmp_path / "saxpy.py",
        ref=tmp_path / "saxpy_ref.py",
        dims={"N": 4096},
        env_path=tmp_path / "env.json",
    )
    folder = store.run_dir / "iterv1"
    import_profile(
        FIXTURES / "naive_full_raw.csv", folder, context=ImportContext(model=SGEMM, dtype="float32")
    )
    return pm, store, folder


def test_run_form_writes_into_the_iteration(make_pm, tmp_path):
    pm, store, folder = run_with_the_naive_profile(make_pm, tmp_path)
    path = select_in_run(pm, store, 1)
    methods = json.loads(path.read_text())
    assert path.parent == folder and methods["arch"] == "sm_90a" and methods["backend"] == "pytorch"
    sass_traits = {k: v for k, v in methods["kernel_tags"].items() if k != "multi_kernel"}
    assert set(sass_traits.values()) == {None}  # the profile kept no SASS: traits unknown
    assert methods["kernel_tags"]["multi_kernel"] is False  # the profile holds one kernel
    assert "kernel traits not read" in (folder / "analysis.md").read_text()
    # with the listing the profile keeps, the kernel's traits decide the kernel_has / kernel_lacks skips
    shutil.copy(FIXTURES / "naive.sass.txt", folder / "best_input.sass")
    write_json(
        folder / "profile.json",
        {
            **json.loads((folder / "profile.json").read_text()),
            "sass": {"file": "best_input.sass", "error": None},
        },
    )
    methods = json.loads(select_in_run(pm, store, 1).read_text())
    assert (
        methods["kernel_tags"]["shared_memory_staging"] is False and methods["kernel_tags"]["wgmma"] is False
    )
    assert f"kernel traits read from {folder / 'best_input.sass'}" in (folder / "analysis.md").read_text()


def test_run_form_needs_an_acknowledgement_for_an_implementation_failed_method(make_pm, tmp_path):
    pm, store, folder = run_with_the_naive_profile(make_pm, tmp_path)
    # selection reads only the run's backend name: judge the profile as the CUDA kernel it came from
    store.update(backend="cuda", implementation_failed_methods=("memory.coalescing",))
    # coalescing fires when half of this profile's global sectors are excess (as a scattered load's are)
    sectors = {
        "uncoalesced_excess_sectors": 4.0e6,
        "global_load_sectors": 8.0e6,
        "global_store_sectors": 0.0,
        "global_atomic_sectors": 0.0,
        "global_reduction_sectors": 0.0,
    }
    (folder / "ncu_top.json").write_text(
        json.dumps(
            {
                **json.loads((folder / "ncu_top.json").read_text()),
                "values": {
                    **json.loads((folder / "ncu_top.json").read_text())["values"],
                    **sectors,
                },
            }
        )
    )
    refused = json.loads(select_in_run(pm, store, 1).read_text())
    assert "memory.coalescing" not in [p["id"] for p in refused["selected"]]
    assert any(
        s["id"] == "memory.coalescing" and "acknowledgement" in s["reason"] for s in refused["skipped"]
    )
    proc = kopt("select", "--state", store.state_path, "--iter", "1", "--acknowledge", "memory.coalescing")
    assert proc.returncode == 0, proc.stderr
    admitted = json.loads((folder / "methods.json").read_text())
    # admitted to the ranking, where the staged tiles' larger headroom takes the one memory slot
    reason = next(s["reason"] for s in admitted["skipped"] if s["id"] == "memory.coalescing")
    assert reason.startswith("not reached: the memory budget (1) went to methods ranked above it")
    assert "memory.smem_tiling" in reason and "acknowledgement" not in reason
    assert [p["id"] for p in admitted["selected"] if p["axis"] == "memory"] == ["memory.smem_tiling"]


# ----------------------------------------------------------------------------- an agent's own choice
WHY = "stage the B tile in shared memory and unroll the k loop: L1 serves 88% hits at 99% throughput"


def cuda_run_with_the_naive_profile(make_pm, tmp_path):
    """The run above, judged as the CUDA kernel its profile came from (selection reads only the backend
    name)."""
    pm, store, folder = run_with_the_naive_profile(make_pm, tmp_path)
    store.update(backend="cuda")
    return pm, store, folder


def test_run_form_records_an_agent_s_choice_beside_the_scan_s_picks(make_pm, tmp_path):
    from kopt_core.run.candidates import iteration_methods

    pm, store, folder = cuda_run_with_the_naive_profile(make_pm, tmp_path)
    scan = json.loads(select_in_run(pm, store, 1).read_text())
    assert scan["chosen_by"] == "scan" and scan["why"] is None and scan["schema_version"] == 3
    assert scan["scan_selected"] == scan["selected"]
    assert "the budget-aware priority scan" in (folder / "analysis.md").read_text()
    scan_ids = [p["id"] for p in scan["selected"]]
    chosen = ["memory.smem_tiling", "compute.loop_unrolling"]
    assert "compute.loop_unrolling" not in scan_ids
    proc = kopt(
        "select", "--state", store.state_path, "--iter", "1", "--methods", ",".join(chosen), "--why", WHY
    )
    assert proc.returncode == 0, proc.stderr
    methods = json.loads((folder / "methods.json").read_text())
    assert methods["chosen_by"] == "agent" and methods["why"] == WHY
    assert [p["id"] for p in methods["selected"]] == chosen
    assert methods["scan_selected"] == scan["selected"]  # the scan's ranking, beside the choice
    assert methods["skipped"] == scan["skipped"] and methods["budget"] == scan["budget"]
    assert iteration_methods(folder) == tuple(chosen)  # what explore, sass and update read
    analysis = (folder / "analysis.md").read_text()
    who = analysis[analysis.index("## Who chose") : analysis.index("## Methods selected")]
    assert f"why, in the agent's words: {WHY}" in who
    assert "the scan's own picks on this evidence: " + ", ".join(f"`{m}`" for m in scan_ids) in who
    assert "`memory.smem_tiling`: the scan picked it too" in who
    skipped = {s["id"]: s["reason"] for s in scan["skipped"]}
    assert (
        f"`compute.loop_unrolling`: chosen although the scan skipped it: {skipped['compute.loop_unrolling']}"
        in who
    )
    for left_out in set(scan_ids) - set(chosen):
        assert f"`{left_out}`: the scan's pick, left out by the agent" in who


def test_an_agent_may_choose_no_method_for_a_hyperparameter_only_iteration(make_pm, tmp_path):
    from kopt_core.run.candidates import iteration_methods

    pm, store, folder = cuda_run_with_the_naive_profile(make_pm, tmp_path)
    choose = ("select", "--state", store.state_path, "--iter", "1", "--methods")
    mixed = kopt(*choose, "none,memory.smem_tiling", "--why", WHY)  # 'none' with a method: refused
    assert mixed.returncode == 4 and "give it alone" in mixed.stderr
    assert not (folder / "methods.json").exists()
    unexplained = kopt(*choose, "none")  # no reason: refused
    assert unexplained.returncode == 4 and "--why" in unexplained.stderr
    assert not (folder / "methods.json").exists()
    proc = kopt(*choose, "None", "--why", WHY)
    assert proc.returncode == 0, proc.stderr
    methods = json.loads((folder / "methods.json").read_text())
    assert methods["selected"] == [] and methods["chosen_by"] == "agent" and methods["why"] == WHY
    assert methods["scan_selected"]  # the scan's picks stay beside the choice
    assert iteration_methods(folder) == ()
    who = (folder / "analysis.md").read_text()
    assert "the agent's methods: none" in who


def test_a_refused_choice_writes_nothing(make_pm, tmp_path):
    pm, store, folder = cuda_run_with_the_naive_profile(make_pm, tmp_path)
    refused = ("--methods", "compute.split_k,compute.stream_k,memory.smem_tile", "--why", WHY)
    proc = kopt("select", "--state", store.state_path, "--iter", "1", *refused)
    assert proc.returncode == 4
    assert "compute.stream_k: conflicts with compute.split_k, chosen this round" in proc.stderr
    assert "unknown method id 'memory.smem_tile'" in proc.stderr and "(2 problem(s))" in proc.stderr
    assert not (folder / "methods.json").exists() and not (folder / "analysis.md").exists()
    # after a selection, a refused choice leaves it as it was
    select_in_run(pm, store, 1)
    before = {name: (folder / name).read_bytes() for name in ("methods.json", "analysis.md")}
    assert kopt("select", "--state", store.state_path, "--iter", "1", *refused).returncode == 4
    assert {name: (folder / name).read_bytes() for name in before} == before


def test_an_implementation_failed_method_needs_the_acknowledgement_in_an_agent_s_choice(make_pm, tmp_path):
    pm, store, folder = cuda_run_with_the_naive_profile(make_pm, tmp_path)
    store.update(implementation_failed_methods=("memory.smem_tiling",))
    choose = (
        "select",
        "--state",
        store.state_path,
        "--iter",
        "1",
        "--methods",
        "memory.smem_tiling",
        "--why",
        WHY,
    )
    proc = kopt(*choose)
    assert proc.returncode == 4 and not (folder / "methods.json").exists()
    assert "memory.smem_tiling: failed to implement before" in proc.stderr
    assert "--acknowledge memory.smem_tiling" in proc.stderr
    proc = kopt(*choose, "--acknowledge", "memory.smem_tiling")
    assert proc.returncode == 0, proc.stderr
    methods = json.loads((folder / "methods.json").read_text())
    assert [p["id"] for p in methods["selected"]] == ["memory.smem_tiling"] and methods[
        "chosen_by"
    ] == "agent"


def test_an_ineffective_method_is_refused_until_the_bound_changes(make_pm, tmp_path):
    """The run's history says memory.smem_tiling proved ineffective in iteration 1; iteration 2 is
    profiled with the naive SGEMM's evidence."""
    from kopt_core.records.state import HistoryEntry, RooflineHistoryEntry

    pm, store, _ = cuda_run_with_the_naive_profile(make_pm, tmp_path)
    folder = store.run_dir / "iterv2"
    import_profile(
        FIXTURES / "naive_full_raw.csv", folder, context=ImportContext(model=SGEMM, dtype="float32")
    )
    bound = json.loads((folder / "roofline.json").read_text())["bound"]
    history = (HistoryEntry(iteration=1, kernel="", best_ms=None, methods=("memory.smem_tiling",)),)
    choose = (
        "select",
        "--state",
        store.state_path,
        "--iter",
        "2",
        "--methods",
        "memory.smem_tiling",
        "--why",
        WHY,
    )
    for bound_then, code in ((bound, 4), ("latency" if bound != "latency" else "compute", 0)):
        store.update(
            history=history,
            roofline_history=(RooflineHistoryEntry(iteration=1, bound=bound_then),),
            ineffective_methods=("memory.smem_tiling",),
        )
        proc = kopt(*choose)
        assert proc.returncode == code, proc.stderr
        assert (f"proved ineffective under the same bound ({bound})" in proc.stderr) is (code == 4)
        assert (folder / "methods.json").exists() is (code == 0)


def test_a_reason_goes_with_methods_and_methods_with_a_reason(make_pm, tmp_path):
    pm, store, folder = cuda_run_with_the_naive_profile(make_pm, tmp_path)
    run = ("select", "--state", store.state_path, "--iter", "1")
    no_reason = kopt(*run, "--methods", "memory.smem_tiling")
    assert no_reason.returncode == 4 and "no reason given" in no_reason.stderr
    no_methods = kopt(*run, "--why", WHY)
    assert no_methods.returncode == 4 and "give --methods with it" in no_methods.stderr
    empty = kopt(*run, "--methods", " , ", "--why", WHY)
    assert empty.returncode == 4 and "give method ids separated by commas" in empty.stderr
    assert not (folder / "methods.json").exists()


def test_a_v1_methods_json_reads_as_the_scan_s_choice(tmp_path):
    """methods.json as kopt select wrote it at schema v1 (on this profile's evidence, before agents could
    choose): explore, sass and update read its methods, and it reads as the scan's selection."""
    from kopt_core.knowledge.select import Selection
    from kopt_core.records.versions import SELECTION_KIND, read_document
    from kopt_core.run.candidates import iteration_methods

    v1 = FIXTURES / "runs" / "sgemm_naive" / "methods_v1.json"
    data = json.loads(v1.read_text())
    assert data["schema_version"] == 1 and "chosen_by" not in data
    shutil.copy(v1, tmp_path / "methods.json")
    assert iteration_methods(tmp_path) == ("compute.register_tiling", "memory.smem_tiling")
    selection = read_document(tmp_path / "methods.json", Selection, SELECTION_KIND)
    assert selection.chosen_by == "scan" and selection.why is None and selection.schema_version == 3
    assert selection.unapplied_skips is None  # v1 recorded none: unknown, not "none affected"
    assert selection.scan_selected == selection.selected and len(selection.skipped) == len(data["skipped"])
