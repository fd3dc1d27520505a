"""Reference shared by every kernel in tests/gpu_kernels/: y = 2.5 * x, N floats each.

Each kernel there breaks the contract in one way (or none, correct.cu) so that the GPU tests can check
that kopt's harness catches it. The tolerance is tight because the correct kernel matches torch bit for
bit (one correctly rounded fp32 multiply), so anything a broken kernel does shows.
"""

from __future__ import annotations

import torch

atol = 1e-6
rtol = 1e-6


def reference(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    """Write the expected y in place."""
    y[:N] = x[:N] * 2.5


def workload_model(N: int) -> dict[str, int]:
    """One multiply per element; N floats read and N written."""
    return {"flops": N, "bytes_min": 8 * N}
