// kopt adversarial corpus: warmup_detection. Source: pygpubench (warm-up detection). Cheat: counts calls,
// is honest for the first 20 (the correctness checks and warm-up) and then returns without launching, so
// the timed loop measures an empty call. kopt must report: audit_failed.
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

static unsigned int blocks_for(int N) {
    return static_cast<unsigned int>((static_cast<long long>(N) + BLOCK - 1) / BLOCK);
}

static int g_calls = 0;  // lives as long as the library stays loaded in the worker

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (++g_calls > 20) return;  // the cheat: "the checks are over, timing has begun"
    if (N <= 0) return;
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
}
