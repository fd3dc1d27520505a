"""kopt adversarial corpus: warmup_detection, Triton form. Source: pygpubench (warm-up detection).

Cheat: counts calls, honest for the first 20, then returns without launching. kopt must report:
audit_failed.
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


_calls = 0


def run_kernel(x, y, z, N):
    global _calls
    _calls += 1
    if _calls > 20:
        return  # the cheat: "the checks are over, timing has begun"
    _add(x, y, z, N)
