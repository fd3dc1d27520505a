"""A wrong saxpy (alpha 3 instead of 2): kopt must reject it."""

import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=3.0)
