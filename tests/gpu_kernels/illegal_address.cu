// Test kernel: crashes with an illegal memory access. After computing y, every thread also stores
// through a wild pointer. The CUDA context of the process is then unusable ("an illegal memory access was
// encountered" from every later call), which is why kopt runs each candidate in its own worker process:
// the candidate must be reported as failed, and kopt (and the GPU) must go on working for the next one.
//
// The wild pointer is the null page, passed in as a kernel argument. Not y + (1 << 30) or the like: on a
// 141 GB card that can land inside another live allocation (the L2-flush buffer, a rotated input copy)
// and corrupt it silently instead of faulting. Address 0 is never mapped, and because it arrives as an
// argument the compiler cannot see it is null and drop the store as undefined behaviour.
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n, float* wild) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.5f * x[i];
        wild[i] = y[i];  // the bug: a store to an unmapped address
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((N + 255LL) / 256);
    scale_kernel<<<blocks, 256>>>(x, y, N, nullptr);
}
