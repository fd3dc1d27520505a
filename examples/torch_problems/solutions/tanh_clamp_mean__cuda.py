"""clamp(tanh(x), -0.5, 0.5).mean(-1) in one CUDA kernel (load_inline): each row read once, a block per
row (eager writes and reads back two full-size intermediates)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void tanh_clamp_mean_kernel(const float* __restrict__ x, float* __restrict__ out, int dim) {
    __shared__ float shared[32];
    const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
    float total = 0.f;
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
        const float4 v = row[i];
        total += fminf(fmaxf(tanhf(v.x), -0.5f), 0.5f) + fminf(fmaxf(tanhf(v.y), -0.5f), 0.5f)
               + fminf(fmaxf(tanhf(v.z), -0.5f), 0.5f) + fminf(fmaxf(tanhf(v.w), -0.5f), 0.5f);
    }
    for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffff, total, offset);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = total;
    __syncthreads();
    if (threadIdx.x < 32) {
        total = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.f;
        for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffff, total, offset);
        if (threadIdx.x == 0) out[blockIdx.x] = total / dim;
    }
}

torch::Tensor tanh_clamp_mean(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "a contiguous CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "float32");
    const int dim = x.size(-1);
    TORCH_CHECK(dim % 4 == 0, "the last dim must be a multiple of 4");
    auto sizes = x.sizes().vec();
    sizes.pop_back();
    auto out = torch::empty(sizes, x.options());
    tanh_clamp_mean_kernel<<<x.numel() / dim, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), dim);
    return out;
}
"""

_ext = load_inline(
    name="kopt_example_tanh_clamp_mean",
    cpp_sources="torch::Tensor tanh_clamp_mean(torch::Tensor x);",
    cuda_sources=_CUDA,
    functions=["tanh_clamp_mean"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.tanh_clamp_mean(x.contiguous())
