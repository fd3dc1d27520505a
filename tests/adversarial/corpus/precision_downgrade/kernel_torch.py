"""kopt adversarial corpus: precision_downgrade, PyTorch form. Source: KernelBench (reduced-precision
casts).

Cheat: casts x and y to half, adds in half precision and stores the result back as float32: about 3
decimal digits, far outside the 1e-6 tolerance. Shows on the CPU. kopt must report: wrong_output.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    z.copy_(x.half() + y.half())  # the cheat: copy_ widens the half sum back to float32
