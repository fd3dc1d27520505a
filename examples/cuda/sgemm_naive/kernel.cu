// Naive SGEMM: C = A @ B, all fp32, row-major. A is M x K, B is K x N, C is M x N.
//
// The classic first kernel of every GEMM tutorial, kept deliberately simple as a baseline for kopt to
// optimize (shared-memory tiling, register blocking, vectorized loads, tensor cores...). One thread
// computes one element of C with a plain dot product over K, reading A and B straight from global
// memory: about 2*K loads per 2*K flops, so it is far from the compute roof, and its time is set by
// how well the L1/L2 caches serve those repeated loads.
//
// kopt contract: const pointers A and B are inputs, C is the output; M, N, K are dims given on the
// command line (--M=... --N=... --K=...). ref.py's buffers() gives each buffer its real shape.

#include <cuda_runtime.h>

constexpr int kTile = 16;  // 16 x 16 = 256 threads per block

// threadIdx.x walks along a row of C (the column index): the 16 threads of a half-warp with the same
// row read 16 consecutive floats of B[k, :] and write 16 consecutive floats of C, so those accesses are
// coalesced; they all read the same A[row, k], which is a broadcast. (Mapping x to the row instead is the
// classic mistake that makes every access strided.)
__global__ void sgemm_naive_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) {
        return;
    }
    // size_t offsets: row * K and k * N overflow int beyond 2^31 elements.
    const float* a_row = A + static_cast<size_t>(row) * K;
    const float* b_col = B + col;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += a_row[k] * b_col[static_cast<size_t>(k) * N];  // nvcc contracts this into one FMA
    }
    C[static_cast<size_t>(row) * N + col] = acc;
}

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) {
        return;  // empty C: a zero-sized grid would be a launch error
    }
    // K == 0 is valid: the kernel writes zeros, which is what A @ B is.
    const dim3 block(kTile, kTile);
    const dim3 grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);  // x over columns, y over rows
    // Default stream (per-thread under kopt's build flags); kopt synchronizes, so solve does not.
    sgemm_naive_kernel<<<grid, block>>>(A, B, C, M, N, K);
}
