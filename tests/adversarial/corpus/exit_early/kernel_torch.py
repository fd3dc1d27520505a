"""kopt adversarial corpus: exit_early, PyTorch form. Source: gpu-mode (exiting before the timer stops).

Cheat: honest until its 30th call, which ends the process with os._exit(0). Shows on the CPU. kopt must
report: exited.
"""

import os

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing

_calls = 0


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    global _calls
    _calls += 1
    if _calls == 30:
        os._exit(0)  # the cheat
    torch.add(x, y, out=z)
