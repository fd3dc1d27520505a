// kopt adversarial corpus: honest (the control). z = x + y, one element per thread, launched on the
// calling thread's default stream (kopt builds with --default-stream per-thread) and never
// synchronized: kopt does that. Every check must pass it.
// kopt:space BLOCK = [128, 256]
#include <cuda_runtime.h>

#ifndef BLOCK
#define BLOCK 256
#endif

__global__ void add_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ z,
                           int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((static_cast<long long>(N) + BLOCK - 1) / BLOCK);
    add_kernel<<<blocks, BLOCK>>>(x, y, z, N);
}
