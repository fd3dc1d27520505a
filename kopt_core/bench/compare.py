"""Comparing a kernel's output with the reference's, in float64. NaN never passes."""

from __future__ import annotations

import torch

from kopt_core.records import BufferCheck, Mismatch, Tolerance


def _scalar(value: torch.Tensor) -> float | None:
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def compare(name: str, got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> BufferCheck:
    if got.shape != expected.shape:
        return BufferCheck(
            buffer=name,
            passed=False,
            numel=got.numel(),
            note=f"shape {tuple(got.shape)} differs from the reference's {tuple(expected.shape)}",
        )
    g = got.detach().to(torch.float64).flatten()
    e = expected.detach().to(device=g.device, dtype=torch.float64).flatten()
    diff = (g - e).abs()
    # An infinite expected value matches only the same infinity (g == e): its bound atol + rtol*|inf| is
    # inf, which would let any value, -inf included, within "tolerance" of it.
    close = (g == e) | (torch.isfinite(e) & (diff <= tol.atol + tol.rtol * e.abs()))
    nan_got = torch.isnan(g)
    nan_expected = torch.isnan(e)
    close &= ~nan_got & ~nan_expected  # NaN never passes, not even NaN == NaN
    bad = ~close
    mismatches = int(bad.sum())
    finite = ~(nan_got | nan_expected) & torch.isfinite(diff)
    max_abs = _scalar(diff[finite].max()) if bool(finite.any()) else None
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
    max_rel = _scalar(rel[finite].max()) if bool(finite.any()) else None
    worst = None
    if mismatches:
        # The worst offender: an unwritten (NaN) element first, else the largest error beyond tolerance.
        scores = torch.where(bad, torch.where(torch.isnan(diff), torch.inf, diff), -1.0)
        flat = int(scores.argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(got.shape)))
        worst = Mismatch(buffer=name, index=index, got=_scalar(g[flat]), expected=_scalar(e[flat]))
    note = ""
    if int(nan_expected.sum()):
        note = f"the reference produced {int(nan_expected.sum())} NaN values"
    elif int(nan_got.sum()):
        note = f"{int(nan_got.sum())} elements are NaN (unwritten or invalid)"
    return BufferCheck(
        buffer=name,
        passed=mismatches == 0,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        mismatches=mismatches,
        numel=g.numel(),
        nan_count=int(nan_got.sum()),
        worst=worst,
        note=note,
    )


def unchanged(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Bitwise equality (an input the kernel wrote to, even with the same value's NaN, fails). Bool tensors
    too are compared byte by byte: a byte 2 is "True" to torch.equal, but not the byte 1 it replaced."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    return bool(torch.equal(before.contiguous().view(torch.uint8), after.contiguous().view(torch.uint8)))
