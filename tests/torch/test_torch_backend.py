"""The torch backend on the CPU, end to end through kopt's harness: a KernelBench-format problem imported
as a reference and a baseline, then solutions that are right, wrong, or cheating, each with the verdict and
the failure class kopt must give it."""

from __future__ import annotations

import json
import textwrap

import pytest

import kopt_example_backend
from kopt_core.errors import ConfigError
from kopt_core.records import BenchOptions
from kopt_core.steps.bench import bench_kernel, exit_code
from kopt_torch import plugin
from kopt_torch.kbimport import import_problem

FAST = BenchOptions(
    seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=120, time_reference=False
)

PROBLEM = '''
"""relu(x * w + b): a scale and shift with weights, then a ReLU."""
import torch
import torch.nn as nn

batch_size = 32
dim = 64


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim))
        self.b = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x * self.w + self.b)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''

HEAD = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim))
        self.b = nn.Parameter(torch.randn(dim))
"""


@pytest.fixture
def problem(tmp_path):
    source = tmp_path / "01_scale_relu.py"
    source.write_text(textwrap.dedent(PROBLEM))
    return import_problem(source, tmp_path / "imported")


@pytest.fixture
def bench(make_pm, problem, tmp_path):
    pm = make_pm(plugin, kopt_example_backend)

    def run(forward: str | None = None, *, text: str | None = None, **dims):
        kernel = tmp_path / "solution.py"
        kernel.write_text(
            text if text is not None else HEAD + textwrap.indent(textwrap.dedent(forward), "    ")
        )
        return bench_kernel(pm, kernel, problem.reference, dims, options=FAST)

    return run


def test_import_writes_a_reference_a_baseline_and_the_problem_description(problem):
    described = json.loads((problem.folder / "problem.json").read_text())
    assert described["dims"] == {"batch_size": 32, "dim": 64}
    assert described["inputs"] == [{"name": "x", "shape": [32, 64], "dtype": "float32"}]
    assert described["outputs"] == [{"name": "out", "shape": [32, 64], "dtype": "float32"}]
    # flops: no matmul here (FlopCounterMode counts none); bytes: x, out, w and b once each
    assert described["workload"] == {"flops": 0.0, "bytes_min": float(4 * (32 * 64 * 2 + 64 * 2))}
    assert "class ModelNew(Model)" in problem.baseline.read_text()
    assert 'kopt_problem = "problem.py"' in problem.reference.read_text()


def test_import_refuses_a_file_that_is_not_a_problem_and_writes_nothing(tmp_path):
    source = tmp_path / "not_a_problem.py"
    source.write_text("import torch\n\ndef get_inputs():\n    return []\n")
    with pytest.raises(ConfigError, match="no top-level Model, get_init_inputs"):
        import_problem(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_import_refuses_to_overwrite_an_earlier_import_without_force(problem, tmp_path):
    with pytest.raises(ConfigError, match="already holds an imported problem"):
        import_problem(tmp_path / "01_scale_relu.py", problem.folder)
    again = import_problem(tmp_path / "01_scale_relu.py", problem.folder, force=True)
    assert again.reference.is_file()


def test_the_eager_baseline_passes_with_the_problems_inputs_and_weights(make_pm, problem):
    result = bench_kernel(make_pm(plugin), problem.baseline, problem.reference, {}, options=FAST)
    assert exit_code(result) == 0, result.error
    assert [(b.name, b.role, b.realised_shape) for b in result.buffers] == [
        ("x", "input", (32, 64)),
        ("out", "output", (32, 64)),
    ]
    assert result.build.backend == "torch" and result.kernel_timing.median_ms > 0


def test_dims_override_the_problems_sizes_and_a_misspelt_one_is_refused(make_pm, problem):
    pm = make_pm(plugin)
    result = bench_kernel(pm, problem.baseline, problem.reference, {"batch_size": 8}, options=FAST)
    assert exit_code(result) == 0, result.error
    assert [b.realised_shape for b in result.buffers] == [(8, 64), (8, 64)]
    with pytest.raises(ConfigError, match="has no size batchsize"):
        bench_kernel(pm, problem.baseline, problem.reference, {"batchsize": 8}, options=FAST)


def test_a_solution_with_its_own_kernel_code_passes(bench):
    result = bench(
        "def forward(self, x):\n    return torch.clamp_min(torch.addcmul(self.b, x, self.w), 0.0)\n"
    )
    assert exit_code(result) == 0, result.error


@pytest.mark.parametrize(
    ("forward", "violation"),
    [
        # all-zero outputs: the problem's output is not near zero
        ("def forward(self, x):\n    return torch.zeros_like(x)\n", "wrong_output"),
        # caches by pointer: kopt refills the same buffers with fresh inputs
        (
            "def forward(self, x):\n"
            "    if getattr(self, 'key', None) != x.data_ptr():\n"
            "        self.key, self.out = x.data_ptr(), torch.relu(x * self.w + self.b)\n"
            "    return self.out\n",
            "wrong_output",
        ),
        # computes in its input's storage
        ("def forward(self, x):\n    return x.mul_(self.w).add_(self.b).relu_()\n", "wrote_inputs"),
        # writes only half the rows, the rest left as torch.empty gave them
        (
            "def forward(self, x):\n"
            "    out = torch.empty_like(x)\n"
            "    half = x.shape[0] // 2\n"
            "    out[:half] = torch.relu(x[:half] * self.w + self.b)\n"
            "    return out\n",
            "wrong_output",
        ),
        # the wrong shape
        ("def forward(self, x):\n    return torch.relu(x * self.w + self.b)[:, :-1]\n", "launch_failed"),
        # the wrong dtype
        ("def forward(self, x):\n    return torch.relu(x * self.w + self.b).double()\n", "launch_failed"),
        # turns TF32 on while it runs
        (
            "def forward(self, x):\n"
            "    torch.backends.cuda.matmul.allow_tf32 = True\n"
            "    return torch.relu(x * self.w + self.b)\n",
            "precision_switch",
        ),
    ],
    ids=["zeros", "pointer_cache", "inputs_modified", "partial_write", "shape", "dtype", "tf32"],
)
def test_a_broken_or_cheating_solution_is_rejected_with_its_class(bench, forward, violation):
    result = bench(forward)
    assert result.status == "failed" and exit_code(result) == 2
    assert result.violation == violation, result.error


def test_weights_come_from_the_same_seeded_construction(bench):
    """A ModelNew that makes its layers in another order gets other weights: kopt compares the outputs, so
    the solution is wrong, as KernelBench's seeded construction says it is."""
    swapped = HEAD.replace(
        "self.w = nn.Parameter(torch.randn(dim))\n        self.b = nn.Parameter(torch.randn(dim))",
        "self.b = nn.Parameter(torch.randn(dim))\n        self.w = nn.Parameter(torch.randn(dim))",
    )
    text = swapped + "\n    def forward(self, x):\n        return torch.relu(x * self.w + self.b)\n"
    result = bench(text=text)
    assert result.violation == "wrong_output"


def test_a_reference_without_a_problem_is_refused_by_the_torch_backend(make_pm, problem, tmp_path):
    reference = tmp_path / "plain_ref.py"
    reference.write_text("def reference(**args):\n    return None\n")
    with pytest.raises(ConfigError, match="needs a reference that names its problem"):
        bench_kernel(make_pm(plugin), problem.baseline, reference, {}, options=FAST)


def test_a_file_with_a_modelnew_goes_to_the_torch_backend_even_when_it_uses_triton(make_pm, tmp_path):
    from kopt_core.backends import BackendRegistry

    kernel = tmp_path / "k.py"
    kernel.write_text("import triton\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n")
    import kopt_triton.plugin

    registry = BackendRegistry.from_plugins(make_pm(plugin, kopt_triton.plugin, kopt_example_backend))
    assert registry.detect(kernel).name == "torch"


INLINE = (
    HEAD.replace(
        "import torch.nn as nn\n",
        "import torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n",
    )
    + '''
    def forward(self, x):
        return _ext.scale_shift_relu(x.contiguous(), self.w, self.b)


_ext = load_inline(
    name="kopt_test_scale_shift_relu",
    cpp_sources="""
#include <torch/extension.h>
torch::Tensor scale_shift_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto out = torch::empty_like(x);
    const float* xs = x.data_ptr<float>();
    const float* ws = w.data_ptr<float>();
    const float* bs = b.data_ptr<float>();
    float* os = out.data_ptr<float>();
    const int64_t n = x.numel(), d = w.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = xs[i] * ws[i % d] + bs[i % d];
        os[i] = v > 0.f ? v : 0.f;
    }
    return out;
}
""",
    functions=["scale_shift_relu"],
    verbose=False,
)
'''
)


def test_a_load_inline_extension_is_built_by_compile_once_and_reused(make_pm, problem, tmp_path, monkeypatch):
    """The extension builds in compile (the build pool), keyed by the file's content; the worker loads it
    built; a second compile of the same text is a cache hit that builds nothing."""
    monkeypatch.setenv("KOPT_CACHE_DIR", str(tmp_path / "cache"))
    kernel = tmp_path / "inline.py"
    kernel.write_text(INLINE)
    pm = make_pm(plugin)
    first = bench_kernel(pm, kernel, problem.reference, {}, options=FAST)
    assert exit_code(first) == 0, first.error
    assert not first.build.cache_hit and "extensions built in" in first.build.log
    assert "kopt_test_scale_shift_relu" in first.build.log and ".so" in first.build.log
    second = bench_kernel(pm, kernel, problem.reference, {}, options=FAST)
    assert exit_code(second) == 0 and second.build.cache_hit
    assert second.worker_seconds < first.build.build_seconds + first.worker_seconds


def test_an_extension_that_does_not_compile_is_a_build_failure_with_the_compilers_message(
    make_pm, problem, tmp_path, monkeypatch
):
    monkeypatch.setenv("KOPT_CACHE_DIR", str(tmp_path / "cache"))
    kernel = tmp_path / "broken.py"
    kernel.write_text(INLINE.replace("auto out = torch::empty_like(x);", "auto out = torch::empty_like(x)"))
    with pytest.raises(ConfigError, match="failed"):
        bench_kernel(make_pm(plugin), kernel, problem.reference, {}, options=FAST)


def test_the_suite_reports_each_pair_names_each_failure_and_resumes(make_pm, tmp_path, monkeypatch):
    """Three pairs through the real suite on the CPU: the eager baseline against itself, a correct
    solution, and an all-zero cheat; rows are kept, so a second run redoes nothing."""

    from kopt_torch.suite import Pair, Suite

    problem_file = tmp_path / "level1" / "01_scale_relu.py"
    problem_file.parent.mkdir()
    problem_file.write_text(textwrap.dedent(PROBLEM))
    good = tmp_path / "good.py"
    good.write_text(
        HEAD + "\n    def forward(self, x):\n        return torch.relu(torch.addcmul(self.b, x, self.w))\n"
    )
    zeros = tmp_path / "zeros.py"
    zeros.write_text(
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return torch.zeros_like(x)\n"
    )
    pairs = [Pair(problem_file, None), Pair(problem_file, good), Pair(problem_file, zeros)]
    calls = []

    def bench(*args, **kwargs):
        calls.append(args[0])
        return bench_kernel(make_pm(plugin), *args, **kwargs)

    suite = Suite(tmp_path / "suite", bench, FAST, overrides={"batch_size": 16})
    rows, scores = suite.run(pairs)
    assert [(r.solution, r.correct, r.failure) for r in rows] == [
        ("eager", True, None),
        ("good.py", True, None),
        ("zeros.py", False, "wrong_output"),
    ]
    assert rows[0].speedup > 0 and rows[2].speedup is None and "outside atol" in rows[2].reason
    assert rows[1].warnings == ("no_custom_kernel",)
    # fast_p is over the solutions; the eager row is the baseline against itself, kept apart
    assert scores["problems"] == 2 and scores["correct"] == 1 and scores["by_failure"] == {"wrong_output": 1}
    assert scores["by_level"]["1"]["problems"] == 2
    eager = json.loads((tmp_path / "suite" / "suite.json").read_text())["eager_vs_eager"]
    assert eager["problems"] == 1 and eager["correct"] == 1 and eager["min_speedup"] == rows[0].speedup
    assert len(calls) == 4  # the baseline once, then each of the three solutions
    assert (tmp_path / "suite" / "suite.md").read_text().count("| 01_scale_relu.py |") == 3
    again, _ = Suite(tmp_path / "suite", bench, FAST, overrides={"batch_size": 16}).run(pairs)
    assert again == rows and len(calls) == 4
