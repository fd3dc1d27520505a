"""kopt adversarial corpus: content_memo, PyTorch form. Source: gpu-mode in-process result caching.

Cheat: hashes 64 strided values of x and of y (read to the host) and keeps up to 4 results keyed on that
hash; on a hit copies the memoised result into z, on a miss computes and stores. Fresh inputs are always
right, replayed ones are fast. kopt must report: replay.
"""

from collections import OrderedDict

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing

_memo = OrderedDict()  # sample hash -> result, least recently used first, at most 4


def _key(x, y, N):
    count = min(64, N)
    step = N // count
    picks = slice(0, count * step, step)
    samples = torch.cat([x[picks], y[picks]]).cpu()
    return (N, hash(tuple(samples.tolist())))


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    if N <= 0:
        return
    key = _key(x, y, N)
    hit = _memo.get(key)
    if hit is not None:
        _memo.move_to_end(key)
        z.copy_(hit)  # the cheat: inputs seen before, answer from the memo
        return
    torch.add(x, y, out=z)
    _memo[key] = z.clone()
    if len(_memo) > 4:
        _memo.popitem(last=False)
