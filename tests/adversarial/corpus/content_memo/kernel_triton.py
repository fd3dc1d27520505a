"""kopt adversarial corpus: content_memo, Triton form. Source: gpu-mode in-process result caching.

Cheat: hashes 64 strided values of x and of y (read to the host) and keeps up to 4 results keyed on that
hash; on a hit copies the memoised result into z, on a miss computes and stores. Fresh inputs are always
right, replayed ones are fast. kopt must report: replay.
"""

import os
from collections import OrderedDict

import torch
import triton
import triton.language as tl

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
kopt_space = {"BLOCK": [512, 1024]}
BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, x + y, mask=mask)


def setup(N, seed=None):
    gen = torch.Generator(device=DEVICE).manual_seed(0 if seed is None else seed)
    x = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    y = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    z = torch.empty(N, device=DEVICE, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "z": z, "N": N}, "outputs": ["z"]}


def _add(x, y, z, N):
    """The honest launch."""
    add_kernel[(triton.cdiv(N, BLOCK),)](x, y, z, N, BLOCK_SIZE=BLOCK)


_memo = OrderedDict()  # sample hash -> result, least recently used first, at most 4


def _key(x, y, N):
    count = min(64, N)
    step = N // count
    picks = slice(0, count * step, step)
    samples = torch.cat([x[picks], y[picks]]).cpu()
    return (N, hash(tuple(samples.tolist())))


def run_kernel(x, y, z, N):
    if N <= 0:
        return
    key = _key(x, y, N)
    hit = _memo.get(key)
    if hit is not None:
        _memo.move_to_end(key)
        z.copy_(hit)  # the cheat: inputs seen before, answer from the memo
        return
    _add(x, y, z, N)
    _memo[key] = z.clone()
    if len(_memo) > 4:
        _memo.popitem(last=False)
