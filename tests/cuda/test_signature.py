"""parse_solve: the extern "C" solve(...) contract of .cu kernel files, read without a compiler."""

from __future__ import annotations

import pytest

from kopt_core.errors import ConfigError
from kopt_core.records.kernel import KernelInterface, Param
from kopt_cuda.signature import SCALAR_CTYPES, TORCH_DTYPE_OF, parse_solve


def test_original_skill_signature():
    interface = parse_solve('extern "C" void solve(const float* input, float* output, int N);', "k.cu")

    assert interface == KernelInterface(
        entry="solve",
        params=(
            Param("input", "buffer", "const float*", "float32", is_const=True),
            Param("output", "buffer", "float*", "float32", is_const=False),
            Param("N", "scalar", "int", "int32"),
        ),
        source="k.cu",
        line=1,
    )
    assert [p.name for p in interface.buffers] == ["input", "output"]
    assert [p.name for p in interface.scalars] == ["N"]


def test_cutlass_signature():
    source = (
        "#include <cutlass/numeric_types.h>\n"
        'extern "C" void solve(const cutlass::half_t* A, const cutlass::half_t* B, cutlass::half_t* C,'
        " int M, int N, int K) {}\n"
    )
    interface = parse_solve(source)

    assert interface.line == 2
    assert [(p.name, p.ctype, p.dtype, p.is_const) for p in interface.buffers] == [
        ("A", "const cutlass::half_t*", "float16", True),
        ("B", "const cutlass::half_t*", "float16", True),
        ("C", "cutlass::half_t*", "float16", False),
    ]
    assert [(p.name, p.dtype) for p in interface.scalars] == [("M", "int32"), ("N", "int32"), ("K", "int32")]


@pytest.mark.parametrize(
    ("written", "kind", "ctype", "dtype", "is_const"),
    [
        ("const __nv_bfloat16* x", "buffer", "const __nv_bfloat16*", "bfloat16", True),
        ("cutlass::bfloat16_t* x", "buffer", "cutlass::bfloat16_t*", "bfloat16", False),
        ("const float* __restrict__ x", "buffer", "const float*", "float32", True),
        ("float* __restrict x", "buffer", "float*", "float32", False),
        ("float const* x", "buffer", "const float*", "float32", True),
        ("float const * x", "buffer", "const float*", "float32", True),
        ("const float *const x", "buffer", "const float*", "float32", True),
        ("float *const x", "buffer", "float*", "float32", False),
        ("const double* x", "buffer", "const double*", "float64", True),
        ("__half* x", "buffer", "__half*", "float16", False),
        ("const half* x", "buffer", "const half*", "float16", True),
        ("const __nv_fp8_e4m3* x", "buffer", "const __nv_fp8_e4m3*", "float8_e4m3fn", True),
        ("cutlass::float_e5m2_t* x", "buffer", "cutlass::float_e5m2_t*", "float8_e5m2", False),
        ("const int8_t* x", "buffer", "const int8_t*", "int8", True),
        ("unsigned char* x", "buffer", "unsigned char*", "uint8", False),
        ("const int* x", "buffer", "const int*", "int32", True),
        ("unsigned int* x", "buffer", "unsigned int*", "uint32", False),
        ("long long* x", "buffer", "long long*", "int64", False),
        ("const int64_t* x", "buffer", "const int64_t*", "int64", True),
        ("std::uint16_t* x", "buffer", "std::uint16_t*", "uint16", False),
        ("bool* x", "buffer", "bool*", "bool", False),
        ("const void* x", "buffer", "const void*", None, True),
        ("int x", "scalar", "int", "int32", False),
        ("const int x", "scalar", "const int", "int32", False),
        ("int const x", "scalar", "const int", "int32", False),
        ("size_t x", "scalar", "size_t", "uint64", False),
        ("unsigned x", "scalar", "unsigned", "uint32", False),
        ("long x", "scalar", "long", "int64", False),
        ("unsigned long long x", "scalar", "unsigned long long", "uint64", False),
        ("int64_t x", "scalar", "int64_t", "int64", False),
        ("ptrdiff_t x", "scalar", "ptrdiff_t", "int64", False),
        ("short x", "scalar", "short", "int16", False),
        ("float x", "scalar", "float", "float32", False),
        ("double x", "scalar", "double", "float64", False),
        ("bool x", "scalar", "bool", "bool", False),
    ],
)
def test_parameter_spellings(written, kind, ctype, dtype, is_const):
    interface = parse_solve(f'extern "C" void solve({written}) {{}}')

    assert interface.params == (Param("x", kind, ctype, dtype, is_const),)


def test_every_scalar_dtype_has_a_ctypes_type():
    assert {TORCH_DTYPE_OF[spelling] for spelling in ("int", "size_t", "float", "double", "char")} <= set(
        SCALAR_CTYPES
    )
    assert SCALAR_CTYPES["int32"] == "c_int32" and SCALAR_CTYPES["uint64"] == "c_uint64"
    assert "float16" not in SCALAR_CTYPES  # ctypes cannot pass a half by value


def test_extern_c_block_with_multiline_params_and_comments():
    source = """\
#include <cuda_bf16.h>
// extern "C" void solve(int commented_out);
/* extern "C" void solve(
   int also_commented_out); */
static const char* banner = "extern \\"C\\" void solve(int in_a_string)";

__global__ void scale(const float* in, float* out, int n) { out[0] = in[0] * n; }

void solve(double not_c_linkage) {}

#ifdef __cplusplus
extern "C" {
#endif

void solve(
    const __nv_bfloat16* __restrict__ x,   // input
    __nv_bfloat16* y,
    size_t n)
{
    scale<<<1, 1>>>(nullptr, nullptr, 0);
}

#ifdef __cplusplus
}
#endif
"""
    interface = parse_solve(source, "block.cu")

    assert interface.line == 15
    assert interface.source == "block.cu"
    assert [(p.name, p.kind, p.dtype, p.is_const) for p in interface.params] == [
        ("x", "buffer", "bfloat16", True),
        ("y", "buffer", "bfloat16", False),
        ("n", "scalar", "uint64", False),
    ]


def test_attributes_and_specifiers_between_extern_c_and_void():
    source = (
        '\n\nextern "C" __attribute__((visibility("default"))) __host__ inline\n'
        "void\nsolve(float* out, int n) {}\n"
    )
    interface = parse_solve(source)

    assert interface.line == 5
    assert [p.name for p in interface.params] == ["out", "n"]


def test_forward_declaration_and_calls_are_not_a_second_entry_point():
    source = """\
extern "C" void solve(const float*, float*, int);
void run_twice(const float* a, float* b, int n) { solve(a, b, n); if (n) solve(a, b, n); }
extern "C" void solve(const float* a, float* b, int n)
{
}
"""
    interface = parse_solve(source)

    assert interface.line == 3
    assert [p.name for p in interface.params] == ["a", "b", "n"]


def test_void_parameter_list_has_no_params():
    assert parse_solve('extern "C" void solve(void) {}').params == ()


def test_custom_entry_name():
    source = 'extern "C" void launch(float* y);\nextern "C" void solve(int n);'
    interface = parse_solve(source, entry="launch")

    assert interface.entry == "launch"
    assert [p.name for p in interface.params] == ["y"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("__global__ void k(float* x) {}\n", ["k.cu", 'extern "C" void solve(']),
        ('// extern "C" void solve(float* x);\n', ["k.cu", 'extern "C" void solve(']),
        ("\n\nvoid solve(float* x) {}\n", ["k.cu:3", 'not declared extern "C"']),
        ('extern "C" int solve(float* x) {}\n', ["k.cu:1", "returns 'int'"]),
        ('extern "C" {\nstatic void solve(float* x) {}\n}\n', ["k.cu:2", "static"]),
        ('extern "C" __global__ void solve(float* x) {}\n', ["k.cu:1", "__global__"]),
        (
            'extern "C" void solve(\n  const float4* vec,\n  int n) {}\n',
            ["k.cu:2", "'vec'", "float4", "buffers(**dims)"],
        ),
        ('extern "C" void solve(float* y, __half alpha) {}\n', ["k.cu:1", "'alpha'", "__half", "by value"]),
        ('extern "C" void solve(const float*, float* out) {}\n', ["k.cu:1", "const float*", "no name"]),
        ('extern "C" void solve(\n\n  float** ptrs) {}\n', ["k.cu:3", "ptrs", "pointer to a pointer"]),
        ('extern "C" void solve(float* y, int& n) {}\n', ["k.cu:1", "int& n", "reference"]),
        ('extern "C" void solve(float* y, int n = 4) {}\n', ["k.cu:1", "n = 4", "default argument"]),
        ('extern "C" void solve(float* y, ...) {}\n', ["k.cu:1", "variadic"]),
        ('extern "C" void solve(float y[]) {}\n', ["k.cu:1", "float y[]", "array"]),
        ('extern "C" void solve(float* x,\n const float* x) {}\n', ["k.cu:2", "'x'", "twice"]),
        (
            'extern "C" void solve(float* x) {}\n\nextern "C" void solve(float* y) {}\n',
            ["k.cu:3", "more than once", "lines 1, 3"],
        ),
    ],
)
def test_bad_signatures_name_file_line_and_culprit(source, expected):
    with pytest.raises(ConfigError) as raised:
        parse_solve(source, "k.cu")

    message = str(raised.value)
    for fragment in expected:
        assert fragment in message
    assert raised.value.exit_code == 4


# ------------------------------------------------------------------------------ hostile input, fuzzed

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALID = (
    "#include <cuda_runtime.h>\n// kernel\n__global__ void k(const float* x, float* y, int n) {}\n"
    'extern "C" void solve(const float* __restrict__ x, float* y, int N, unsigned long long M) {\n'
    "    k<<<1, 1>>>(x, y, N);\n}\n"
)
_PIECES = st.sampled_from(
    [
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        "<",
        ">",
        ",",
        ";",
        "*",
        "&",
        "::",
        '"',
        "'",
        "\\",
        "/*",
        "*/",
        "//",
        "\n",
        "#",
        'extern "C"',
        'R"(',
        "__attribute__((",
        "[[",
        "...",
        "=",
        "solve",
        "void",
        "const",
        "int",
        "float",
        "unsigned",
        "template",
        "static",
        "__global__",
        "\x00",
        "é",
    ]
)


def _parses_or_refuses(source: str) -> None:
    try:
        interface = parse_solve(source, "fuzz.cu")
    except ConfigError as exc:
        assert exc.exit_code == 4 and exc.message
        return
    assert isinstance(interface, KernelInterface)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_parses_or_raises_config_error(source):
    _parses_or_refuses(source)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=40).map("".join))
def test_c_like_token_soup_parses_or_raises_config_error(source):
    _parses_or_refuses(source)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(_VALID)),
            st.integers(0, 8),
            st.one_of(_PIECES, st.text(max_size=4)),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_valid_signature_parses_or_raises_config_error(edits):
    source = _VALID
    for at, cut, insert in edits:
        at = min(at, len(source))
        source = source[:at] + insert + source[at + cut :]
    _parses_or_refuses(source)


def test_the_unmutated_signature_parses():
    interface = parse_solve(_VALID, "fuzz.cu")
    assert [p.name for p in interface.params] == ["x", "y", "N", "M"]
