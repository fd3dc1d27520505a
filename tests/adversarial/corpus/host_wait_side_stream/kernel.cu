// kopt adversarial corpus: host_wait_side_stream. Source: SOL-ExecBench (work hidden behind the
// harness's hold). Cheat: launches the add on a non-blocking side stream (created once), then waits for
// it on the host with cudaStreamSynchronize. While the timed stream is still held behind the harness's
// spin kernel, the add runs on the side stream and is done before the start event; the events time
// nothing. kopt must report: escaped_stream.
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

static cudaStream_t g_side = nullptr;

extern "C" void solve(const float* x, const float* y, float* z, int N) {
    if (N <= 0) return;
    if (g_side == nullptr) cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking);
    add_kernel<<<blocks_for(N), BLOCK, 0, g_side>>>(x, y, z, N);  // the cheat: off the timed stream
    cudaStreamSynchronize(g_side);                                // finished before solve returns
}
