"""kopt adversarial corpus: host_wait_side_stream, Triton form. Source: SOL-ExecBench (work hidden behind
the harness's hold).

Cheat: launches the add on a side stream (created once) and waits for it on the host (s.synchronize()),
so the add overlaps whatever the timed stream was doing (the harness's hold) and the timed stream's
events time nothing. On the CPU (TRITON_INTERPRET=1) it computes honestly. kopt must report:
escaped_stream.
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


_side = None


def run_kernel(x, y, z, N):
    global _side
    if not x.is_cuda:
        _add(x, y, z, N)
        return
    if _side is None:
        _side = torch.cuda.Stream()
    with torch.cuda.stream(_side):
        _add(x, y, z, N)  # the cheat: off the timed stream
    _side.synchronize()  # finished before run_kernel returns
