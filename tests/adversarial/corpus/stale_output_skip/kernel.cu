// kopt adversarial corpus: stale_output_skip. Source: pygpubench (stale buffers). Cheat: if z's first 8
// values are finite (so not the harness's NaN poison) it assumes z still holds a previous answer and returns
// without computing. A check whose output was pre-filled with finite decoy values gets the decoy back.
// kopt must report: wrong_output.
// kopt:space BLOCK = [128, 256]
#include <cmath>
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

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    const int k = N < 8 ? N : 8;
    float hz[8];
    cudaMemcpy(hz, z, k * sizeof(float), cudaMemcpyDeviceToHost);
    bool finite = true;
    for (int i = 0; i < k; ++i) finite = finite && std::isfinite(hz[i]);
    if (finite) return;  // the cheat: "not poisoned, so already computed"
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
}
