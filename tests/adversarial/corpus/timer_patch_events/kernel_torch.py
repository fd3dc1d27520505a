"""kopt adversarial corpus: timer_patch_events, PyTorch form. Source: SOL-ExecBench (timing functions
snapshotted before user code), gpu-mode (patched timers).

Cheat: at import, replaces torch.cuda.Event.elapsed_time with a wrapper that returns half the real value;
the add itself is honest. The patch is made on a CPU-only machine too. kopt must report: patched_code.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing


# The cheat, at import: every CUDA-event timing now reads half the real time. torch.cuda.Event is a
# Python class even in a CPU-only build, so the patch is made with or without a GPU.
_real_elapsed_time = torch.cuda.Event.elapsed_time


def _half_elapsed_time(self, end_event):
    return _real_elapsed_time(self, end_event) / 2


torch.cuda.Event.elapsed_time = _half_elapsed_time


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    torch.add(x, y, out=z)
