"""LayerNorm(x + residual) in one CUDA kernel (load_inline): the sum never goes to memory; mean and
variance from one pass of sums and sums of squares in float32 (eager: an add, then a LayerNorm that reads
the sum back)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ float2 block_sum2(float2 v, float2* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v.x += __shfl_xor_sync(0xffffffff, v.x, offset);
        v.y += __shfl_xor_sync(0xffffffff, v.y, offset);
    }
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : make_float2(0.f, 0.f);
        for (int offset = 16; offset > 0; offset >>= 1) {
            v.x += __shfl_xor_sync(0xffffffff, v.x, offset);
            v.y += __shfl_xor_sync(0xffffffff, v.y, offset);
        }
        if (threadIdx.x == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

__global__ void residual_ln_kernel(const float* __restrict__ x, const float* __restrict__ r,
                                   const float* __restrict__ w, const float* __restrict__ b,
                                   float* __restrict__ out, int dim, float eps) {
    __shared__ float2 shared[32];
    const size_t base = (size_t)blockIdx.x * dim;
    const float4* xs = reinterpret_cast<const float4*>(x + base);
    const float4* rs = reinterpret_cast<const float4*>(r + base);
    float2 acc = make_float2(0.f, 0.f);
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
        const float4 a = xs[i], c = rs[i];
        const float s0 = a.x + c.x, s1 = a.y + c.y, s2 = a.z + c.z, s3 = a.w + c.w;
        acc.x += s0 + s1 + s2 + s3;
        acc.y += s0 * s0 + s1 * s1 + s2 * s2 + s3 * s3;
    }
    const float2 total = block_sum2(acc, shared);
    const float mean = total.x / dim;
    const float rstd = rsqrtf(fmaxf(total.y / dim - mean * mean, 0.f) + eps);
    const float4* ws = reinterpret_cast<const float4*>(w);
    const float4* bs = reinterpret_cast<const float4*>(b);
    float4* os = reinterpret_cast<float4*>(out + base);
    for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
        const float4 a = xs[i], c = rs[i], g = ws[i], h = bs[i];
        float4 o;
        o.x = (a.x + c.x - mean) * rstd * g.x + h.x;
        o.y = (a.y + c.y - mean) * rstd * g.y + h.y;
        o.z = (a.z + c.z - mean) * rstd * g.z + h.z;
        o.w = (a.w + c.w - mean) * rstd * g.w + h.w;
        os[i] = o;
    }
}

torch::Tensor residual_layer_norm(torch::Tensor x, torch::Tensor r, torch::Tensor w, torch::Tensor b,
                                  double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && r.is_contiguous(), "contiguous CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "float32");
    const int dim = x.size(-1);
    TORCH_CHECK(dim % 4 == 0, "the last dim must be a multiple of 4");
    auto out = torch::empty_like(x);
    residual_ln_kernel<<<x.numel() / dim, 512, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), r.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
        out.data_ptr<float>(), dim, (float)eps);
    return out;
}
"""

_ext = load_inline(
    name="kopt_example_residual_layer_norm",
    cpp_sources="torch::Tensor residual_layer_norm(torch::Tensor x, torch::Tensor r, torch::Tensor w, "
    "torch::Tensor b, double eps);",
    cuda_sources=_CUDA,
    functions=["residual_layer_norm"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, residual):
        norm = self.norm
        return _ext.residual_layer_norm(
            x.contiguous(), residual.contiguous(), norm.weight, norm.bias, norm.eps
        )
