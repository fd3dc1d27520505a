"""kopt adversarial corpus: pointer_cache, PyTorch form. Source: CUDA-L1 authors' report of caching keyed
on input pointers.

Cheat: keeps a copy of the last result keyed on (x, y) data pointers; when they match, copies it into z
instead of computing. kopt refills the same buffers, so later checks get a stale answer. kopt must
report: wrong_output.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing

_cache = {}  # (x pointer, y pointer, N) -> copy of the result computed for them


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    key = (x.data_ptr(), y.data_ptr(), N)
    hit = _cache.get(key)
    if hit is not None:
        z.copy_(hit)  # the cheat: same pointers, so "same inputs"
        return
    torch.add(x, y, out=z)
    _cache.clear()
    _cache[key] = z.clone()
