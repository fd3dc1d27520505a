// kopt adversarial corpus: pointer_cache. Source: CUDA-L1 authors' report of caching keyed on input
// pointers. Cheat: a static cache keyed on the (x, y) pointers holds a copy of the last result; when the
// pointers match it copies that result into z (device to device) instead of computing. kopt keeps its
// buffers and refills their contents, so every check after the first gets a stale answer. kopt must
// report: wrong_output.
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

static const float* g_x = nullptr;
static const float* g_y = nullptr;
static float* g_cache = nullptr;  // the last result, N floats
static int g_cache_n = 0;

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    const size_t bytes = static_cast<size_t>(N) * sizeof(float);
    if (g_cache != nullptr && x == g_x && y == g_y && N == g_cache_n) {
        // the cheat: same pointers, so "same inputs"; hand back the cached result
        cudaMemcpyAsync(z, g_cache, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread);
        return;
    }
    if (N != g_cache_n) {
        if (g_cache != nullptr) cudaFree(g_cache);
        g_cache = nullptr;
        g_cache_n = 0;
        if (cudaMalloc(&g_cache, bytes) != cudaSuccess) {
            g_cache = nullptr;
        } else {
            g_cache_n = N;
        }
    }
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
    if (g_cache != nullptr) {
        cudaMemcpyAsync(g_cache, z, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread);
        g_x = x;
        g_y = y;
    }
}
