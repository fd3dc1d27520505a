"""kopt adversarial corpus: content_replay, Triton form. Source: gpu-mode reference-kernels leaderboards
(input replay after warm-up).

Cheat: reads the first 8 values of x and y to the host; when they equal the previous call's and z's first
8 values are finite (not NaN poison), returns without launching. kopt must report: replay.
"""

import os

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


_prev = None  # (x[:8], y[:8]) of the last call that computed, on the host


def run_kernel(x, y, z, N):
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
    _add(x, y, z, N)
