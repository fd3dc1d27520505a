"""kopt_torch.static: each warning code on a solution that earns it, and on a near miss that does not."""

from __future__ import annotations

import textwrap

import pytest

from kopt_torch.static import WARNING_CODES, StaticWarning, custom_code_kinds, scan_solution

HEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline
"""

KERNEL = """
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def triton_relu(x):
    out = torch.empty_like(x)
    n = out.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
"""

# A clean Triton solution: the kernel is launched from forward through a wrapper, no try, no tricks.
TRITON = (
    HEAD
    + KERNEL
    + """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        return triton_relu(x)
"""
)

CUDA = (
    HEAD
    + """
source = "torch::Tensor relu_cuda(torch::Tensor x);"
ext = load_inline(name="relu_ext", cpp_sources=source, cuda_sources="", functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = ext

    def forward(self, x):
        return self.ext.relu_cuda(x)
"""
)

PROBLEM = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.fc(x))
"""


def solution(model_new: str, extra: str = "") -> str:
    """A solution file: the header, the Triton kernel and its wrapper, ``extra`` and ``model_new``."""
    return HEAD + KERNEL + textwrap.dedent(extra) + "\n\n" + textwrap.dedent(model_new)


def codes(text: str, problem: str | None = None) -> list[str]:
    return [w.code for w in scan_solution(text, problem)]


def nest(code: str, spaces: int) -> str:
    """``code`` (lines after the first indented relative to it) placed at ``spaces`` inside a template whose
    placeholder already stands at that column."""
    return textwrap.indent(code, " " * spaces).lstrip()


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# -- clean solutions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [TRITON, CUDA], ids=["triton", "load_inline"])
def test_clean_solutions_earn_no_warning(text):
    assert scan_solution(text, PROBLEM) == ()


def test_custom_code_kinds():
    assert custom_code_kinds(TRITON) == ("triton",)
    assert custom_code_kinds(CUDA) == ("load_inline",)
    loaded = (
        HEAD + "from torch.utils import cpp_extension\nm = cpp_extension.load(name='m', sources=['m.cu'])\n"
    )
    assert custom_code_kinds(loaded) == ("cpp_extension_load",)
    raw = "import cupy as cp\nk = cp.RawKernel('...', 'relu')\n"
    assert custom_code_kinds(raw) == ("cuda_raw",)
    assert custom_code_kinds("import torch\nx = torch.relu\n") == ()
    assert custom_code_kinds("def broken(:\n") == ()
    # Importing triton is not Triton code; decorating a function is.
    assert custom_code_kinds(HEAD) == ()


def test_kinds_are_sorted_and_known():
    both = CUDA + KERNEL + "\nimport cupy\nraw = cupy.RawModule(code='')\n"
    kinds = custom_code_kinds(both)
    assert kinds == tuple(sorted(kinds)) == ("cuda_raw", "load_inline", "triton")


def test_warnings_are_sorted_records_with_known_codes():
    text = solution(
        """
        torch.backends.cuda.matmul.allow_tf32 = True

        class ModelNew(nn.Module):
            def forward(self, x):
                x.relu_()
                s = torch.cuda.Stream()
                return x.half()
        """
    )
    found = scan_solution(text)
    assert all(isinstance(w, StaticWarning) and w.code in WARNING_CODES and w.message for w in found)
    assert list(found) == sorted(found, key=lambda w: (w.line, w.code))
    assert {w.code for w in found} >= {
        "precision_flags",
        "inplace_on_input",
        "side_stream",
        "lower_precision",
    }


# -- syntax_error / no_modelnew ------------------------------------------------------------------------------


def test_syntax_error_names_the_line_and_stops():
    text = "import torch\n\nclass ModelNew(nn.Module:\n    pass\n"
    (warning,) = scan_solution(text, PROBLEM, "sol.py")
    assert warning.code == "syntax_error"
    assert warning.line == 3
    assert "sol.py" in warning.message
    assert "syntax_error" not in codes(TRITON)


def test_no_modelnew():
    text = TRITON.replace("class ModelNew", "class ModelNu")
    assert codes(text) == ["no_modelnew"]
    assert scan_solution(text)[0].line == 0
    # A top-level alias names the class.
    aliased = TRITON.replace("class ModelNew", "class Fast") + "\nModelNew = Fast\n"
    assert "no_modelnew" not in codes(aliased)
    assert codes(aliased) == []


def test_no_modelnew_keeps_file_wide_warnings():
    text = "import torch\ntorch.backends.cudnn.allow_tf32 = True\n"
    assert codes(text) == ["no_modelnew", "precision_flags"]


# -- no_custom_kernel / only_reference_ops -------------------------------------------------------------------

PLAIN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return F.relu(self.fc(x))
"""


def test_plain_pytorch_is_no_custom_kernel_and_only_reference_ops():
    found = scan_solution(PLAIN, PROBLEM)
    assert [w.code for w in found] == ["no_custom_kernel", "only_reference_ops"]
    assert {w.line for w in found} == {line_of(PLAIN, "def forward")}
    # Without the problem only the first can be decided.
    assert codes(PLAIN) == ["no_custom_kernel"]


def test_method_and_function_spellings_of_an_op_are_the_same_op():
    text = PLAIN.replace("F.relu(self.fc(x))", "self.fc(x).relu()")
    assert codes(text, PROBLEM) == ["no_custom_kernel", "only_reference_ops"]


def test_other_ops_are_not_only_reference_ops():
    text = PLAIN.replace("F.relu(self.fc(x))", "torch.sigmoid(self.fc(x)) * 2")
    assert codes(text, PROBLEM) == ["no_custom_kernel"]
    # An op the reference calls once, called twice, is not the reference again.
    twice = PLAIN.replace("F.relu(self.fc(x))", "F.relu(F.relu(self.fc(x)))")
    assert codes(twice, PROBLEM) == ["no_custom_kernel"]


def test_reference_ops_reached_through_a_helper_count():
    text = PLAIN.replace("return F.relu(self.fc(x))", "return self._impl(x)").replace(
        "    def forward", "    def _impl(self, x):\n        return torch.relu(self.fc(x))\n\n    def forward"
    )
    assert codes(text, PROBLEM) == ["no_custom_kernel", "only_reference_ops"]


def test_launching_custom_code_is_neither():
    for text in (TRITON, CUDA):
        assert not {"no_custom_kernel", "only_reference_ops"} & set(codes(text, PROBLEM))


def test_a_kernel_forward_never_launches_is_no_custom_kernel():
    text = solution(
        """
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.relu(x)
        """
    )
    found = scan_solution(text, PROBLEM)
    assert [w.code for w in found] == ["no_custom_kernel", "only_reference_ops"]
    assert "never launches" in found[0].message


@pytest.mark.parametrize(
    "extra, model_new",
    [
        # kernel kept on self
        (
            "",
            """
            class ModelNew(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.kernel = relu_kernel

                def forward(self, x):
                    out = torch.empty_like(x)
                    self.kernel[(1,)](x, out, x.numel(), BLOCK=1024)
                    return out
            """,
        ),
        # an autograd.Function
        (
            """
            class _Relu(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return triton_relu(x)
            """,
            """
            class ModelNew(nn.Module):
                def forward(self, x):
                    return _Relu.apply(x)
            """,
        ),
        # an in-module block held by ModelNew
        (
            """
            class Block(nn.Module):
                def forward(self, x):
                    return triton_relu(x)
            """,
            """
            class ModelNew(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.block = Block()

                def forward(self, x):
                    return self.block(x)
            """,
        ),
        # a layer made by a factory this module cannot see into: it may be the launch
        (
            "",
            """
            from somewhere import make_layer

            class ModelNew(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.layer = make_layer()

                def forward(self, x):
                    return self.layer(x)
            """,
        ),
    ],
    ids=["self_kernel", "autograd_function", "module_block", "opaque_layer"],
)
def test_indirect_launches_are_followed(extra, model_new):
    assert codes(solution(model_new, extra), PROBLEM) == []


def test_lazy_extension_loader_is_followed():
    text = HEAD + textwrap.dedent(
        """
        _EXT = None

        def _ext():
            global _EXT
            if _EXT is None:
                _EXT = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["go"])
            return _EXT

        class ModelNew(nn.Module):
            def forward(self, x):
                return _ext().go(x)
        """
    )
    assert codes(text, PROBLEM) == []


def test_custom_torch_ops_namespace_is_custom_code():
    text = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
    custom = text + "    def forward(self, x):\n        return torch.ops.my_ops.relu(x)\n"
    aten = text + "    def forward(self, x):\n        return torch.ops.aten.relu(x)\n"
    assert codes(custom) == []
    assert codes(aten) == ["no_custom_kernel"]


# -- fallback_to_torch ---------------------------------------------------------------------------------------


def test_try_around_a_launch_with_a_torch_except_is_a_fallback():
    text = solution(
        """
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return triton_relu(x)
                except Exception:
                    return torch.relu(x)
        """
    )
    found = scan_solution(text)
    assert [w.code for w in found] == ["fallback_to_torch"]
    assert found[0].line == line_of(text, "except Exception")
    assert "relu_kernel" in found[0].message and "torch.relu" in found[0].message


@pytest.mark.parametrize(
    "handler",
    [
        "except:\n    out = F.relu(x)",
        "except RuntimeError as exc:\n    print(exc)\n    out = x.clamp(min=0)",
        "except (RuntimeError, ValueError):\n    out = self._reference(x)",
        "except BaseException:\n    return x",
    ],
    ids=["bare_functional", "runtime_tensor_method", "torch_helper_method", "returns_input"],
)
def test_fallback_handler_forms(handler):
    handler = nest(handler, 16)
    text = solution(
        f"""
        class ModelNew(nn.Module):
            def _reference(self, x):
                return torch.relu(x)

            def forward(self, x):
                try:
                    out = triton_relu(x)
                {handler}
                return out
        """
    )
    assert codes(text) == ["fallback_to_torch"]


def test_fallback_inside_a_helper_forward_calls():
    text = solution(
        """
        def guarded(x):
            try:
                return triton_relu(x)
            except Exception:
                return torch.relu(x)

        class ModelNew(nn.Module):
            def forward(self, x):
                return guarded(x)
        """
    )
    assert codes(text) == ["fallback_to_torch"]


def test_fallback_around_an_extension_call():
    text = CUDA.replace(
        "        return self.ext.relu_cuda(x)",
        "        try:\n            return self.ext.relu_cuda(x)\n        except Exception:\n"
        "            return torch.relu(x)",
    )
    assert codes(text) == ["fallback_to_torch"]


def test_try_around_plain_torch_is_not_a_fallback():
    text = solution(
        """
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    x = x.contiguous()
                except RuntimeError:
                    x = x.clone()
                return triton_relu(x)
        """
    )
    assert codes(text) == []


@pytest.mark.parametrize(
    "handler",
    [
        "except Exception as exc:\n    raise RuntimeError('kernel failed') from exc",
        "except Exception:\n    print('failed')\n    raise",
        "except Exception:\n    self.failed = True\n    return None",
    ],
    ids=["re_raises", "logs_and_re_raises", "sets_a_flag"],
)
def test_handlers_that_do_not_compute_are_not_fallbacks(handler):
    handler = nest(handler, 16)
    text = solution(
        f"""
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return triton_relu(x)
                {handler}
        """
    )
    assert "fallback_to_torch" not in codes(text)


def test_a_try_outside_modelnew_reach_is_not_a_fallback():
    text = TRITON + textwrap.dedent(
        """
        def unused(x):
            try:
                return triton_relu(x)
            except Exception:
                return torch.relu(x)
        """
    )
    assert codes(text) == []


# -- precision_flags -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "torch.backends.cuda.matmul.allow_tf32 = True",
        "torch.backends.cudnn.allow_tf32 = True",
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True",
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True",
        "torch.set_float32_matmul_precision('high')",
    ],
)
def test_precision_flags(statement):
    text = TRITON.replace("\n\nclass ModelNew", f"\n{statement}\n\nclass ModelNew")
    found = scan_solution(text)
    assert [w.code for w in found] == ["precision_flags"]
    assert found[0].line == line_of(text, statement)


@pytest.mark.parametrize(
    "statement",
    [
        "torch.backends.cudnn.benchmark = True",
        "torch.backends.cuda.matmul.allow_tf32 = False",
        "torch.set_float32_matmul_precision('highest')",
        "allow_tf32 = True",
    ],
)
def test_not_precision_flags(statement):
    text = TRITON.replace("\n\nclass ModelNew", f"\n{statement}\n\nclass ModelNew")
    assert codes(text) == []


def test_precision_flag_set_inside_init_through_an_alias():
    text = TRITON.replace("import torch\n", "import torch\nimport torch.backends.cuda as tbc\n", 1).replace(
        "        super().__init__()", "        super().__init__()\n        tbc.matmul.allow_tf32 = True"
    )
    assert codes(text) == ["precision_flags"]


# -- side_stream ---------------------------------------------------------------------------------------------


def test_side_stream():
    text = solution(
        """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.stream = torch.cuda.Stream()

            def forward(self, x):
                with torch.cuda.stream(self.stream):
                    return triton_relu(x)
        """
    )
    found = scan_solution(text)
    assert [w.code for w in found] == ["side_stream", "side_stream"]
    assert [w.line for w in found] == [line_of(text, "torch.cuda.Stream()"), line_of(text, "with torch")]


def test_current_stream_is_not_a_side_stream():
    text = TRITON.replace("        x = x.contiguous()", "        torch.cuda.current_stream().synchronize()")
    assert codes(text) == []


# -- caches_by_pointer ---------------------------------------------------------------------------------------


def test_caching_by_data_ptr():
    text = solution(
        """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.seen = None
                self.cached = None

            def forward(self, x):
                key = (x.data_ptr(), tuple(x.shape))
                if key != self.seen:
                    self.seen, self.cached = key, triton_relu(x)
                return self.cached
        """
    )
    found = scan_solution(text)
    assert [w.code for w in found] == ["caches_by_pointer", "caches_by_pointer"]
    assert [w.line for w in found] == [line_of(text, "if key != self.seen"), line_of(text, "self.seen, self")]


def test_caching_by_id_in_a_module_dict():
    text = solution(
        """
        class ModelNew(nn.Module):
            def forward(self, x):
                if id(x) in _RESULTS:
                    return _RESULTS[id(x)]
                _RESULTS[id(x)] = out = triton_relu(x)
                return out
        """,
        extra="\n_RESULTS = {}\n",
    )
    assert set(codes(text)) == {"caches_by_pointer"}


@pytest.mark.parametrize(
    "body",
    [
        # an alignment check: the address is read, not kept
        "assert x.data_ptr() % 16 == 0\nreturn triton_relu(x)",
        # the address passed to a kernel
        "out = torch.empty_like(x)\nptrs = (x.data_ptr(), out.data_ptr())\n"
        "relu_kernel[(1,)](x, out, x.numel(), BLOCK=1024)\nreturn out",
        # a cache keyed by shape, not by address
        "key = tuple(x.shape)\nif key not in self.plans:\n    self.plans[key] = 1\nreturn triton_relu(x)",
        # a weight transform cached by the weight's own address
        "if self.w_ptr != self.weight.data_ptr():\n    self.w_ptr = self.weight.data_ptr()\n"
        "return triton_relu(x)",
    ],
    ids=["alignment", "kernel_argument", "shape_key", "weight_pointer"],
)
def test_not_caching_by_pointer(body):
    body = nest(body, 16)
    text = solution(
        f"""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.plans = {{}}
                self.weight = nn.Parameter(torch.ones(1))
                self.w_ptr = None

            def forward(self, x):
                {body}
        """
    )
    assert codes(text) == []


# -- inplace_on_input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "x.relu_()",
        "y.add_(1.0)",
        "torch.relu_(x)",
        "F.relu(x, inplace=True)",
        "torch.mul(x, 2, out=x)",
        "x[0] = 0",
    ],
)
def test_inplace_on_input(statement):
    text = solution(
        f"""
        class ModelNew(nn.Module):
            def forward(self, x, y):
                {statement}
                return triton_relu(x)
        """
    )
    found = scan_solution(text)
    assert [w.code for w in found] == ["inplace_on_input"]
    assert found[0].line == line_of(text, statement)


@pytest.mark.parametrize(
    "statements",
    [
        "out = torch.empty_like(x)\nout.zero_()",  # a temporary of forward's own
        "x = x.clone()\nx.relu_()",  # the name no longer is the input
        "x.requires_grad_(False)",  # a flag, not the data
        "self.buf.copy_(x)",  # writes a buffer of the module, reads the input
    ],
    ids=["local_temp", "rebound", "flag", "module_buffer"],
)
def test_not_inplace_on_input(statements):
    statements = nest(statements, 16)
    text = solution(
        f"""
        class ModelNew(nn.Module):
            def forward(self, x):
                {statements}
                return triton_relu(x)
        """
    )
    assert codes(text) == []


# -- lower_precision -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cast",
    [
        "x.half()",
        "x.bfloat16()",
        "x.to(torch.float16)",
        "x.to(dtype=torch.bfloat16)",
        "x.to('cuda', torch.half)",
    ],
)
def test_lower_precision(cast):
    text = TRITON.replace("x = x.contiguous()", f"x = {cast}")
    found = scan_solution(text)
    assert [w.code for w in found] == ["lower_precision"]
    assert found[0].line == line_of(text, cast)


def test_lower_precision_in_a_helper_forward_calls():
    text = TRITON.replace(
        "    out = torch.empty_like(x)\n", "    x = x.half()\n    out = torch.empty_like(x)\n"
    )
    assert codes(text) == ["lower_precision"]


@pytest.mark.parametrize("cast", ["x.float()", "x.to(torch.float32)", "x.to(x.device)", "x.to('cuda')"])
def test_not_lower_precision(cast):
    text = TRITON.replace("x = x.contiguous()", f"x = {cast}")
    assert codes(text) == []


def test_kernel_code_is_not_host_code():
    # A cast inside the Triton kernel is device code: not what this warning is about.
    text = TRITON.replace(
        "tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0)", "tl.load(x_ptr + offs).to(tl.float16)"
    )
    assert codes(text) == []
