"""Reference for the Triton matmul examples (matmul/ and matmul_autotune/): C = A @ B, fp16 in and out.

The product is computed by torch.matmul in fp32 from the fp16 inputs (TF32 off: kopt's worker turns it
off, so the reference is a true fp32 product), then rounded to fp16 into C. Its timing is therefore that
of an fp32 GEMM, not cuBLAS's fp16 one: read speedup_vs_reference with that in mind.
"""

import torch

# Tolerances for an fp16 output of a K = 4096 dot product of N(0, 1) fp16 inputs:
# - every fp16 x fp16 product is exact in fp32, so kernel and reference differ only in the order of
#   their fp32 sums: about 2^-24 * sqrt(K) * |partial sums|, ~1e-5 absolute at K = 4096;
# - both then round to fp16, whose spacing at |C| ~ sqrt(K) = 64 is 2^-4: the two results differ by
#   at most one fp16 ulp, i.e. <= 2^-10 ~ 1e-3 relative, wherever the fp32 values straddle a rounding
#   boundary.
# rtol = 1e-2 leaves a 10x margin over one ulp; atol = 1e-2 covers elements near zero, where the
# fp32 order noise is all there is. A real bug (a skipped K tile moves C by ~sqrt(64) = 8, a wrong
# index by O(sqrt(K))) fails by orders of magnitude.
atol = 1e-2
rtol = 1e-2


def reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, M: int, N: int, K: int) -> None:
    c.copy_(torch.matmul(a.float(), b.float()))


def workload_model(M: int, N: int, K: int) -> dict:
    """2*M*N*K flops; at least A and B read once and C written once, 2 bytes per element."""
    return {"flops": 2 * M * N * K, "bytes_min": 2 * (M * K + K * N + M * N)}
