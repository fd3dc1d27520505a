"""SASS of Triton kernels without a GPU: compile ahead of time for sm_90 and disassemble with the
cuobjdump that the Triton wheel ships. This is what lets kopt verify, on any machine, that a kernel
uses the instructions a method promises (warpgroup MMA for tl.dot on Hopper, plain LDG/STG for a
streaming add)."""

from __future__ import annotations

import importlib
import re

import pytest

from kopt_core.errors import HardwareError
from kopt_triton import sass  # imports Triton only when called

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install triton)")
tl = pytest.importorskip("triton.language")


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One BM x BN tile of C = A @ B (fp16 in, fp32 accumulate, fp16 out), row-major, K a multiple of BK."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * (tl.num_programs(1) * BN) + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * (tl.num_programs(1) * BN) + rn[None, :], acc.to(tl.float16))


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    total = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, total, mask=mask)


@pytest.fixture(autouse=True)
def own_triton_cache(tmp_path, monkeypatch):
    """Keep the compile out of ~/.triton (Triton reads TRITON_CACHE_DIR at each compile)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton_cache"))


def mnemonics(sass_text: str) -> set[str]:
    """Instruction names (with modifiers dropped) in a cuobjdump --dump-sass listing."""
    return set(re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass_text))


def test_the_wheel_ships_cuobjdump():
    tool = sass.find_cuobjdump()
    assert tool is not None
    assert tool.endswith("cuobjdump")


def test_tl_dot_fp16_becomes_warpgroup_mma_on_sm90(tmp_path):
    cubin = sass.compile_for(
        dot_kernel,
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32"},
        {"BM": 128, "BN": 128, "BK": 64},
        arch=90,
        num_warps=4,
        num_stages=3,
    )
    assert cubin[:4] == b"\x7fELF"
    path = tmp_path / "dot_kernel.cubin"
    path.write_bytes(cubin)
    listing = sass.disassemble(path)
    assert "sm_90" in listing
    found = mnemonics(listing)
    assert "HGMMA" in found, sorted(found)  # Hopper's warpgroup MMA: tl.dot on tensor cores
    assert re.search(r"HGMMA\.64x128x16\.F32", listing)


def test_vector_add_is_plain_global_loads_and_stores(tmp_path):
    cubin = sass.compile_for(
        add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "n": "i32"},
        {"BLOCK": 1024},
        arch="sm_90a",
    )
    path = tmp_path / "add_kernel.cubin"
    path.write_bytes(cubin)
    found = mnemonics(sass.disassemble(path))
    assert {"LDG", "STG", "FADD"} <= found, sorted(found)
    assert not {"HGMMA", "HMMA"} & found


def test_compile_for_names_missing_arguments():
    with pytest.raises(ValueError, match=r"\['BLOCK'\]"):
        sass.compile_for(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "n": "i32"}, {})
    with pytest.raises(ValueError, match="no argument"):
        sass.compile_for(add_kernel, {"w": "i32"}, {"BLOCK": 1024})


def test_disassemble_without_cuobjdump_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sass, "find_cuobjdump", lambda: None)
    verify_module = importlib.import_module(
        "kopt_core.sass.verify"
    )  # the package re-exports a same-named function
    monkeypatch.setattr(verify_module, "find_tool", lambda tool: None)  # no toolkit copy either
    with pytest.raises(HardwareError, match="cuobjdump not found"):
        sass.disassemble(tmp_path / "missing.cubin")
