"""Reference for examples/cutlass/gemm_sm90_tma_ws/kernel.cu: C = A @ B, fp16 in, fp32 accumulate, fp16 out.

Layouts ("TN"): A is (M, K) row-major. B is the K x N matrix stored column-major, which in torch terms
is a row-major tensor of shape (N, K) holding B transposed (row n of the buffer is column n of B); so the
buffer is described as (N, K) below and the reference multiplies by its transpose. C is (M, N)
row-major. K and N must be multiples of 8 (TMA's 16-byte aligned rows).
"""

from __future__ import annotations

import torch

# Tolerances for fp16 outputs of a length-K fp32 dot product of fp16 randn inputs, K <= 4096.
# |C| is about sqrt(K) (std 64 at K = 4096, the largest of 16M elements about 350, far from fp16's
# 65504). Both the kernel and the reference accumulate exactly-representable fp16 products in fp32, in
# different orders (the tensor cores also with their own internal rounding): that noise is about 1e-4
# to 1e-3 at K = 4096 (examples/cuda/sgemm_naive/ref.py has the fp32 measurements). Then each rounds
# to fp16, and two fp32 values a hair apart can round to neighbouring fp16 values: one fp16 ulp, at
# most 2^-10 (about 1e-3) of |C| (0.0625 at |C| = 64). So a correct kernel differs by at most about
# 1e-3 * |C| + 1e-3; rtol = 1e-2 and atol = 1e-2 leave a margin of about 10x on both terms.
# A real bug (a dropped k tile, a wrong stride, a wrong alpha) moves elements by O(1) to O(|C|) and fails by
# orders of magnitude.
atol = 1e-2
rtol = 1e-2


def buffers(M: int, N: int, K: int) -> dict[str, dict]:
    """A (M, K) and B stored as (N, K) (B column-major) are random fp16 inputs; C (M, N) fp16 is the
    output."""
    return {
        "A": {"shape": (M, K), "dtype": "float16", "role": "input", "init": "randn"},
        "B": {"shape": (N, K), "dtype": "float16", "role": "input", "init": "randn"},
        "C": {"shape": (M, N), "dtype": "float16", "role": "output"},
    }


def reference(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, M: int, N: int, K: int) -> None:
    """Write A @ B into C, where the (N, K) buffer B holds the K x N operand transposed: A @ B.T in torch
    terms. The fp16 inputs are widened to fp32, multiplied with fp32 accumulation (TF32 off, the previous
    setting restored), and the result rounded to fp16 once, when it is stored in C.
    """
    matmul = torch.backends.cuda.matmul
    previous = matmul.allow_tf32
    matmul.allow_tf32 = False
    try:
        product = torch.matmul(A.view(M, K).float(), B.view(N, K).float().T)
    finally:
        matmul.allow_tf32 = previous
    C.view(M, N).copy_(product)


def workload_model(M: int, N: int, K: int) -> dict[str, int]:
    """2*M*N*K flops; at least A and B read once and C written once (2 bytes each)."""
    return {"flops": 2 * M * N * K, "bytes_min": 2 * (M * K + K * N + M * N)}
