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
// VEC = 4 adds a fast path, taken when the tiles divide M, N and K and every row starts 16-byte
// aligned: 16-byte global loads and stores, each thread's TM x TN tile made of 4 x 4 blocks so that its
// shared-memory reads are 16 bytes wide (a quarter of the load instructions per FMA), and two shared-
// memory stages: the next k tile is loaded into registers while the current one is multiplied, then
// stored to the other stage, one barrier per k tile. Other shapes take the scalar kernel.
//
// The tunables, applied as -D defines by kopt's search (the defaults below are the baseline):
// kopt:space BM = [32, 64, 128]
// kopt:space BN = [32, 64, 128]
// kopt:space BK = [8, 16, 32]
// kopt:space TM = [2, 4, 8]
// kopt:space TN = [2, 4, 8]
// kopt:space VEC = [1, 4]
// kopt:constraint BM % TM == 0 and BN % TN == 0
// kopt:constraint (BM // TM) * (BN // TN) in (64, 128, 256, 512)
// kopt:constraint (BM + BN) * BK * 4 <= 48 * 1024
// kopt:constraint VEC == 1 or (TM % 4 == 0 and TN % 4 == 0 and 2 * (BM + BN) * BK * 4 <= 48 * 1024)

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
#ifndef VEC
#define VEC 1
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

#if VEC == 4
static_assert(TM % 4 == 0 && TN % 4 == 0, "the vector path tiles each thread's outputs in 4 x 4 blocks");
static_assert(BK % 4 == 0, "A's k tile is loaded 4 floats at a time");

constexpr int kLoadsA = (BM * BK / 4 + kThreads - 1) / kThreads;  // float4 loads of A per thread
constexpr int kLoadsB = (BK * BN / 4 + kThreads - 1) / kThreads;  // and of B

// Requires M % BM == 0, N % BN == 0, K % BK == 0 and 16-byte aligned A, B, C (checked by solve).
// Thread (ty, tx) owns rows ty * 4 + ii * BM / (TM / 4) + r and columns tx * 4 + jj * BN / (TN / 4) + c
// (ii < TM / 4, jj < TN / 4, r, c < 4): 16-byte reads of As and Bs, consecutive across a warp.
__global__ void __launch_bounds__(kThreads)
    sgemm_vec4_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                      int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % kColsOfThreads;
    const int ty = tid / kColsOfThreads;
    const float* a_block = A + static_cast<size_t>(blockIdx.y) * BM * K;
    const float* b_block = B + static_cast<size_t>(blockIdx.x) * BN;

    float4 a_next[kLoadsA];
    float4 b_next[kLoadsB];
    auto load_tile = [&](int k0) {
#pragma unroll
        for (int l = 0; l < kLoadsA; ++l) {
            const int f = tid + l * kThreads;
            if (f < BM * BK / 4) {
                const int m = f / (BK / 4);
                const int k = (f % (BK / 4)) * 4;
                a_next[l] = *reinterpret_cast<const float4*>(a_block + static_cast<size_t>(m) * K + k0 + k);
            }
        }
#pragma unroll
        for (int l = 0; l < kLoadsB; ++l) {
            const int f = tid + l * kThreads;
            if (f < BK * BN / 4) {
                const int k = f / (BN / 4);
                const int n = (f % (BN / 4)) * 4;
                b_next[l] = *reinterpret_cast<const float4*>(b_block + static_cast<size_t>(k0 + k) * N + n);
            }
        }
    };
    auto store_tile = [&](int stage) {
#pragma unroll
        for (int l = 0; l < kLoadsA; ++l) {
            const int f = tid + l * kThreads;
            if (f < BM * BK / 4) {
                const int m = f / (BK / 4);
                const int k = (f % (BK / 4)) * 4;
                As[stage][k + 0][m] = a_next[l].x;
                As[stage][k + 1][m] = a_next[l].y;
                As[stage][k + 2][m] = a_next[l].z;
                As[stage][k + 3][m] = a_next[l].w;
            }
        }
#pragma unroll
        for (int l = 0; l < kLoadsB; ++l) {
            const int f = tid + l * kThreads;
            if (f < BK * BN / 4) {
                const int k = f / (BN / 4);
                const int n = (f % (BN / 4)) * 4;
                *reinterpret_cast<float4*>(&Bs[stage][k][n]) = b_next[l];
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    const int tiles = K / BK;
    load_tile(0);
    store_tile(0);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int stage = t & 1;
        if (t + 1 < tiles) {
            load_tile((t + 1) * BK);  // in flight while this tile is multiplied
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM];
            float b[TN];
#pragma unroll
            for (int ii = 0; ii < TM / 4; ++ii) {
                const float4 v = *reinterpret_cast<const float4*>(&As[stage][k][ty * 4 + ii * kRowsOfThreads * 4]);
                a[ii * 4 + 0] = v.x;
                a[ii * 4 + 1] = v.y;
                a[ii * 4 + 2] = v.z;
                a[ii * 4 + 3] = v.w;
            }
#pragma unroll
            for (int jj = 0; jj < TN / 4; ++jj) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[stage][k][tx * 4 + jj * kColsOfThreads * 4]);
                b[jj * 4 + 0] = v.x;
                b[jj * 4 + 1] = v.y;
                b[jj * 4 + 2] = v.z;
                b[jj * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                }
            }
        }
        if (t + 1 < tiles) {
            // The other stage was last read in tile t - 1, and the barrier that ended it has passed.
            store_tile(stage ^ 1);
        }
        __syncthreads();
    }

    float* c_block = C + static_cast<size_t>(blockIdx.y) * BM * N + static_cast<size_t>(blockIdx.x) * BN;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = ty * 4 + (i / 4) * kRowsOfThreads * 4 + (i % 4);
#pragma unroll
        for (int jj = 0; jj < TN / 4; ++jj) {
            const int col = tx * 4 + jj * kColsOfThreads * 4;
            *reinterpret_cast<float4*>(c_block + static_cast<size_t>(row) * N + col) =
                make_float4(acc[i][jj * 4 + 0], acc[i][jj * 4 + 1], acc[i][jj * 4 + 2], acc[i][jj * 4 + 3]);
        }
    }
}
#endif  // VEC == 4

}  // namespace

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) {
        return;  // empty C: nothing to write (and a zero-sized grid would be a launch error)
    }
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    // No stream argument: kopt builds with --default-stream per-thread; kopt synchronizes.
#if VEC == 4
    const auto aligned = [](const float* p) { return reinterpret_cast<size_t>(p) % 16 == 0; };
    if (M % BM == 0 && N % BN == 0 && K % BK == 0 && K > 0 && aligned(A) && aligned(B) && aligned(C)) {
        sgemm_vec4_kernel<<<grid, kThreads>>>(A, B, C, M, N, K);
        return;
    }
#endif
    sgemm_tiled_kernel<<<grid, kThreads>>>(A, B, C, M, N, K);
}
