"""kopt adversarial corpus: warmup_detection, PyTorch form. Source: pygpubench (warm-up detection).

Cheat: counts calls, honest for the first 20, then returns without computing. kopt must report:
audit_failed.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing

_calls = 0


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    global _calls
    _calls += 1
    if _calls > 20:
        return  # the cheat: "the checks are over, timing has begun"
    torch.add(x, y, out=z)
