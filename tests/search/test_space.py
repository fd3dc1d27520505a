"""Reading a kernel's declared search space from its source (never importing it), the errors a user gets
for a bad declaration, and the constraint language."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from kopt_core.errors import EXIT_CONFIG, ConfigError
from kopt_core.search.space import parse_cu_space, read_space
from kopt_triton.search import parse_triton_space

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
AUTOTUNE_EXAMPLE = REPO / "examples" / "triton" / "matmul_autotune" / "kernel.py"


def cu(body: str) -> str:
    """A .cu source: the declarations given, and a kernel that reads X, Y and S as macros."""
    return textwrap.dedent(body) + textwrap.dedent(
        """
        #ifndef X
        #define X 1
        #endif
        __global__ void k(float* out) { out[0] = X + Y; (void)sizeof(S); }
        extern "C" void solve(float* out) { k<<<1, 1>>>(out); }
        """
    )


def py(body: str) -> str:
    return textwrap.dedent(body)


# --- .cu ---------------------------------------------------------------------------------------------


def test_tiled_sgemm_space_has_its_four_parameters_and_two_constraints():
    space = read_space(DATA / "sgemm_tiled.cu")

    assert space.kind == "cu_defines"
    assert space.choices == {
        "BLOCK_M": (32, 64, 128),
        "BLOCK_N": (32, 64, 128),
        "BLOCK_K": (8, 16, 32),
        "THREAD_TILE": (4, 8),
    }
    assert [p.line for p in space.parameters] == [8, 9, 10, 11]
    assert [(c.text, c.line) for c in space.constraints] == [
        ("BLOCK_M * BLOCK_N <= 8192", 12),
        ("(BLOCK_M // THREAD_TILE) * (BLOCK_N // THREAD_TILE) in (64, 128, 256)", 13),
    ]
    assert space.size == 54


def test_tiled_sgemm_valid_points_are_the_grid_filtered_by_the_constraints():
    space = read_space(DATA / "sgemm_tiled.cu")
    expected = [
        {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "THREAD_TILE": t}
        for m, n, k, t in itertools.product((32, 64, 128), (32, 64, 128), (8, 16, 32), (4, 8))
        if m * n <= 8192 and (m // t) * (n // t) in (64, 128, 256)
    ]

    assert list(space.valid_points()) == expected
    assert len(expected) == 33
    assert space.rejection({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 8, "THREAD_TILE": 8}) == (
        f"violates constraint `BLOCK_M * BLOCK_N <= 8192` ({DATA / 'sgemm_tiled.cu'}:12)"
    )


def test_point_enumerates_in_product_order():
    space = read_space(DATA / "sgemm_tiled.cu")
    everything = [space.point(i) for i in range(space.size)]

    assert everything[0] == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 8, "THREAD_TILE": 4}
    assert everything[1] == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 8, "THREAD_TILE": 8}
    assert everything[-1] == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "THREAD_TILE": 8}
    assert len({tuple(p.values()) for p in everything}) == 54
    with pytest.raises(IndexError):
        space.point(54)


def test_cu_values_of_every_kind():
    space = parse_cu_space(
        cu(
            """\
            // kopt:space X = [64, 0x80, -1, 1_024]
            // kopt:space Y = [0.5, 1e-3, 2.]   // a trailing comment
            // kopt:space S = [KernelTma, cutlass::gemm::KernelTmaWarpSpecializedPingpong, "a b", 'c',]
            """
        ),
        "k.cu",
    )

    assert space.choices == {
        "X": (64, 128, -1, 1024),
        "Y": (0.5, 0.001, 2.0),
        "S": ("KernelTma", "cutlass::gemm::KernelTmaWarpSpecializedPingpong", "a b", "c"),
    }
    assert [type(v) for v in space.choices["X"]] == [int] * 4
    assert [type(v) for v in space.choices["Y"]] == [float] * 3


@pytest.mark.parametrize(
    ("declarations", "message"),
    [
        ("// kopt:space 1X = [1]\n", r"k\.cu:1: '1X' is not a valid parameter name"),
        ("// kopt:space X-Y = [1]\n", r"k\.cu:1: 'X-Y' is not a valid parameter name"),
        ("// kopt:space if = [1]\n", r"k\.cu:1: 'if' is reserved"),
        ("// kopt:space max = [1]\n", r"k\.cu:1: 'max' is reserved"),
        (
            "// kopt:space X = [1]\n// kopt:space Y = [2]\n// kopt:space X = [3]\n",
            r"k\.cu:3: X is declared twice \(first on line 1\)",
        ),
        ("// kopt:space X = []\n", r"k\.cu:1: X has no values"),
        ("// kopt:space X = [1, 2\n", r"k\.cu:1: the list of X has no closing `\]`"),
        ("// kopt:space X = 1, 2\n", r"k\.cu:1: the values of X must be a list in brackets"),
        ("// kopt:space X [1, 2]\n", r"k\.cu:1: expected `// kopt:space NAME = \[v1, v2, \.\.\.\]`"),
        ("// kopt:space X = [1.5f]\n", r"k\.cu:1: cannot read the value `1\.5f` of X"),
        ("// kopt:space X = [a b]\n", r"k\.cu:1: cannot read the value `a b` of X"),
        ("// kopt:space X = [1, 1.0]\n", r"k\.cu:1: X lists the value 1\.0 twice"),
        ("// kopt:space X = ['a\n", r"k\.cu:1: a string in the list of X has no closing '"),
        ("// kopt:space X = [1] junk\n", r"k\.cu:1: unexpected `junk` after the list of X"),
        (
            "// kopt:space X = [1, 2]\n// kopt:space UNUSED = [1]\n",
            r"k\.cu:2: UNUSED is declared but never used",
        ),
        ("// no declarations\n", r"k\.cu: no `// kopt:space NAME = \[values\]` lines"),
    ],
)
def test_bad_cu_declarations_name_the_file_and_line(declarations, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_cu_space(cu(declarations), "k.cu")

    assert caught.value.exit_code == EXIT_CONFIG == 4


def test_an_unconditional_define_of_a_parameter_is_refused():
    text = "// kopt:space BLOCK = [64, 128]\n#define BLOCK 64\n__global__ void k() { int a[BLOCK]; }\n"

    with pytest.raises(ConfigError, match=r"k\.cu:2: BLOCK is #defined unconditionally") as caught:
        parse_cu_space(text, "k.cu")
    assert "#ifndef BLOCK" in str(caught.value)


def test_a_guarded_define_is_accepted_either_spelling():
    guarded = "// kopt:space B = [1, 2]\n#if !defined(B)\n#define B 1\n#endif\nint a[B];\n"

    assert parse_cu_space(guarded, "k.cu").choices == {"B": (1, 2)}


def test_read_space_refuses_other_suffixes(tmp_path):
    path = tmp_path / "kernel.cpp"
    path.write_text("// kopt:space X = [1]\n")

    with pytest.raises(ConfigError, match=r"kernel\.cpp: kopt reads a search space from \.cu, \.cuh or \.py"):
        read_space(path)


# --- constraints -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ("BLOCK_Q > 1", r"k\.cu:4: constraint `BLOCK_Q > 1`: unknown name 'BLOCK_Q'"),
        ("__import__('os').system('true')", r"`__import__\('os'\)\.system\('true'\)` is not allowed"),
        ("__import__('os')", r"`__import__\('os'\)` is not allowed"),
        ("X.real > 0", r"`X\.real` is not allowed"),
        ("X.bit_length() > 0", r"`X\.bit_length\(\)` is not allowed"),
        ("(1, 2)[0] == X", r"`\(1, 2\)\[0\]` is not allowed"),
        ("[x for x in (1, 2)] == X", r"is not allowed"),
        ("(lambda: 1)() == X", r"is not allowed"),
        ("min(X, key=abs) > 1", r"`min\(X, key=abs\)` is not allowed"),
        ("abs(X, Y) > 1", r"`abs\(X, Y\)` is not allowed"),
        ("X if Y else S", r"`X if Y else S` is not allowed"),
        ("X << 2 > 1", r"`X << 2` is not allowed"),
        ("X > None", r"the constant None is not allowed"),
        ("X > 1 && Y > 1", r"constraint `X > 1 && Y > 1` is not an expression"),
        ("X := 3", r"is not an expression"),
        ("", r"k\.cu:4: empty constraint"),
        (
            "X * Y",
            r"k\.cu:4: constraint `X \* Y` at \{'X': 1, 'Y': 1, 'S': 'a'\}: "
            r"it gives int 1, not True or False",
        ),
        ("S * 2 > 1", r"k\.cu:4: constraint `S \* 2 > 1` at .*: arithmetic on str 'a'"),
    ],
)
def test_bad_constraints_are_refused_when_the_space_is_read(constraint, message):
    declarations = (
        "// kopt:space X = [1, 2, 4]\n// kopt:space Y = [1, 3]\n// kopt:space S = [a, b]\n"
        f"// kopt:constraint {constraint}\n"
    )

    with pytest.raises(ConfigError, match=message):
        parse_cu_space(cu(declarations), "k.cu")


def constrained(*constraints: str) -> list[dict]:
    declarations = "// kopt:space X = [0, 1, 2, 4, 8]\n// kopt:space Y = [1, 3]\n// kopt:space S = [a, b]\n"
    declarations += "".join(f"// kopt:constraint {c}\n" for c in constraints)
    return list(parse_cu_space(cu(declarations), "k.cu").valid_points())


def xs(points: list[dict]) -> list[tuple]:
    return [(p["X"], p["Y"], p["S"]) for p in points]


def test_chained_comparison():
    assert xs(constrained("2 <= X * Y < 8")) == [
        (1, 3, "a"),
        (1, 3, "b"),
        (2, 1, "a"),
        (2, 1, "b"),
        (2, 3, "a"),
        (2, 3, "b"),
        (4, 1, "a"),
        (4, 1, "b"),
    ]


def test_in_and_not_in_with_tuples_and_lists():
    assert {(x, y) for x, y, _ in xs(constrained("X in (2, 8) and Y not in [3]"))} == {(2, 1), (8, 1)}


def test_strings_compare_by_equality():
    assert xs(constrained('S == "b"', "X == 8")) == [(8, 1, "b"), (8, 3, "b")]


def test_boolean_operators_short_circuit_like_python():
    # X == 0 guards the modulo: without short-circuit, X = 0 would divide by zero and be rejected
    points = xs(constrained("X == 0 or 8 % X == 0", "not (Y == 3)", 'S == "a"'))

    assert points == [(0, 1, "a"), (1, 1, "a"), (2, 1, "a"), (4, 1, "a"), (8, 1, "a")]


def test_min_max_abs_true_division_floor_and_power():
    assert {x for x, _, _ in xs(constrained("max(X, Y) == 4", "min(X, Y) == 1"))} == {4}
    assert {x for x, _, _ in xs(constrained("abs(X - 5) <= 1"))} == {4}
    assert {x for x, _, _ in xs(constrained("X / 4 == 0.5"))} == {2}
    assert {x for x, _, _ in xs(constrained("X // 4 == 1"))} == {4}
    assert {x for x, _, _ in xs(constrained("2 ** X == 16", "-X < -1"))} == {4}


def test_a_division_by_zero_rejects_that_point_only():
    declarations = "// kopt:space X = [0, 2, 3]\n// kopt:space Y = [1]\n// kopt:space S = [a]\n"
    space = parse_cu_space(cu(declarations + "// kopt:constraint 6 % X == 0\n"), "k.cu")

    assert [p["X"] for p in space.valid_points()] == [2, 3]
    reason = space.rejection({"X": 0, "Y": 1, "S": "a"})
    assert (
        reason
        == "constraint `6 % X == 0` (k.cu:4) cannot be evaluated: ZeroDivisionError: integer modulo by zero"
    )


def test_a_huge_power_is_rejected_not_computed():
    declarations = "// kopt:space X = [2, 1000000000]\n// kopt:space Y = [1]\n// kopt:space S = [a]\n"
    space = parse_cu_space(cu(declarations + "// kopt:constraint 10 ** X > 5\n"), "k.cu")

    assert [p["X"] for p in space.valid_points()] == [2]
    assert "10 ** 1000000000 is too large" in space.rejection({"X": 1000000000, "Y": 1, "S": "a"})


# --- Triton ------------------------------------------------------------------------------------------


def test_triton_kopt_space_with_constraints():
    space = read_space(DATA / "triton_matmul.py")
    expected = [
        (m, n, k, w, s)
        for m, n, k, w, s in itertools.product((64, 128, 256), (64, 128, 256), (32, 64), (4, 8), (3, 4))
        if m * n <= 128 * 256 and (m * k + k * n) * 2 * s <= 196608
    ]

    assert space.kind == "py_assignments"
    assert space.choices == {
        "BLOCK_M": (64, 128, 256),
        "BLOCK_N": (64, 128, 256),
        "BLOCK_K": (32, 64),
        "NUM_WARPS": (4, 8),
        "NUM_STAGES": (3, 4),
    }
    assert [p.line for p in space.parameters] == [16, 17, 18, 19, 20]
    assert [c.line for c in space.constraints] == [23, 24]
    assert [tuple(p.values()) for p in space.valid_points()] == expected
    assert len(expected) == 64


def test_triton_constraint_may_be_one_string():
    text = py(
        """
        kopt_space = {"A": [1, 2], "B": [True, False]}
        kopt_constraint = "A == 2 or B"
        A = 1
        B: bool = True
        """
    )

    space = parse_triton_space(text, "k.py")

    assert [(p["A"], p["B"]) for p in space.valid_points()] == [(1, True), (2, True), (2, False)]


def test_autotune_configs_of_the_example_are_one_categorical_choice():
    space = parse_triton_space(AUTOTUNE_EXAMPLE.read_text(), str(AUTOTUNE_EXAMPLE))

    assert space.kind == "py_autotune"
    assert space.choices == {"config": tuple(range(8))}
    assert space.autotune_kernel == "matmul_kernel"
    compact = [" ".join(text.split()) for text in space.autotune_configs]
    assert compact == [
        f'triton.Config( {{"BLOCK_M": {m}, "BLOCK_N": {n}, "BLOCK_K": {k}, "GROUP_M": 8}}, '
        f"num_warps={w}, num_stages={s} )"
        for m, n, k, w, s in [
            (128, 128, 64, 8, 3),
            (128, 256, 64, 8, 3),
            (64, 128, 64, 4, 4),
            (128, 128, 32, 4, 4),
            (128, 256, 64, 8, 4),
            (256, 128, 64, 8, 3),
            (128, 128, 64, 8, 4),
            (128, 128, 64, 4, 4),
        ]
    ]


AUTOTUNED = """
import triton

@triton.autotune(configs={configs}, key=["N"])
@triton.jit
def {name}(x_ptr, N, BLOCK: tl.constexpr):
    pass
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kopt_space = [1, 2]\n", r"k\.py:1: kopt_space must be a dict literal"),
        ('kopt_space = {"A": [1, 2]}\n', r"k\.py:1: A is in kopt_space but has no module-level assignment"),
        ('kopt_space = {"A": [1, 2]}\nA = 1\nA = 2\n', r"k\.py:1: A is assigned 2 times \(lines 2, 3\)"),
        ('kopt_space = {"A": [1, 2]}\nA = B = 1\n', r"k\.py:2: the assignment of A cannot be rewritten"),
        ('kopt_space = {"A": [1, 2]}\nA, B = f()\n', r"k\.py:2: the assignment of A cannot be rewritten"),
        ('kopt_space = {"A": [1, None]}\nA = 1\n', r"k\.py:1: A value None is not an integer"),
        ('kopt_space = {"A": []}\nA = 1\n', r"k\.py:1: A has no values"),
        ('kopt_space = {"A": 4}\nA = 1\n', r"k\.py:1: the values of A must be a list"),
        ('kopt_space = {"A": [1, True]}\nA = 1\n', r"k\.py:1: A lists the value True twice"),
        ('kopt_space = {"A": [N]}\nA = 1\n', r"k\.py:1: the values of A must be a literal, not `\[N\]`"),
        ('kopt_space = {"A": [1],\n  "A": [2]}\nA = 1\n', r"k\.py:2: A is declared twice in kopt_space"),
        ('kopt_space = {"a-b": [1]}\n', r"k\.py:1: 'a-b' is not a valid parameter name"),
        ("kopt_space = {}\n", r"k\.py:1: kopt_space is empty"),
        (
            'kopt_space = {"A": [1]}\nkopt_space = {"A": [2]}\nA = 1\n',
            r"k\.py:2: kopt_space is assigned more than once",
        ),
        (
            'kopt_space = {"A": [1]}\nA = 1\nkopt_constraint = "B > 1"\n',
            r"k\.py:3: constraint `B > 1`: unknown name 'B'",
        ),
        (
            'kopt_space = {"A": [1]}\nA = 1\nkopt_constraint = 3\n',
            r"k\.py:3: kopt_constraint must be a string",
        ),
        (
            'kopt_space = {"A": [1]}\nA = 1\nkopt_constraint = "A.x"\n',
            r"k\.py:3: constraint `A\.x`: `A\.x` is not allowed",
        ),
        ("def f(:\n", r"k\.py:1: syntax error"),
        ("import triton\n", r"k\.py: no kopt_space and no @triton.autotune kernel"),
        (
            AUTOTUNED.format(configs="make_configs()", name="k"),
            r"k\.py:4: the configs of k are not a literal list",
        ),
        (AUTOTUNED.format(configs="[*base]", name="k"), r"k\.py:4: the configs of k are not a literal list"),
        (AUTOTUNED.format(configs="[]", name="k"), r"k\.py:4: the autotune configs of k are empty"),
        (
            AUTOTUNED.format(configs="[triton.Config({})]", name="k1")
            + AUTOTUNED.format(configs="[triton.Config({})]", name="k2"),
            r"k\.py: 2 autotuned kernels \(k1, k2\)",
        ),
    ],
)
def test_bad_triton_declarations_name_the_file_and_line(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_triton_space(text, "k.py")


def test_space_id_changes_with_the_declaration_only():
    base = cu("// kopt:space X = [1, 2]\n// kopt:space Y = [1]\n// kopt:space S = [a]\n")
    same = parse_cu_space(base + "// an unrelated edit\n", "other.cu").space_id
    other_values = parse_cu_space(base.replace("X = [1, 2]", "X = [1, 3]"), "k.cu").space_id
    with_constraint = parse_cu_space(base + "// kopt:constraint X > 1\n", "k.cu").space_id

    assert parse_cu_space(base, "k.cu").space_id == same
    assert len({same, other_values, with_constraint}) == 3
