"""WRONG on purpose (kopt must fail it, exit 2): examples/triton/vector_add with an off-by-one mask, so the
last element of z is never written. Checked against examples/triton/vector_add/ref.py.

z = x + y over N float32 elements, one program per block of 1024 elements.

kopt's Triton contract: ``setup(**dims, seed)`` makes the arguments, ``run_kernel(**inputs)`` launches.
With ``TRITON_INTERPRET=1`` the same file runs on the CPU through Triton's interpreter.
"""

import os

import torch
import triton
import triton.language as tl

# Under Triton's interpreter the kernel reads and writes CPU tensors; on a GPU, CUDA tensors.
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
BLOCK = 1024  # elements per program: 4 KiB of each operand, enough to keep a memory-bound add streaming


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements - 1  # BUG: should be < n_elements; element N-1 stays unwritten
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, x + y, mask=mask)


def setup(N, seed=None):
    """Fresh random x and y for each seed (never zeros, so a kernel that skips work is caught); z is the
    output, which kopt poisons before every checked launch."""
    gen = torch.Generator(device=DEVICE).manual_seed(0 if seed is None else seed)
    x = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    y = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    z = torch.empty(N, device=DEVICE, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "z": z, "N": N}, "outputs": ["z"]}


def run_kernel(x, y, z, N):
    grid = (triton.cdiv(N, BLOCK),)
    add_kernel[grid](x, y, z, N, BLOCK_SIZE=BLOCK)
