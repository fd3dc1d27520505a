// kopt adversarial corpus: exit_early. Source: gpu-mode (exiting before the timer stops). Cheat: honest
// until its 30th call, which ends the process with exit(0) in the middle of the timed loop, hoping a
// harness reads a clean exit status as success. kopt must report: exited.
// kopt:space BLOCK = [128, 256]
#include <cstdlib>
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

static int g_calls = 0;

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (++g_calls == 30) std::exit(0);  // the cheat
    if (N <= 0) return;
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
}
