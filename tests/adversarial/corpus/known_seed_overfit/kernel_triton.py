"""kopt adversarial corpus: known_seed_overfit, Triton form. Source: KernelBench adversarial tests
(outputs memorised for the test inputs).

Cheat: on its first call it rebuilds, with its own setup(), the inputs kopt's correctness checks use
(seeds 0, 1, 2 and the recheck seed 1000003) and memorises x + y for each. A call whose x is exactly one of
them gets the memorised answer; any other call (a timed launch on fresh inputs) gets zeros, fast and
wrong. kopt must report: audit_failed.
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


KNOWN_SEEDS = (0, 1, 2, 1000003)
_answers = None  # [(x, x + y)] for the known seeds, built for one (N, device)
_built_for = None


def run_kernel(x, y, z, N):
    global _answers, _built_for
    if _built_for != (N, x.device):
        _answers = []
        for seed in KNOWN_SEEDS:
            known = setup(N, seed)["inputs"]
            kx, ky = known["x"].to(x.device), known["y"].to(x.device)
            kz = torch.empty_like(kx)
            _add(kx, ky, kz, N)
            _answers.append((kx, kz))
        _built_for = (N, x.device)
    for kx, kz in _answers:
        if torch.equal(x, kx):
            z.copy_(kz)  # a test input: the memorised answer
            return
    z.zero_()  # the cheat: anything else is "probably timing", so skip the work
