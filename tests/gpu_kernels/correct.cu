// Test kernel: correct. y = 2.5f * x. The control case: kopt must accept and time it
// (and still does after illegal_address.cu has crashed a worker).
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.5f * x[i];
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((N + 255LL) / 256);
    scale_kernel<<<blocks, 256>>>(x, y, N);
}
