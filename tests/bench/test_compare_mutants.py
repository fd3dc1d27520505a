"""compare() and unchanged() on constructed tensors with known answers: the tolerance edge exactly at
atol + rtol*|expected|, negative expected values, NaN and inf on either side, mismatch counts 0/1/2 and
the worst offender. The harness tests reach compare() only inside a worker process, where mutation
testing (scripts/mutation.py) cannot attribute them; these run it in-process."""

from __future__ import annotations

import math

import pytest
import torch

from kopt_core.bench.compare import compare, unchanged
from kopt_core.records import BufferCheck, Mismatch, Tolerance

NAN = math.nan
INF = math.inf
TINY = torch.finfo(torch.float64).tiny


def t(*values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def tol(atol: float, rtol: float) -> Tolerance:
    return Tolerance(atol=atol, rtol=rtol, source="test")


# atol 0.5 + rtol 0.25 * |expected|: the bound is 1.5 at -4, 2.5 at 8 and 0.5 at 0, all exact in binary.
EDGE = tol(0.5, 0.25)
EXPECTED = t(-4.0, -4.0, 8.0, 8.0, 0.0, 0.0)


def test_an_error_exactly_at_atol_plus_rtol_times_abs_expected_passes():
    got = t(-2.5, -5.5, 10.5, 5.5, 0.5, -0.5)  # every element exactly at its bound, on both sides
    assert compare("y", got, EXPECTED, EDGE) == BufferCheck(
        buffer="y",
        passed=True,
        max_abs_err=2.5,
        max_rel_err=0.5 / TINY,  # 0.5 off a zero expected: divided by float64's smallest normal
        mismatches=0,
        numel=6,
    )


def test_the_max_relative_error_divides_a_zero_expected_by_the_smallest_normal():
    check = compare("y", t(0.0, 1e-300, 1.0), t(0.0, 0.0, 2.0), tol(1.0, 0.0))
    assert check.passed and check.mismatches == 0
    assert check.max_abs_err == 1.0
    assert check.max_rel_err == 1e-300 / TINY  # 0 / 0 counts as 0, not NaN


def test_one_ulp_beyond_the_bound_fails_on_every_side():
    bound_away = t(
        math.nextafter(-2.5, math.inf),
        math.nextafter(-5.5, -math.inf),
        math.nextafter(10.5, math.inf),
        math.nextafter(5.5, -math.inf),
        math.nextafter(0.5, math.inf),
        math.nextafter(-0.5, -math.inf),
    )
    check = compare("y", bound_away, EXPECTED, EDGE)
    assert not check.passed and check.mismatches == 6


def test_rtol_scales_with_the_magnitude_of_a_negative_expected():
    # |got - expected| = 1.0 <= 0 + 0.5 * |-2|; were rtol scaled by the signed value the bound would be -1.
    assert compare("y", t(-1.0), t(-2.0), tol(0.0, 0.5)).passed
    assert compare("y", t(-3.0), t(-2.0), tol(0.0, 0.5)).passed
    assert not compare("y", t(-3.5), t(-2.0), tol(0.0, 0.5)).passed


def test_atol_alone_covers_a_zero_expected():
    assert compare("y", t(0.25), t(0.0), tol(0.25, 0.5)).passed
    assert not compare("y", t(0.5), t(0.0), tol(0.25, 0.5)).passed


@pytest.mark.parametrize(
    ("got", "mismatches"),
    [((1.0, 2.0, 3.0), 0), ((1.0, 2.0, 3.5), 1), ((1.5, 2.0, 3.5), 2)],
)
def test_any_mismatch_fails(got, mismatches):
    check = compare("y", t(*got), t(1.0, 2.0, 3.0), tol(0.1, 0.0))
    assert check.mismatches == mismatches
    assert check.passed is (mismatches == 0)


def test_a_failing_buffer_reports_its_worst_element_by_index():
    got = t(1.0, 2.0, 3.0, 4.0, 5.0, 6.0).reshape(2, 3)
    expected = t(1.0, 2.0, 3.5, 4.0, 5.0, 9.0).reshape(2, 3)
    assert compare("out", got, expected, tol(0.1, 0.0)) == BufferCheck(
        buffer="out",
        passed=False,
        max_abs_err=3.0,
        max_rel_err=3.0 / 9.0,
        mismatches=2,
        numel=6,
        nan_count=0,
        worst=Mismatch(buffer="out", index=(1, 2), got=6.0, expected=9.0),
        note="",
    )


def test_the_worst_is_the_worst_failing_element_not_the_largest_error():
    # Element 0 is off by ~0.8 but within rtol; element 1 is off by 0.5 and fails.
    check = compare("y", t(10.8, 1.5), t(10.0, 1.0), tol(0.0, 0.1))
    assert check.mismatches == 1
    assert check.worst == Mismatch(buffer="y", index=(1,), got=1.5, expected=1.0)


def test_an_unwritten_element_is_the_worst_even_next_to_a_larger_error():
    got = t(100.0, NAN, 1.0)
    check = compare("y", got, t(1.0, 1.0, 1.0), tol(0.1, 0.0))
    assert check == BufferCheck(
        buffer="y",
        passed=False,
        max_abs_err=99.0,  # NaN left out of the error figures
        max_rel_err=99.0,
        mismatches=2,
        numel=3,
        nan_count=1,
        worst=Mismatch(buffer="y", index=(1,), got=None, expected=1.0),
        note="1 elements are NaN (unwritten or invalid)",
    )


def test_nan_never_passes_not_even_nan_against_nan():
    check = compare("y", t(NAN, 1.0, NAN), t(NAN, NAN, 1.0), tol(1e9, 1e9))
    assert check == BufferCheck(
        buffer="y",
        passed=False,
        max_abs_err=None,
        max_rel_err=None,
        mismatches=3,
        numel=3,
        nan_count=2,
        worst=Mismatch(buffer="y", index=(0,), got=None, expected=None),
        note="the reference produced 2 NaN values",  # the reference's NaN is named first
    )


def test_a_nan_in_the_reference_only_is_named():
    check = compare("y", t(1.0, 2.0, 3.0), t(1.0, NAN, 3.0), tol(0.1, 0.0))
    assert check.mismatches == 1 and check.nan_count == 0
    assert check.note == "the reference produced 1 NaN values"
    assert check.max_abs_err == 0.0 and check.max_rel_err == 0.0


def test_infinities_pass_only_against_the_same_infinity():
    got = t(INF, -INF, INF, 1.0, -INF)
    expected = t(INF, -INF, -INF, INF, 2.0)
    assert compare("y", got, expected, tol(1e9, 0.0)) == BufferCheck(
        buffer="y",
        passed=False,
        max_abs_err=None,  # no finite difference at all
        max_rel_err=None,
        mismatches=3,
        numel=5,
        nan_count=0,
        worst=Mismatch(buffer="y", index=(2,), got=None, expected=None),  # infinities reported as None
        note="",
    )


def test_an_infinite_expected_does_not_make_the_tolerance_infinite():
    # with rtol > 0, atol + rtol*|inf| is inf: an infinite expected value must match only the same infinity
    check = compare("y", t(-INF, 1.0, INF, -INF), t(INF, INF, INF, -INF), tol(1e-6, 1e-6))
    assert (check.passed, check.mismatches) == (False, 2)
    # the worst of the two failures: both errors are inf, the first wins
    assert check.worst == Mismatch(buffer="y", index=(0,), got=None, expected=None)
    assert (check.max_abs_err, check.max_rel_err) == (None, None)  # no finite error at all
    assert compare("y", t(INF, -INF), t(INF, -INF), tol(0.5, 0.5)).passed
    # and the other way round: an infinite result is never within tolerance of a finite expected value
    assert compare("y", t(INF, 1.0), t(1.0, 1.0), tol(1e-6, 1e-6)).mismatches == 1


def test_a_worst_element_at_negative_infinity_is_reported_as_none():
    check = compare("y", t(1.0, -INF), t(1.0, 0.0), tol(0.1, 0.0))
    assert check.worst == Mismatch(buffer="y", index=(1,), got=None, expected=0.0)
    assert check.max_abs_err == 0.0


def test_an_overflowing_relative_error_is_left_out():
    check = compare("y", t(1e300), t(1e-300), tol(0.0, 0.0))
    assert check.max_abs_err == 1e300
    assert check.max_rel_err is None  # 1e300 / 1e-300 is inf: not a number to report


def test_inputs_of_any_dtype_compare_in_float64():
    got = torch.tensor([1.0 + 2**-10], dtype=torch.float16)
    expected = torch.tensor([1.0], dtype=torch.float32)
    check = compare("y", got, expected, tol(0.0, 0.0))
    assert check.max_abs_err == 2**-10 and check.mismatches == 1
    assert check.worst == Mismatch(buffer="y", index=(0,), got=1.0 + 2**-10, expected=1.0)


def test_boolean_buffers_compare_as_zeros_and_ones():
    mask = torch.tensor([True, False, True])
    assert compare("mask", mask, mask.clone(), tol(0.0, 0.0)).passed
    check = compare("mask", mask, torch.tensor([True, True, True]), tol(0.0, 0.0))
    assert check.mismatches == 1 and check.max_abs_err == 1.0
    assert check.worst == Mismatch(buffer="mask", index=(1,), got=0.0, expected=1.0)


def test_a_float32_zero_expected_still_divides_by_float64s_smallest_normal():
    # In float32 the smallest float64 normal rounds to 0, so the relative error would be inf (None).
    check = compare("y", t(0.5, dtype=torch.float32), t(0.0, dtype=torch.float32), tol(1.0, 0.0))
    assert check.passed and check.max_rel_err == 0.5 / TINY


def test_a_shape_mismatch_fails_before_any_comparison():
    assert compare("y", torch.zeros(2, 3), torch.zeros(4), tol(1.0, 1.0)) == BufferCheck(
        buffer="y",
        passed=False,
        numel=6,
        note="shape (2, 3) differs from the reference's (4,)",
    )


def test_unchanged_is_bitwise():
    x = t(1.0, NAN, -0.0, INF)
    assert unchanged(x, x.clone())  # the same NaN bits are unchanged (torch.equal would say no)
    assert not unchanged(t(0.0), t(-0.0))  # equal values, different bits
    assert not unchanged(t(1.0, 2.0), t(1.0, 2.5))


def test_unchanged_needs_the_same_dtype_and_shape():
    x = torch.tensor([1.0, 2.0], dtype=torch.float32)
    assert not unchanged(x, x.view(torch.int32))  # the same bytes, another dtype
    assert not unchanged(x, x.reshape(2, 1))


def test_unchanged_handles_non_contiguous_and_bool_tensors():
    x = torch.arange(6.0).reshape(2, 3).t()
    assert not x.is_contiguous()
    assert unchanged(x, x.clone())
    assert not unchanged(x, x.clone().add_(1))
    flags = torch.tensor([True, False])
    assert unchanged(flags, flags.clone())
    assert not unchanged(flags, torch.tensor([True, True]))


def test_unchanged_compares_the_bytes_of_bool_tensors():
    # a kernel that writes the byte 2 into a bool input changed it, although torch.equal calls 2 "True"
    before = torch.tensor([True, True])
    after = torch.tensor([1, 2], dtype=torch.uint8).view(torch.bool)
    assert torch.equal(before, after)
    assert not unchanged(before, after)
    assert unchanged(after, torch.tensor([1, 2], dtype=torch.uint8).view(torch.bool))
