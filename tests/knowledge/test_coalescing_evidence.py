"""The coalescing evidence (issue 27): the share of a kernel's global sectors that a coalesced pattern
would not fetch, the share its atomics take, and sectors per load request over what the widest load
in the SASS needs. A GEMM epilogue's few half-efficient stores and a 16-byte vector load's 16 sectors
per request are coalesced; a warp reading 32 floats 32 sectors apart is not; the scatter of global
atomics is privatisation's evidence, not coalescing's. Real H200 profiles from the tuning ladders and
the selection corpus (the held-out ladders are scored, never used here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kopt_core.knowledge.evidence import KernelFacts, derived_evidence, widest_global_load
from kopt_core.steps.select import read_evidence, select_standalone

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUNS = FIXTURES / "h200" / "runs"


@pytest.mark.parametrize(
    "mnemonics, widest",
    [
        (("LDG.E", "LDG.E.128.CONSTANT"), 16),
        (("LDG.E.LTC128B.U16",), 2),  # LTC128B is an L2 prefetch hint, not a width
        (("LDG.E.LTC128B",), 4),
        (("LDGSTS.E.BYPASS.LTC128B.128",), 16),  # cp.async reads global memory too
        (("LDG.E.U8.CONSTANT", "LDG.E.S8"), 1),
        (("LDG.E.64", "LDG.E.U16"), 8),
        (("LDG.64",), 8),  # the size modifier right after the opcode
        (("LDGDEPBAR", "STG.E.128", "FFMA"), None),  # no global load
        ((), None),
        (None, None),
    ],
)
def test_the_widest_global_load_is_read_off_its_size_modifier(mnemonics, widest):
    assert widest_global_load(mnemonics) == widest


def _derived(values: dict, mnemonics=("LDG.E",)) -> dict:
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    return derived_evidence(roofline, {**ncu_top.values, **values}, KernelFacts(mnemonics=mnemonics))


SECTORS = {"global_load_sectors": 50.0, "global_store_sectors": 30.0}
ATOMICS = {"global_atomic_sectors": 5.0, "global_reduction_sectors": 15.0}


def test_the_excess_share_is_over_every_global_sector_and_the_atomic_share_over_the_same():
    values = _derived({"uncoalesced_excess_sectors": 25.0, **SECTORS, **ATOMICS})
    assert values["uncoalesced_excess_share"] == 0.25  # 25 of 50 + 30 + 5 + 15
    assert values["global_atomic_share"] == 0.2  # 5 + 15 of 100


@pytest.mark.parametrize("unknown", [*SECTORS, *ATOMICS])
def test_a_share_is_unknown_when_one_of_its_counts_is(unknown):
    values = _derived({"uncoalesced_excess_sectors": 25.0, **SECTORS, **ATOMICS, unknown: None})
    assert values["uncoalesced_excess_share"] is None and values["global_atomic_share"] is None


def test_a_share_is_unknown_without_global_traffic_or_without_the_excess():
    zero = {key: 0.0 for key in (*SECTORS, *ATOMICS)}
    assert _derived({"uncoalesced_excess_sectors": 0.0, **zero})["uncoalesced_excess_share"] is None
    assert (
        _derived({"uncoalesced_excess_sectors": None, **SECTORS, **ATOMICS})["uncoalesced_excess_share"]
        is None
    )
    assert (
        _derived({"uncoalesced_excess_sectors": 0.0, **SECTORS, **ATOMICS})["uncoalesced_excess_share"] == 0
    )
    one = {**zero, "global_load_sectors": 1.0}  # a single sector, all of it excess
    assert _derived({"uncoalesced_excess_sectors": 1.0, **one})["uncoalesced_excess_share"] == 1.0


@pytest.mark.parametrize(
    "per_request, mnemonics, over",
    [
        (16.0, ("LDG.E.128",), 1.0),  # 32 lanes x 16 bytes = 16 sectors: coalesced
        (32.0, ("LDG.E",), 8.0),  # a float per sector
        (16.0, ("LDG.E.U16",), 8.0),  # 2-byte loads 16 bytes apart
        (None, ("LDG.E",), None),
        (4.0, ("FFMA",), None),  # no load in the listing: no width
        (4.0, None, None),
    ],
)
def test_sectors_per_request_are_read_against_the_widest_load(per_request, mnemonics, over):
    values = _derived({"global_load_sectors_per_request": per_request}, mnemonics)
    assert values["load_sectors_over_ideal"] == over


def _selected(folder: Path, backend: str, tmp_path: Path) -> dict:
    out = select_standalone(
        folder / "roofline.json", folder / "ncu_top.json", arch="sm_90a", backend=backend, out_dir=tmp_path
    )
    return json.loads(out.read_text())


LADDERS = FIXTURES / "ladders"
CORPUS = FIXTURES / "selection"


@pytest.mark.parametrize(
    "folder",
    [
        LADDERS / "sgemm_siboehm/06_vectorized/evidence/full",  # float4 loads, an epilogue's stores
        LADDERS / "sgemm_siboehm/05_2d_blocktiling/evidence/full",  # excess 10% of its traffic
        LADDERS / "scan/04_reduce_then_scan_coarsened/evidence/full",  # 0.1%
    ],
)
def test_coalesced_kernels_are_not_given_coalescing(folder, tmp_path):
    selection = _selected(folder, "cuda", tmp_path)
    assert "memory.coalescing" not in [m["id"] for m in selection["selected"]]
    reason = {m["id"]: m["reason"] for m in selection["skipped"]}["memory.coalescing"]
    assert reason.startswith("not triggered by the evidence")


@pytest.mark.parametrize(
    "folder",
    [
        LADDERS / "sgemm_siboehm/01_naive/evidence/full",
        LADDERS / "layernorm_llmc/01_thread_per_row/evidence/full",
        LADDERS / "transpose_nvidia/01_naive/evidence/full",  # its stores scatter, its loads do not
        CORPUS / "12_gather_rows_thread_per_row/evidence/light",  # light: sectors per request alone
    ],
)
def test_uncoalesced_kernels_are_given_coalescing(folder, tmp_path):
    assert "memory.coalescing" in [m["id"] for m in _selected(folder, "cuda", tmp_path)["selected"]]


def test_the_scatter_of_global_atomics_is_not_a_coalescing_problem(tmp_path):
    selection = _selected(CORPUS / "02_histogram_global_atomics/evidence/full", "cuda", tmp_path)
    picks = [m["id"] for m in selection["selected"]]
    assert "memory.atomic_privatization" in picks and "memory.coalescing" not in picks
    reason = {m["id"]: m["reason"] for m in selection["skipped"]}["memory.coalescing"]
    assert "atomics" in reason and "global_atomic_share" in reason
