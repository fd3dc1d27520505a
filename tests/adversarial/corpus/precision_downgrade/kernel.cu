// kopt adversarial corpus: precision_downgrade. Source: KernelBench (reduced-precision casts). Cheat: adds
// in fp16: each input is rounded to __half, added with __hadd, and the half result widened back to float.
// That is about 3 decimal digits, far outside the reference's 1e-6 tolerance. kopt must report:
// wrong_output.
// kopt:space BLOCK = [128, 256]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifndef BLOCK
#define BLOCK 256
#endif

__global__ void add_half_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                float* __restrict__ z, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) z[i] = __half2float(__hadd(__float2half(x[i]), __float2half(y[i])));  // the cheat
}

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((static_cast<long long>(N) + BLOCK - 1) / BLOCK);
    add_half_kernel<<<blocks, BLOCK>>>(x, y, z, N);
}
