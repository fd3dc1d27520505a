"""Softmax branch b2 for examples/triton/softmax (same setup, same ref.py): row-wise softmax of an (M, N)
float32 matrix, each row held whole in registers (BLOCK = next power of two >= N, the columns past N
loaded as -inf) with the row maximum subtracted before exp.

What the branches change in the example (one program per row): a persistent grid. PROGRAMS_PER_SM
programs per SM, each looping over rows pid, pid + grid, ... (compute.persistent_kernel), with the loop
software-pipelined over NUM_STAGES stages (tl.range's num_stages), so that the next row's load can be in
flight while this row is reduced (latency.double_buffering). The branches differ in hyperparameters
only.

b2: NUM_WARPS = 8 (a row of 8192 floats is 32 per thread), 4 programs per SM (the same 32 warps per SM
as b1), 2 stages.
"""

import os

import torch
import triton
import triton.language as tl

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

NUM_WARPS = 8
PROGRAMS_PER_SM = 4
NUM_STAGES = 2

_SM_COUNT: dict[int, int] = {}


@triton.jit
def softmax_persistent_kernel(
    y_ptr, x_ptr, x_row_stride, y_row_stride, n_rows, n_cols, BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr
):
    first = tl.program_id(axis=0)
    step = tl.num_programs(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(first, n_rows, step, num_stages=NUM_STAGES):
        # 64-bit row offset: M * N may exceed 2**31 elements for large inputs.
        offset = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + offset * x_row_stride + cols, mask=mask, other=-float("inf"))
        shifted = x - tl.max(x, axis=0)
        numerator = tl.exp(shifted)
        denominator = tl.sum(numerator, axis=0)
        tl.store(y_ptr + offset * y_row_stride + cols, numerator / denominator, mask=mask)


def setup(M, N, seed=None):
    """Fresh logits per seed, as examples/triton/softmax draws them: each row gets its own offset in
    [-100, 100] on top of a N(0, 4^2) spread, so a kernel that forgets the row maximum overflows."""
    gen = torch.Generator(device=DEVICE).manual_seed(0 if seed is None else seed)
    offsets = (torch.rand(M, 1, generator=gen, device=DEVICE) * 200.0) - 100.0
    x = torch.randn(M, N, generator=gen, device=DEVICE, dtype=torch.float32) * 4.0 + offsets
    y = torch.empty(M, N, device=DEVICE, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "M": M, "N": N}, "outputs": ["y"]}


def _sm_count(x):
    """The SM count of x's device, queried once (4 under the CPU interpreter)."""
    if x.device.type != "cuda":
        return 4
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def run_kernel(x, y, M, N):
    if M <= 0 or N <= 0:
        return
    block = triton.next_power_of_2(N)
    programs = min(M, _sm_count(x) * PROGRAMS_PER_SM)
    softmax_persistent_kernel[(programs,)](
        y, x, x.stride(0), y.stride(0), M, N, BLOCK=block, NUM_STAGES=NUM_STAGES, num_warps=NUM_WARPS
    )
