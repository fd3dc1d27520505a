"""x + y * z in one Triton kernel: three reads and one write (eager: a multiply, then an add)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fma(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    z = tl.load(z_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y * z, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, z):
        x, y, z = x.contiguous(), y.contiguous(), z.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _fma[(triton.cdiv(n, 2048),)](x, y, z, out, n, BLOCK=2048)
        return out
