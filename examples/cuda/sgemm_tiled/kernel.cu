// Tiled SGEMM with declared tunables: C = A @ B, fp32, row-major; A is M x K, B is K x N, C is M x N.
// The contract and ref.py of examples/cuda/sgemm_naive (kopt optimize --generator search tunes it).
//
// Each block computes a BM x BN tile of C. It walks K in steps of BK, staging each k tile of A (stored
// transposed, As[k][m]) and of B (Bs[k][n]) in shared memory; each of its (BM / TM) x (BN / TN) threads
// keeps a TM x TN tile of C in registers. A thread's rows and columns are strided by the thread grid
// (row ty + i * BM / TM, column tx + j * BN / TN), so that a warp's reads of Bs are consecutive words
// (no bank conflicts) and its stores of C are coalesced. Loads are scalar and bounds-checked: any
// M, N, K >= 0 and any alignment work; values outside the matrices load as zeros and are never stored.
//
// The tunables, applied as -D defines by kopt's search (the defaults below are the baseline):
// kopt:space BM = [32, 64, 128]
// kopt:space BN = [32, 64, 128]
// kopt:space BK = [8, 16, 32]
// kopt:space TM = [2, 4, 8]
// kopt:space TN = [2, 4, 8]
// kopt:constraint BM % TM == 0 and BN % TN == 0
// kopt:constraint (BM // TM) * (BN // TN) in (64, 128, 256, 512)
// kopt:constraint (BM + BN) * BK * 4 <= 48 * 1024

#include <cuda_runtime.h>

#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 32
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 2
#endif
#ifndef TN
#define TN 2
#endif

namespace {

constexpr int kRowsOfThreads = BM / TM;
constexpr int kColsOfThreads = BN / TN;
constexpr int kThreads = kRowsOfThreads * kColsOfThreads;
static_assert(BM % TM == 0 && BN % TN == 0, "the thread tile divides the block tile");
static_assert(kThreads >= 32 && kThreads <= 1024, "a block of 32 to 1024 threads");

__global__ void __launch_bounds__(kThreads)
    sgemm_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                       int M, int N, int K) {
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % kColsOfThreads;
    const int ty = tid / kColsOfThreads;
    const int block_row = blockIdx.y * BM;
    const int block_col = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Global -> shared, every thread a strided share of each tile; consecutive threads read
        // consecutive k of a row of A and consecutive n of a row of B.
        for (int idx = tid; idx < BM * BK; idx += kThreads) {
            const int m = idx / BK;
            const int k = idx % BK;
            const int row = block_row + m;
            As[k][m] = (row < M && k0 + k < K) ? A[static_cast<size_t>(row) * K + k0 + k] : 0.0f;
        }
        for (int idx = tid; idx < BK * BN; idx += kThreads) {
            const int k = idx / BN;
            const int n = idx % BN;
            const int col = block_col + n;
            Bs[k][n] = (k0 + k < K && col < N) ? B[static_cast<size_t>(k0 + k) * N + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM];
            float b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                a[i] = As[k][ty + i * kRowsOfThreads];
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                b[j] = Bs[k][tx + j * kColsOfThreads];
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                }
            }
        }
        __syncthreads();  // every read of this tile ends before the next tile overwrites it
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = block_row + ty + i * kRowsOfThreads;
        if (row >= M) {
            continue;
        }
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = block_col + tx + j * kColsOfThreads;
            if (col < N) {
                C[static_cast<size_t>(row) * N + col] = acc[i][j];
            }
        }
    }
}

}  // namespace

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) {
        return;  // empty C: nothing to write (and a zero-sized grid would be a launch error)
    }
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    // No stream argument: kopt builds with --default-stream per-thread; kopt synchronizes.
    sgemm_tiled_kernel<<<grid, kThreads>>>(A, B, C, M, N, K);
}
