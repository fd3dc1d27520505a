"""RMS norm in one CUDA kernel (load_inline): a block per row, the sum of squares reduced in registers and
shared memory, the row read twice from L2 (eager runs five kernels: pow, mean, add, rsqrt, mul)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ float block_sum(float value, float* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffff, value, offset);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    value = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.f;
    if (warp == 0)
        for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffff, value, offset);
    if (threadIdx.x == 0) shared[0] = value;
    __syncthreads();
    return shared[0];
}

__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ out, int dim, float eps) {
    __shared__ float shared[32];
    const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
    float4* target = reinterpret_cast<float4*>(out + (size_t)blockIdx.x * dim);
    float squares = 0.f;
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
        const float4 v = row[i];
        squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float scale = rsqrtf(block_sum(squares, shared) / dim + eps);
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
        float4 v = row[i];
        v.x *= scale; v.y *= scale; v.z *= scale; v.w *= scale;
        target[i] = v;
    }
}

torch::Tensor rms_norm(torch::Tensor x, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "a contiguous CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "float32");
    const int dim = x.size(-1);
    TORCH_CHECK(dim % 4 == 0, "the last dim must be a multiple of 4");
    auto out = torch::empty_like(x);
    const int rows = x.numel() / dim;
    rms_norm_kernel<<<rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), dim, (float)eps);
    return out;
}
"""

_ext = load_inline(
    name="kopt_example_rms_norm",
    cpp_sources="torch::Tensor rms_norm(torch::Tensor x, double eps);",
    cuda_sources=_CUDA,
    functions=["rms_norm"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.rms_norm(x.contiguous(), 1e-6)
