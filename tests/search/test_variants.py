"""One configuration as a kernel file: the .cu variant with its #defines (and one that nvcc builds), the
Triton variants (rewritten assignments, a pinned autotune list), config ids and config.json."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest

from kopt_core.errors import ConfigError
from kopt_core.search.space import module_assignments, parse_cu_space, read_space
from kopt_core.search.variants import config_id, render_variant, write_variant
from kopt_cuda.signature import parse_solve
from kopt_triton.contract import autotune_sites
from kopt_triton.search import AutotuneSpace, parse_triton_space

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
SGEMM = DATA / "sgemm_tiled.cu"
AUTOTUNE_EXAMPLE = REPO / "examples" / "triton" / "matmul_autotune" / "kernel.py"
CHOSEN = {"BLOCK_M": 128, "BLOCK_N": 32, "BLOCK_K": 32, "THREAD_TILE": 8}


def test_config_id_is_the_sha256_of_the_canonical_json():
    expected = hashlib.sha256(b'{"A":1,"B":"x","C":0.5}').hexdigest()[:10]

    assert config_id({"B": "x", "A": 1, "C": 0.5}) == expected
    assert config_id({"C": 0.5, "A": 1, "B": "x"}) == expected
    assert config_id({"A": 1.0, "B": "x", "C": 0.5}) != expected  # 1 and 1.0 are different choices
    assert config_id({"A": True, "B": "x", "C": 0.5}) != expected


# --- .cu ---------------------------------------------------------------------------------------------


def test_cu_variant_defines_the_values_after_the_leading_comments():
    space = read_space(SGEMM)
    original = space.text.split("\n")

    variant = render_variant(space, CHOSEN).split("\n")

    assert variant[:14] == original[:14]  # the header comment block and the blank line after it
    assert variant[14:20] == [
        f"// kopt search: configuration {config_id(CHOSEN)}",
        "#define BLOCK_M 128",
        "#define BLOCK_N 32",
        "#define BLOCK_K 32",
        "#define THREAD_TILE 8",
        "#line 15",
    ]
    assert variant[20:] == original[14:]  # the rest unchanged, from original line 15 (#include) on
    assert original[14] == "#include <cuda_runtime.h>"


def test_cu_variant_keeps_the_solve_contract():
    space = read_space(SGEMM)

    original = parse_solve(space.text, "sgemm_tiled.cu")
    variant = parse_solve(render_variant(space, CHOSEN), "kernel.cu")

    assert [(p.name, p.kind, p.ctype) for p in variant.params] == [
        (p.name, p.kind, p.ctype) for p in original.params
    ]
    assert [p.name for p in variant.params] == ["A", "B", "C", "M", "N", "K"]


def test_cu_variant_writes_strings_and_floats_as_they_are_and_keeps_crlf():
    text = (
        "// kopt:space SCHEDULE = [cutlass::gemm::KernelTmaWarpSpecialized, Pingpong]\r\n"
        "// kopt:space ALPHA = [0.5, 1e-05]\r\n"
        "using Schedule = SCHEDULE;\r\nconstexpr float kAlpha = ALPHA;\r\n"
    )
    space = parse_cu_space(text, "k.cu")
    config = {"SCHEDULE": "cutlass::gemm::KernelTmaWarpSpecialized", "ALPHA": 1e-05}

    variant = render_variant(space, config)

    assert variant == (
        "// kopt:space SCHEDULE = [cutlass::gemm::KernelTmaWarpSpecialized, Pingpong]\r\n"
        "// kopt:space ALPHA = [0.5, 1e-05]\r\n"
        f"// kopt search: configuration {config_id(config)}\r\n"
        "#define SCHEDULE cutlass::gemm::KernelTmaWarpSpecialized\r\n"
        "#define ALPHA 1e-05\r\n"
        "#line 3\r\n"
        "using Schedule = SCHEDULE;\r\nconstexpr float kAlpha = ALPHA;\r\n"
    )


def test_cu_variant_after_a_block_comment():
    text = "/* header\n   // kopt:space N = [1, 2]\n*/\nint a[N];\n"

    variant = render_variant(parse_cu_space(text, "k.cu"), {"N": 2})

    assert variant == (
        f"/* header\n   // kopt:space N = [1, 2]\n*/\n// kopt search: configuration {config_id({'N': 2})}\n"
        "#define N 2\n#line 4\nint a[N];\n"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"BLOCK_M": 128, "BLOCK_N": 32, "BLOCK_K": 32}, r"missing \['THREAD_TILE'\], unknown nothing"),
        ({**CHOSEN, "EXTRA": 1}, r"missing nothing, unknown \['EXTRA'\]"),
        ({**CHOSEN, "BLOCK_M": 96}, r"BLOCK_M=96 is not one of its values \[32, 64, 128\]"),
        ({**CHOSEN, "BLOCK_M": 128.0}, r"BLOCK_M=128\.0 is not one of its values"),
    ],
)
def test_a_configuration_outside_the_space_is_refused(config, message):
    with pytest.raises(ConfigError, match=message):
        render_variant(read_space(SGEMM), config)


def test_write_variant_writes_the_kernel_and_its_config(tmp_path):
    space = read_space(SGEMM)

    kernel = write_variant(space, CHOSEN, tmp_path / "v")

    assert kernel == tmp_path / "v" / "kernel.cu"
    assert kernel.read_text() == render_variant(space, CHOSEN)
    assert json.loads((tmp_path / "v" / "config.json").read_text()) == {
        "schema_version": 1,
        "config_id": config_id(CHOSEN),
        "config": CHOSEN,
        "source": str(SGEMM),
        "kind": "cu_defines",
        "space_id": space.space_id,
    }


@pytest.mark.nvcc
def test_cu_variant_builds_as_a_kopt_kernel_with_the_chosen_tile_sizes(tmp_path):
    from kopt_core.records import Candidate, Toolchain
    from kopt_cuda.backend import compile_solve

    kernel = write_variant(read_space(SGEMM), CHOSEN, tmp_path / "variant")
    toolchain = Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache"))

    artifact = compile_solve(Candidate(path=str(kernel), backend="cuda"), tmp_path / "build", toolchain)

    # The shared tiles are As[BLOCK_K][BLOCK_M] and Bs[BLOCK_K][BLOCK_N] floats: 20480 bytes for the chosen
    # values, where the kernel's defaults (64, 64, 16) would give 8192.
    (resources,) = [r for r in artifact.resources if "sgemm_tiled_kernel" in r.name]
    assert resources.shared_bytes == (32 * 128 + 32 * 32) * 4 == 20480
    assert artifact.interface is not None
    assert [p.name for p in artifact.interface.params] == ["A", "B", "C", "M", "N", "K"]
    assert Path(artifact.path).is_file()


# --- Triton ------------------------------------------------------------------------------------------


def test_triton_variant_rewrites_only_the_assignments():
    space = read_space(DATA / "triton_matmul.py")
    config = {"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 32, "NUM_WARPS": 4, "NUM_STAGES": 4}

    variant = render_variant(space, config)

    values = {
        name: ast.literal_eval(node)
        for name, ((_, node),) in module_assignments(ast.parse(variant)).items()
        if name in config and node is not None
    }
    assert values == config
    changed = [
        (before, after)
        for before, after in zip(space.text.split("\n"), variant.split("\n"), strict=True)
        if before != after
    ]
    assert changed == [
        ("BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64", "BLOCK_M, BLOCK_N, BLOCK_K = 256, 64, 32"),
        ("NUM_WARPS: int = 8", "NUM_WARPS: int = 4"),
        ("NUM_STAGES = 3  # K-steps of A and B in flight", "NUM_STAGES = 4  # K-steps of A and B in flight"),
    ]


def test_triton_variant_writes_strings_floats_and_booleans_as_literals():
    text = 'kopt_space = {"MODE": ["a", "é b"], "SCALE": [0.5, 2.0], "FAST": [True, False]}\n'
    text += 'MODE = "a"  # naïve\nSCALE = 1 * 0.5\nFAST = True\n'
    space = parse_triton_space(text, "k.py")

    variant = render_variant(space, {"MODE": "é b", "SCALE": 2.0, "FAST": False})

    assert variant == text.replace('MODE = "a"', "MODE = 'é b'").replace("1 * 0.5", "2.0").replace(
        "FAST = True", "FAST = False"
    )


def test_autotune_variant_keeps_only_the_chosen_config(tmp_path):
    space = parse_triton_space(AUTOTUNE_EXAMPLE.read_text(), str(AUTOTUNE_EXAMPLE))

    kernel = AutotuneSpace(space).write({"config": 2}, tmp_path / "v")

    tree = ast.parse(kernel.read_text())
    (site,) = autotune_sites(tree)
    assert isinstance(site.configs, ast.List)
    (only,) = site.configs.elts
    assert ast.get_source_segment(kernel.read_text(), only) == space.autotune_configs[2]
    assert '"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64' in space.autotune_configs[2]
    document = json.loads((tmp_path / "v" / "config.json").read_text())
    assert document["config"] == {"config": 2}
    assert document["autotune_kernel"] == "matmul_kernel"
    assert document["autotune_config"] == space.autotune_configs[2]
    assert kernel.name == "kernel.py"
