"""sigmoid(x * scale + shift) * x in one Triton kernel (eager runs four)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish(x_ptr, scale_ptr, shift_ptr, out_ptr, n, dim, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    column = offsets % dim
    scale = tl.load(scale_ptr + column, mask=mask)
    shift = tl.load(shift_ptr + column, mask=mask)
    y = x * scale + shift
    tl.store(out_ptr + offsets, x / (1.0 + tl.exp(-y)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _swish[(triton.cdiv(n, 1024),)](x, self.scale, self.shift, out, n, x.shape[-1], BLOCK=1024)
        return out
