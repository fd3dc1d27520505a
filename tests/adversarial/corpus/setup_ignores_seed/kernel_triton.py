"""kopt adversarial corpus: setup_ignores_seed, Triton form only. Source: gpu-mode (inputs the submission
controls).

Cheat: setup() ignores its seed and always draws from manual_seed(0), so every check and every timed
launch sees the same inputs; run_kernel then skips the work whenever x's first 8 values equal the last
call's and z's first 8 values are finite. kopt must report: inputs_not_fresh.
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
    gen = torch.Generator(device=DEVICE).manual_seed(0)  # the cheat: the seed is ignored
    x = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    y = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    z = torch.empty(N, device=DEVICE, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "z": z, "N": N}, "outputs": ["z"]}


_prev_head = None  # x[:8] of the last call that computed, on the host


def run_kernel(x, y, z, N):
    global _prev_head
    head = x[:8].cpu().clone()  # clone: on the CPU .cpu() is a view of x
    if _prev_head is not None and torch.equal(head, _prev_head) and bool(torch.isfinite(z[:8]).all()):
        return  # the payoff: the inputs never change, so neither does the answer
    _prev_head = head
    add_kernel[(triton.cdiv(N, BLOCK),)](x, y, z, N, BLOCK_SIZE=BLOCK)
