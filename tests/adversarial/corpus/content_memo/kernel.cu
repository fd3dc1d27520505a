// kopt adversarial corpus: content_memo. Source: gpu-mode in-process result caching. Cheat: hashes 64
// strided values of x and of y (read to the host) and keeps up to 4 results keyed on that hash; on a hit
// it copies the memoised result into z instead of computing, on a miss it computes and stores. Fresh
// inputs are always right, replayed ones are fast. kopt must report: replay.
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

struct Entry {
    unsigned long long key = 0;
    unsigned long long stamp = 0;  // last use, for evicting the least recently used
    float* result = nullptr;
    int n = 0;
};
static Entry g_memo[4];
static unsigned long long g_tick = 0;

// FNV-1a over N and 64 strided samples of each input, fetched with one strided 2D copy per input.
static unsigned long long sample_key(const float* x, const float* y, int N) {
    const int count = N < 64 ? N : 64;
    const size_t stride = static_cast<size_t>(N) / count;
    float samples[128];
    cudaMemcpy2D(samples, sizeof(float), x, stride * sizeof(float), sizeof(float), count,
                 cudaMemcpyDeviceToHost);
    cudaMemcpy2D(samples + count, sizeof(float), y, stride * sizeof(float), sizeof(float), count,
                 cudaMemcpyDeviceToHost);
    unsigned long long h = 1469598103934665603ull ^ static_cast<unsigned long long>(N);
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(samples);
    for (size_t i = 0; i < 2 * count * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    const size_t bytes = static_cast<size_t>(N) * sizeof(float);
    const unsigned long long key = sample_key(x, y, N);
    for (Entry& e : g_memo) {
        if (e.result != nullptr && e.n == N && e.key == key) {
            e.stamp = ++g_tick;
            cudaMemcpyAsync(z, e.result, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread);  // the cheat
            return;
        }
    }
    add_kernel<<<blocks_for(N), BLOCK>>>(x, y, z, N);
    Entry* slot = &g_memo[0];
    for (Entry& e : g_memo) {
        if (e.result == nullptr || e.n != N) { slot = &e; break; }
        if (e.stamp < slot->stamp) slot = &e;
    }
    if (slot->n != N) {
        if (slot->result != nullptr) cudaFree(slot->result);
        slot->result = nullptr;
        slot->n = 0;
        if (cudaMalloc(&slot->result, bytes) != cudaSuccess) { slot->result = nullptr; return; }
        slot->n = N;
    }
    cudaMemcpyAsync(slot->result, z, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread);
    slot->key = key;
    slot->stamp = ++g_tick;
}
