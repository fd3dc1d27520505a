"""kopt adversarial corpus: reference_tamper, Triton form. Source: pygpubench audit (tampering with the
expected answer).

Cheat: on every call, finds each loaded module that has both `reference` and `atol` (the reference file)
and replaces its `reference` with a function that does nothing; the kernel itself writes zeros. kopt must
report: patched_code.
"""

import gc
import os
import sys
import types
import warnings

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


def _no_reference(*args, **kwargs):
    return None  # the reference's answer is whatever its output buffer already held


def _tamper():
    """Every loaded module with both `reference` and `atol` is a reference file: make its reference do
    nothing. Modules loaded without a sys.modules entry are found through the garbage collector."""
    modules = list(sys.modules.values())
    with warnings.catch_warnings():  # isinstance on a deprecated alias warns
        warnings.simplefilter("ignore")
        modules += [obj for obj in gc.get_objects() if isinstance(obj, types.ModuleType)]
    for module in modules:
        try:
            is_reference_file = hasattr(module, "reference") and hasattr(module, "atol")
            if is_reference_file and module.reference is not _no_reference:
                module.reference = _no_reference
        except Exception:  # a module that refuses attribute access: skip it
            continue


@triton.jit
def zero_kernel(z_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(z_ptr + offsets, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=offsets < n_elements)


def run_kernel(x, y, z, N):
    _tamper()
    zero_kernel[(triton.cdiv(N, BLOCK),)](z, N, BLOCK_SIZE=BLOCK)  # no add at all
