"""The Triton backend's static side on the CPU: the setup/run_kernel contract read by AST (nothing is
imported), the build's content-keyed copy, and the pinning of autotuned kernels as a source rewrite."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import kopt_triton.plugin
from kopt_core.backends import backend_hooks
from kopt_core.errors import ConfigError
from kopt_core.records import Candidate, Toolchain
from kopt_triton.autotune import PinError, config_text, pin_source
from kopt_triton.build import prepare_artifact
from kopt_triton.contract import find_autotuned, parse_kernel, read_tree

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "triton"

GOOD = """
import triton

def setup(M, N, alpha: float, BLOCK=128, scale=0.5, seed=None):
    return {"inputs": {}, "outputs": []}

def run_kernel(**inputs):
    pass
"""


def write(tmp_path: Path, text: str, name: str = "kernel.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_setup_parameters_are_the_dims(tmp_path):
    interface = parse_kernel(write(tmp_path, GOOD))
    assert interface.entry == "setup" and interface.dynamic_buffers and interface.line == 4
    assert [(p.name, p.kind, p.ctype, p.dtype) for p in interface.params] == [
        ("M", "scalar", "int", "int64"),
        ("N", "scalar", "int", "int64"),
        ("alpha", "scalar", "float", "float64"),
    ]


def test_defaulted_parameters_are_dims_only_when_given(tmp_path):
    interface = parse_kernel(write(tmp_path, GOOD), {"M": 1, "N": 2, "alpha": 1.0, "scale": 0.25})
    assert [(p.name, p.dtype) for p in interface.params] == [
        ("M", "int64"),
        ("N", "int64"),
        ("alpha", "float64"),
        ("scale", "float64"),
    ]


def test_keyword_only_dims_and_kwargs_seed(tmp_path):
    path = write(tmp_path, "def setup(*, M, K=4, **rest):\n    pass\n\ndef run_kernel(**kw):\n    pass\n")
    assert [p.name for p in parse_kernel(path).params] == ["M"]
    assert [p.name for p in parse_kernel(path, {"M": 1, "K": 8}).params] == ["M", "K"]


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("def run_kernel(**kw):\n    pass\n", r"kernel\.py: no top-level `def setup\(\.\.\.\)`"),
        ("def setup(N, seed=None):\n    pass\n", r"no top-level `def run_kernel\(\.\.\.\)`"),
        (
            "def setup(N):\n    pass\n\ndef run_kernel(**kw):\n    pass\n",
            r"kernel\.py:1: setup\(N\) has no `seed` parameter.*\n.*seed=None",
        ),
        (
            "def setup(N, /, seed=None):\n    pass\n\ndef run_kernel(**kw):\n    pass\n",
            r"kernel\.py:1: .*positional-only",
        ),
        (
            "def setup(N, seed=None):\n    return {\n\ndef run_kernel(**kw):\n    pass\n",
            r"kernel\.py:2: syntax error",
        ),
        (
            "class K:\n    def setup(self, seed=None):\n        pass\n\ndef run_kernel(**kw):\n    pass\n",
            r"no top-level `def setup",
        ),
    ],
    ids=["no-setup", "no-run_kernel", "no-seed", "positional-only", "syntax-error", "nested-setup"],
)
def test_contract_errors_name_the_file_line_and_fix(tmp_path, text, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_kernel(write(tmp_path, text))


def test_the_examples_satisfy_the_contract():
    expected = {
        "vector_add": ["N"],
        "softmax": ["M", "N"],
        "matmul": ["M", "N", "K"],
        "matmul_autotune": ["M", "N", "K"],
    }
    for name, dims in expected.items():
        interface = parse_kernel(EXAMPLES / name / "kernel.py")
        assert [p.name for p in interface.params] == dims, name
        _, tree = read_tree(EXAMPLES / name / "kernel.py")
        assert bool(find_autotuned(tree)) == (name == "matmul_autotune"), name


def test_find_autotuned_spellings():
    tree = ast.parse(
        textwrap.dedent("""
        import triton
        from triton import autotune

        @triton.jit
        def plain(x):
            pass

        @triton.autotune(configs=[], key=[])
        @triton.jit
        def tuned(x):
            pass

        @triton.heuristics({})
        @autotune([], key=[])
        @triton.jit
        def tuned_too(x):
            pass
    """)
    )
    assert find_autotuned(tree) == [("tuned", 9), ("tuned_too", 15)]


def test_preflight_warns_about_autotuned_kernels(make_pm):
    pm = make_pm(kopt_triton.plugin)
    kernel = EXAMPLES / "matmul_autotune" / "kernel.py"
    report = backend_hooks(pm, "triton").preflight(
        Candidate(path=str(kernel), backend="triton"), {"M": 64, "N": 64, "K": 64}, None
    )
    assert report.backend == "triton" and report.ok
    assert len(report.warnings) == 1 and "pinned after one autotune pass" in report.warnings[0]
    assert "matmul_kernel" in report.warnings[0]
    with pytest.raises(ConfigError, match="unknown backend 'cuda'"):
        backend_hooks(pm, "cuda")


def test_interpreter_mode_registers_without_a_gpu(make_pm, monkeypatch):
    pm = make_pm(kopt_triton.plugin)
    infos: list = []
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pm.hook.kopt_register_backends(register=infos.append)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pm.hook.kopt_register_backends(register=infos.append)
    assert [info.needs_gpu for info in infos] == [True, False]
    probe = backend_hooks(pm, "triton").probe()
    assert probe.details["interpreter"] is True and "cuobjdump" in probe.details


def test_build_copies_by_content(tmp_path):
    kernel = EXAMPLES / "vector_add" / "kernel.py"
    toolchain = Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache"))
    first = prepare_artifact(Candidate(path=str(kernel), backend="triton"), toolchain)
    again = prepare_artifact(Candidate(path=str(kernel), backend="triton"), toolchain)
    other_arch = prepare_artifact(
        Candidate(path=str(kernel), backend="triton"),
        Toolchain(arch="sm_80", cache_dir=str(tmp_path / "cache")),
    )
    assert not first.cache_hit and again.cache_hit and not other_arch.cache_hit
    assert first.path == again.path != other_arch.path
    assert Path(first.path).read_bytes() == kernel.read_bytes()
    assert Path(first.path).parent.name == first.cache_key
    assert first.launcher == "kopt_triton.launch:load" and first.backend == "triton"
    assert first.arch == "sm_90a"
    assert first.compiler.startswith("triton ") and first.source == str(kernel)
    assert first.interface == parse_kernel(kernel)


# -- pinning -------------------------------------------------------------------------------------------

TWO_KERNELS = """\
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]


@triton.autotune(configs=[
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4),  # the big one
], key=["M", "N"])
@triton.jit
def first(x, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pass  # "unchanged ünïcode" stays byte-identical


@triton.autotune(CONFIGS, key=["N"], reset_to_zero=["x"])
@triton.jit
def second(x, N, BLOCK: tl.constexpr):
    pass


def run_kernel(x, M, N):
    first[(1,)](x, M, N)
    second[(1,)](x, N)
"""


def test_pin_source_replaces_only_the_configs_arguments():
    pins = [
        {
            "kernel": "first",
            "config": {"BLOCK_M": 128, "BLOCK_N": 64},
            "num_warps": 8,
            "num_stages": 4,
            "num_ctas": 1,
            "index": 1,
            "candidates": 2,
        },
        {
            "kernel": "second",
            "config": {"BLOCK": 128},
            "num_warps": 4,
            "num_stages": 3,
            "num_ctas": 1,
            "maxnreg": None,
            "index": 1,
            "candidates": 2,
        },
    ]
    pinned = pin_source(TWO_KERNELS, pins)
    # first: a literal list whose length matches the configs tried: the chosen element's own text.
    # second: configs given by name (CONFIGS): the choice is written out from the pin's values.
    expected = TWO_KERNELS.replace(
        """@triton.autotune(configs=[
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4),  # the big one
], key=["M", "N"])""",
        """@triton.autotune(configs=[triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, \
num_stages=4)], key=["M", "N"])""",
    ).replace(
        '@triton.autotune(CONFIGS, key=["N"], reset_to_zero=["x"])',
        '@triton.autotune([triton.Config({"BLOCK": 128}, num_warps=4, num_stages=3, num_ctas=1)], key=["N"], '
        'reset_to_zero=["x"])',
    )
    assert pinned == expected
    assert pinned.count("Config(") == 2 + 2  # two pinned + the unused module-level CONFIGS list
    tree = ast.parse(pinned)
    decorators = [
        node.decorator_list[0]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.decorator_list
    ]
    assert len(decorators) == 2
    for decorator in decorators:
        configs = next((k.value for k in decorator.keywords if k.arg == "configs"), None) or decorator.args[0]
        assert isinstance(configs, ast.List) and len(configs.elts) == 1


def test_pin_source_leaves_unread_pins_and_other_text_alone():
    pins = [
        {"kernel": "first", "config": None, "reason": "not launched"},
        {"kernel": "second", "config": {"BLOCK": 64}, "num_warps": 2, "index": 0, "candidates": 2},
    ]
    pinned = pin_source(TWO_KERNELS, pins)
    before, after = TWO_KERNELS.split("@triton.autotune(CONFIGS", 1)
    assert pinned.startswith(before) and pinned.endswith(after.split(", key=", 1)[1])
    assert '@triton.autotune([triton.Config({"BLOCK": 64}, num_warps=2)], key=["N"]' in pinned
    assert pin_source(TWO_KERNELS, []) == TWO_KERNELS


def test_pin_source_with_crlf_and_bare_autotune():
    source = (
        "from triton import autotune, jit, Config\r\n\r\n"
        "@autotune(configs=[Config({'B': 1}), Config({'B': 2})], key=[])\r\n"
        "@jit\r\ndef k(x, B):\r\n    pass\r\n"
    )
    pinned = pin_source(source, [{"kernel": "k", "config": {"B": 2}, "num_warps": 4}])
    assert pinned == source.replace("[Config({'B': 1}), Config({'B': 2})]", '[Config({"B": 2}, num_warps=4)]')


def test_pin_errors():
    with pytest.raises(PinError, match="no top-level function 'missing'"):
        pin_source(TWO_KERNELS, [{"kernel": "missing", "config": {}}])
    with pytest.raises(PinError, match="pre_hook"):
        config_text({"kernel": "k", "config": {}, "pre_hook": "zero_output"})
    with pytest.raises(PinError, match="not a Python literal"):
        config_text({"kernel": "k", "config": {"B": object()}})
