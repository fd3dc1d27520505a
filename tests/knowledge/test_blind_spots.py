"""The blind-spot cases (tests/fixtures/blind_spots): each passes kopt's static contract, its reference
computes what the kernel's header says, and on its H200 evidence the scan picks the method its flaw calls
for (fp32 arithmetic for fp64 work in an fp32 problem, register-pressure reduction for a local table)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from kopt_core.plugins import get_plugin_manager
from kopt_core.reference import load_reference
from kopt_core.steps.bench import static_contract
from kopt_core.steps.select import select_standalone

from .corpus_script import load

FIXTURES = Path(__file__).parents[1] / "fixtures"
BLIND = FIXTURES / "blind_spots"

script = load()
CASES = {case["name"]: case for case in script.load_cases(BLIND)}


def test_the_cases_are_the_two_the_readme_names():
    readme = (BLIND / "README.md").read_text()
    assert sorted(CASES) == ["01_gelu_fp32_double_literals", "02_piecewise_local_tables"]
    for name, case in CASES.items():
        assert f"`{name}`" in readme
        assert case["labels"]["must"] and case["labels"]["waste"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_passes_the_static_contract(name):
    case = CASES[name]
    info, _, candidate = static_contract(
        get_plugin_manager(), case["kernel"], case["ref"], case["dims"], backend=case["backend"]
    )
    assert info.name == "cuda" and Path(candidate.path) == case["kernel"].resolve()


def _reference(name: str):
    return load_reference(CASES[name]["ref"])


def test_the_gelu_reference_is_the_tanh_form_of_gelu():
    ref = _reference("01_gelu_fp32_double_literals")
    x = torch.linspace(-6.0, 6.0, 4097)
    y = torch.empty_like(x)
    ref.reference(x, y, N=x.numel())
    assert torch.allclose(y, torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-6, rtol=1e-6)
    assert y[0].item() == pytest.approx(0.0, abs=1e-6) and y[-1].item() == pytest.approx(6.0, rel=1e-6)


def test_the_piecewise_reference_picks_the_segment_the_kernel_does():
    ref = _reference("02_piecewise_local_tables")
    values = [-3.0, -2.01, -1.99, -0.3, 0.0, 0.24, 0.26, 1.0, 1.9, 2.5]
    x = torch.tensor(values)
    y = torch.empty_like(x)
    ref.reference(x, y, N=len(values))
    for v, got in zip(values, y.tolist(), strict=True):
        s = min(max(math.trunc(v * 4.0 + 8.0), 0), 15)  # as the kernel: truncate, then clamp
        a, b, c = 1.0 / (s + 1), (s - 8) * 0.125, 0.01 * s
        assert got == pytest.approx(a + v * (b + v * c), rel=1e-6, abs=1e-6), v


def _selection(name: str, bundle: str, tmp_path: Path) -> dict:
    folder = BLIND / name / "evidence" / bundle
    out = select_standalone(
        folder / "roofline.json", folder / "ncu_top.json", arch="sm_90a", backend="cuda", out_dir=tmp_path
    )
    return json.loads(out.read_text())


@pytest.mark.parametrize("bundle", ["full", "light"])
def test_fp64_work_in_an_fp32_gelu_is_given_fp32_arithmetic(bundle, tmp_path):
    selection = _selection("01_gelu_fp32_double_literals", bundle, tmp_path)
    picked = [m["id"] for m in selection["selected"]]
    assert picked[0] == "compute.fp32_arithmetic", picked
    assert not {"compute.loop_unrolling", "compute.thread_block_clusters"} & set(picked)


@pytest.mark.parametrize("bundle", ["full", "light"])
def test_a_local_table_is_given_register_pressure_reduction_not_shared_memory_tiling(bundle, tmp_path):
    selection = _selection("02_piecewise_local_tables", bundle, tmp_path)
    picked = [m["id"] for m in selection["selected"]]
    assert "latency.register_pressure_reduction" in picked
    assert "memory.smem_tiling" not in picked and "compute.thread_block_clusters" not in picked
    reason = {m["id"]: m["reason"] for m in selection["skipped"]}["memory.smem_tiling"]
    assert "local_memory_share" in reason
