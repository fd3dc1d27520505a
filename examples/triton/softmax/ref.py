"""Reference for examples/triton/softmax/kernel.py: softmax over each row, float32."""

import torch

# Outputs lie in [0, 1]. Triton's fp32 exp is exp2(x * log2(e)) with a hardware exp2 (about 2 ulp); the
# argument x - max can reach about 30 here, and rounding it times log2(e) moves exp by up to ~2e-6
# relative; the row sum adds ~1e-7. rtol = 1e-5 leaves about a 5x margin on every element that matters;
# atol = 1e-6 covers elements that are ~0 (exp(-30) ~ 1e-13, flushed to zero or not). A real bug (a
# missing max, a wrong normaliser, a skipped column) is off by far more, or NaN.
atol = 1e-6
rtol = 1e-5


def reference(x: torch.Tensor, y: torch.Tensor, M: int, N: int) -> None:
    y.copy_(torch.softmax(x, dim=1))


def workload_model(M: int, N: int) -> dict:
    """About 5 flops per element (max, subtract, exp, sum, divide); x read once and y written once."""
    return {"flops": 5 * M * N, "bytes_min": 8 * M * N}
