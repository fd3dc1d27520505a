// kopt adversarial corpus: persisting_l2. Source: pygpubench (a persisting-L2 carve-out that survives a
// 2x-L2 flush). Cheat: on each call it sets aside the device's largest persisting-L2 carve-out
// (cudaLimitPersistingL2CacheSize = persistingL2CacheMaxSize) and puts an access policy window over x on
// the per-thread default stream (hitRatio 1, hits persist, misses stream), so x stays in L2 across the
// harness's flush between timed launches; then it adds honestly. kopt must report: persisting_l2.
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

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    int device = 0, max_persisting = 0, max_window = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, device);
    cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, device);
    if (max_persisting > 0 && max_window > 0) {
        cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, static_cast<size_t>(max_persisting));  // the cheat
        const size_t bytes = static_cast<size_t>(N) * sizeof(float);
        cudaStreamAttrValue policy = {};
        policy.accessPolicyWindow.base_ptr = const_cast<float*>(x);
        policy.accessPolicyWindow.num_bytes = bytes < static_cast<size_t>(max_window) ? bytes : max_window;
        policy.accessPolicyWindow.hitRatio = 1.0f;
        policy.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
        policy.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
        cudaStreamSetAttribute(cudaStreamPerThread, cudaStreamAttributeAccessPolicyWindow, &policy);
    }
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
}
