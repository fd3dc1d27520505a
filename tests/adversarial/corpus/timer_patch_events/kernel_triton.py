"""kopt adversarial corpus: timer_patch_events, Triton form. Source: SOL-ExecBench (timing functions
snapshotted before user code), gpu-mode (patched timers).

Cheat: at import, replaces torch.cuda.Event.elapsed_time with a wrapper that returns half the real value;
the add itself is honest. kopt must report: patched_code.
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


# The cheat, at import: every CUDA-event timing now reads half the real time. torch.cuda.Event is a
# Python class even in a CPU-only build, so the patch is made with or without a GPU.
_real_elapsed_time = torch.cuda.Event.elapsed_time


def _half_elapsed_time(self, end_event):
    return _real_elapsed_time(self, end_event) / 2


torch.cuda.Event.elapsed_time = _half_elapsed_time


def run_kernel(x, y, z, N):
    _add(x, y, z, N)
