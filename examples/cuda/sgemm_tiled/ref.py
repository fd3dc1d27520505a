"""Reference for examples/cuda/sgemm_tiled/kernel.cu (as sgemm_naive's): C = A @ B in fp32, row-major.

``buffers()`` is needed here: the default sizing rule would size every buffer as the product of the
two largest dims, which is only right when M == N == K.
"""

from __future__ import annotations

import torch

# Tolerances for an fp32 dot product of length K <= 4096 on randn inputs, compared with torch's fp32
# matmul (TF32 off). The two sum in different orders (the kernel sequentially with FMAs, cuBLAS in
# blocks), and the difference is rounding noise of the partial sums: |C| is about sqrt(K) = 64 at
# K = 4096, and each of K roundings is at most 2^-24 of a partial sum, so the noise grows like
# 2^-24 * K (about 1e-4 at K = 4096). Simulated on the CPU (sequential fp32 FMA order against torch's
# fp32 matmul, K = 4096, 262k elements): differences had std 5e-5 and max 9e-4, and the largest ratio of
# difference to (atol + rtol * |expected|) was 0.21. On the H200 (2026-11-29) against cuBLAS: 0.25 for
# M, N, K = 333, 517, 4096, and bit-identical results at 1024^3 and 4096^3. atol covers elements whose
# value is near zero, rtol the large ones, each with about a 4x margin at K = 4096; a real bug (a wrong
# index, a skipped k, a missed tail) moves elements by O(1) and fails by orders of magnitude.
atol = 1e-3
rtol = 1e-3


def buffers(M: int, N: int, K: int) -> dict[str, dict]:
    """A (M, K) and B (K, N) are random inputs; C (M, N) is written by the kernel."""
    return {
        "A": {"shape": (M, K), "dtype": "float32", "role": "input", "init": "randn"},
        "B": {"shape": (K, N), "dtype": "float32", "role": "input", "init": "randn"},
        "C": {"shape": (M, N), "dtype": "float32", "role": "output"},
    }


def reference(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, M: int, N: int, K: int) -> None:
    """Write A @ B into C with a true fp32 matmul.

    TF32 is turned off for the product (and the previous setting restored) because with TF32 on, the
    reference itself would be off by about 1e-3 relative and the tolerance above would not hold.
    """
    matmul = torch.backends.cuda.matmul
    previous = matmul.allow_tf32
    matmul.allow_tf32 = False
    try:
        torch.matmul(A.view(M, K), B.view(K, N), out=C.view(M, N))
    finally:
        matmul.allow_tf32 = previous


def workload_model(M: int, N: int, K: int) -> dict[str, int]:
    """2*M*N*K flops; at least A and B read once and C written once (fp32)."""
    return {"flops": 2 * M * N * K, "bytes_min": 4 * (M * K + K * N + M * N)}
