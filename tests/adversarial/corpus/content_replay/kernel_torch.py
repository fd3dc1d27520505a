"""kopt adversarial corpus: content_replay, PyTorch form. Source: gpu-mode reference-kernels leaderboards
(input replay after warm-up).

Cheat: reads the first 8 values of x and y to the host; when they equal the previous call's and z's first
8 values are finite (not NaN poison), returns without computing. kopt must report: replay.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing

_prev = None  # (x[:8], y[:8]) of the last call that computed, on the host


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    global _prev
    head = (x[:8].cpu().clone(), y[:8].cpu().clone())  # clone: on the CPU .cpu() is a view of x
    if (
        _prev is not None
        and torch.equal(head[0], _prev[0])
        and torch.equal(head[1], _prev[1])
        and bool(torch.isfinite(z[:8]).all())
    ):
        return  # the cheat: same inputs as last time, z is left as it was
    _prev = head
    torch.add(x, y, out=z)
