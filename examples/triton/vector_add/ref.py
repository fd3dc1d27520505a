"""Reference for examples/triton/vector_add/kernel.py: z = x + y (float32)."""

import torch

# One correctly rounded fp32 add per element on both sides: results agree bit for bit. The tolerance
# only leaves room for a different but equivalent evaluation.
atol = 1e-6
rtol = 1e-6


def reference(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    torch.add(x, y, out=z)


def workload_model(N: int) -> dict:
    """One add per element; at least x and y read once and z written once (4 bytes each)."""
    return {"flops": N, "bytes_min": 12 * N}
