"""torch's own fp16 GEMM for examples/cutlass/gemm_sm90_search: C = A @ B with B stored column-major (the
(N, K) buffer holds B transposed), every operand fp16 (cuBLAS, fp32 accumulation). tests/gpu/
test_search_gpu.py benches the search's best kernel against this reference so that the reference timing
is cuBLAS's fp16 GEMM, not the fp32 product the example's own ref.py computes for accuracy. Same buffers
and tolerances as that ref.py.
"""

from __future__ import annotations

import torch

atol = 1e-2
rtol = 1e-2


def buffers(M: int, N: int, K: int) -> dict[str, dict]:
    return {
        "A": {"shape": (M, K), "dtype": "float16", "role": "input", "init": "randn"},
        "B": {"shape": (N, K), "dtype": "float16", "role": "input", "init": "randn"},
        "C": {"shape": (M, N), "dtype": "float16", "role": "output"},
    }


def reference(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, M: int, N: int, K: int) -> None:
    torch.matmul(A.view(M, K), B.view(N, K).T, out=C.view(M, N))
