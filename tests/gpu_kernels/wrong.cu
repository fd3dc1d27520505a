// Test kernel: wrong result. Computes y = 2.4f * x instead of 2.5f * x: every nonzero element is off by
// 4% relative, far beyond the reference's tolerance, so kopt must report mismatches and exit 2.
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.4f * x[i];  // the bug
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((N + 255LL) / 256);
    scale_kernel<<<blocks, 256>>>(x, y, N);
}
