// Tiled SGEMM: C = A @ B, all fp32, row-major. A is M x K, B is K x N, C is M x N.
//
// Each block computes a BLOCK_M x BLOCK_N tile of C and walks K in steps of BLOCK_K, with both operand
// tiles staged in shared memory (A transposed, so the inner loop reads it along BLOCK_M); each thread
// accumulates a THREAD_TILE x THREAD_TILE block of outputs in registers.
//
// The tunables, for kopt's search (each is read as a macro below, with the default used without search):
// kopt:space BLOCK_M = [32, 64, 128]
// kopt:space BLOCK_N = [32, 64, 128]
// kopt:space BLOCK_K = [8, 16, 32]
// kopt:space THREAD_TILE = [4, 8]   // outputs per thread along each side
// kopt:constraint BLOCK_M * BLOCK_N <= 8192
// kopt:constraint (BLOCK_M // THREAD_TILE) * (BLOCK_N // THREAD_TILE) in (64, 128, 256)

#include <cuda_runtime.h>

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef BLOCK_K
#define BLOCK_K 16
#endif
#ifndef THREAD_TILE
#define THREAD_TILE 4
#endif

constexpr int kThreadsN = BLOCK_N / THREAD_TILE;
constexpr int kThreads = (BLOCK_M / THREAD_TILE) * kThreadsN;

__global__ void __launch_bounds__(kThreads)
    sgemm_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                       int M, int N, int K) {
    __shared__ float As[BLOCK_K][BLOCK_M];
    __shared__ float Bs[BLOCK_K][BLOCK_N];
    const int tid = threadIdx.x;
    const int tm = tid / kThreadsN;
    const int tn = tid % kThreadsN;
    const int row0 = blockIdx.y * BLOCK_M;
    const int col0 = blockIdx.x * BLOCK_N;
    float acc[THREAD_TILE][THREAD_TILE] = {};

    for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
        // Out-of-range elements load as zeros, so partial tiles at the edges need no other care.
        for (int i = tid; i < BLOCK_M * BLOCK_K; i += kThreads) {
            const int r = i / BLOCK_K, c = i % BLOCK_K;
            const int gr = row0 + r, gc = k0 + c;
            As[c][r] = (gr < M && gc < K) ? A[static_cast<size_t>(gr) * K + gc] : 0.0f;
        }
        for (int i = tid; i < BLOCK_K * BLOCK_N; i += kThreads) {
            const int r = i / BLOCK_N, c = i % BLOCK_N;
            const int gr = k0 + r, gc = col0 + c;
            Bs[r][c] = (gr < K && gc < N) ? B[static_cast<size_t>(gr) * N + gc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BLOCK_K; ++k) {
            float a[THREAD_TILE], b[THREAD_TILE];
#pragma unroll
            for (int i = 0; i < THREAD_TILE; ++i) {
                a[i] = As[k][tm * THREAD_TILE + i];
                b[i] = Bs[k][tn * THREAD_TILE + i];
            }
#pragma unroll
            for (int i = 0; i < THREAD_TILE; ++i) {
#pragma unroll
                for (int j = 0; j < THREAD_TILE; ++j) {
                    acc[i][j] += a[i] * b[j];
                }
            }
        }
        __syncthreads();
    }

    for (int i = 0; i < THREAD_TILE; ++i) {
        const int row = row0 + tm * THREAD_TILE + i;
        for (int j = 0; j < THREAD_TILE; ++j) {
            const int col = col0 + tn * THREAD_TILE + j;
            if (row < M && col < N) {
                C[static_cast<size_t>(row) * N + col] = acc[i][j];
            }
        }
    }
}

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) {
        return;  // empty C: a zero-sized grid would be a launch error
    }
    const dim3 grid((N + BLOCK_N - 1) / BLOCK_N, (M + BLOCK_M - 1) / BLOCK_M);
    sgemm_tiled_kernel<<<grid, kThreads>>>(A, B, C, M, N, K);
}
