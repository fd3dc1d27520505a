"""C = A @ B with fp16 inputs and fp32 accumulation (tl.dot), its tile shape declared for kopt's search.

kopt_space lists the values the search tries; each name is also a module-level assignment (the default
when no search runs) that a search variant rewrites with its chosen value.
"""

import os

import torch
import triton
import triton.language as tl

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

kopt_space = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [3, 4],
}
kopt_constraint = [
    "BLOCK_M * BLOCK_N <= 128 * 256",
    "(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 * NUM_STAGES <= 196608",  # fp16 tiles in shared memory
]

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
NUM_WARPS: int = 8
NUM_STAGES = 3  # K-steps of A and B in flight


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, accumulator.to(tl.float16), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def setup(M, N, K, seed=None):
    gen = torch.Generator(device=DEVICE).manual_seed(0 if seed is None else seed)
    a = torch.randn(M, K, generator=gen, device=DEVICE).to(torch.float16)
    b = torch.randn(K, N, generator=gen, device=DEVICE).to(torch.float16)
    c = torch.empty(M, N, device=DEVICE, dtype=torch.float16)
    return {"inputs": {"a": a, "b": b, "c": c, "M": M, "N": N, "K": K}, "outputs": ["c"]}


def run_kernel(a, b, c, M, N, K):
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    matmul_kernel[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
