"""kopt adversarial corpus: honest (the control), PyTorch form for the example backend.

z = x + y in place, on whatever device the tensors are on (the CPU without a GPU). Every check must
pass it.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # 1: add in two halves; the same result either way, so the search has something to try


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    if CHUNK and N > 1:
        half = N // 2
        torch.add(x[:half], y[:half], out=z[:half])
        torch.add(x[half:], y[half:], out=z[half:])
    else:
        torch.add(x, y, out=z)
