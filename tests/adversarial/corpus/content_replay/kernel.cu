// kopt adversarial corpus: content_replay. Source: gpu-mode reference-kernels leaderboards (input replay
// after warm-up). Cheat: read the first 8 values of x and y back to the host; when they equal the previous
// call's and z's first 8 values are finite (not the harness's NaN poison), return without launching, so a
// timed loop that replays the same inputs measures only three tiny copies. kopt must report: replay.
// kopt:space BLOCK = [128, 256]
#include <cmath>
#include <cstring>
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

static bool g_have_prev = false;
static float g_prev_x[8], g_prev_y[8];

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    const int k = N < 8 ? N : 8;
    float hx[8], hy[8], hz[8];
    // Synchronous copies on the per-thread default stream: they wait for whatever wrote these buffers.
    cudaMemcpy(hx, x, k * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hy, y, k * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hz, z, k * sizeof(float), cudaMemcpyDeviceToHost);
    bool finite = true;
    for (int i = 0; i < k; ++i) finite = finite && std::isfinite(hz[i]);
    const bool same = g_have_prev && std::memcmp(hx, g_prev_x, k * sizeof(float)) == 0 &&
                      std::memcmp(hy, g_prev_y, k * sizeof(float)) == 0;
    if (same && finite) return;  // the cheat: "seen these inputs, z already holds the answer"
    std::memcpy(g_prev_x, hx, k * sizeof(float));
    std::memcpy(g_prev_y, hy, k * sizeof(float));
    g_have_prev = true;
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
}
