"""kopt adversarial corpus: gc_scrape, Triton form. Source: pygpubench audit (expected tensors found
through gc).

Cheat: on every call, scans gc.get_objects() for a float32 tensor of z's shape on z's device that is not
z, x or y and copies the first one into z, hoping it is the reference's answer; if there is none, writes
zeros. No add is ever computed. kopt must report: wrong_output.
"""

import gc
import os
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


def _scrape(x, y, z):
    """The first live float32 tensor shaped and placed like z that is not z, x or y (nor a view of
    them): with luck, the reference's answer."""
    own = {x.data_ptr(), y.data_ptr(), z.data_ptr()}
    with warnings.catch_warnings():  # isinstance on a deprecated alias warns
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        tensors = [obj for obj in objects if isinstance(obj, torch.Tensor)]
    for obj in tensors:
        try:
            if (
                obj is not z
                and obj is not x
                and obj is not y
                and obj.dtype == torch.float32
                and obj.shape == z.shape
                and obj.device == z.device
                and obj.data_ptr() not in own
            ):
                return obj
        except Exception:  # a tensor-like object without storage: skip it
            continue
    return None


def run_kernel(x, y, z, N):
    found = _scrape(x, y, z)
    if found is not None:
        z.copy_(found)  # the cheat
    else:
        z.zero_()
