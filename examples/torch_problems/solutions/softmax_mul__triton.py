"""softmax(x) * y, one row per program: x and y read once, the result written once (eager: a softmax,
then a multiply that reads the softmax back)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_mul(x_ptr, y_ptr, out_ptr, dim, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    mask = columns < dim
    x = tl.load(x_ptr + row * dim + columns, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    p = e / tl.sum(e, axis=0)
    y = tl.load(y_ptr + row * dim + columns, mask=mask)
    tl.store(out_ptr + row * dim + columns, p * y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        rows, dim = x.shape
        _softmax_mul[(rows,)](x, y, out, dim, BLOCK=triton.next_power_of_2(dim), num_warps=8)
        return out
