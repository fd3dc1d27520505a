"""torch's own fp16 GEMM for examples/triton/matmul_autotune: C = A @ B, every operand fp16 (cuBLAS, fp32
accumulation). tests/gpu/test_search_gpu.py benches the search's best kernel against this reference so
that the reference timing is cuBLAS's fp16 GEMM, not the fp32 product the example's own ref.py computes
for accuracy. Same buffers and tolerances as that ref.py.
"""

import torch

atol = 1e-2
rtol = 1e-2


def reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, M: int, N: int, K: int) -> None:
    torch.matmul(a, b, out=c)
