// Test kernel: does the work on the first call only. A static host-side counter makes every later call
// return without launching anything, so later calls leave y as it was (poisoned, or the previous result)
// and the timed loop measures nothing. This is how a kernel that caches results or skips work would game
// a harness that checks once and then times; kopt's checks on later seeds and its re-check with fresh
// inputs after the timed loop must fail it.
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.5f * x[i];
    }
}

static int g_calls = 0;  // lives as long as the library stays loaded in the worker process

extern "C" void solve(const float* x, float* y, int N) {
    if (g_calls++ > 0) return;  // the cheat
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((N + 255LL) / 256);
    scale_kernel<<<blocks, 256>>>(x, y, N);
}
