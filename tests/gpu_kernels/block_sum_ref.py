"""Reference of block_sum_clean.cu and block_sum_racy.cu: y[b] = the sum of x[256 b : 256 b + 256] (the
last block's missing elements count as zero), N floats in, (N + 255) // 256 out.

The kernels add in a tree and torch in its own order, so the float32 sums differ in their last bits; the
tolerance allows that and nothing more.
"""

from __future__ import annotations

import torch

THREADS = 256
atol = 1e-4
rtol = 1e-4


def buffers(N: int) -> dict[str, dict]:
    return {
        "x": {"shape": (N,), "dtype": "float32", "role": "input"},
        "y": {"shape": ((N + THREADS - 1) // THREADS,), "dtype": "float32", "role": "output"},
    }


def reference(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    """Write the expected y in place."""
    blocks = (N + THREADS - 1) // THREADS
    padded = torch.zeros(blocks * THREADS, dtype=x.dtype, device=x.device)
    padded[:N] = x[:N]
    y.copy_(padded.view(blocks, THREADS).sum(dim=1))


def workload_model(N: int) -> dict[str, int]:
    """One add per element; N floats read."""
    return {"flops": N, "bytes_min": 4 * N}
