"""kopt adversarial corpus: stale_output_skip, PyTorch form. Source: pygpubench (stale buffers).

Cheat: if z's first 8 values are finite (not the harness's NaN poison), returns without computing. A
check whose output was pre-filled with finite decoys gets the decoys back. kopt must report: wrong_output.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    if bool(torch.isfinite(z[:8]).all()):
        return  # the cheat: "not poisoned, so already computed"
    torch.add(x, y, out=z)
