// SGEMM branch b4 (methods memory.smem_tiling + compute.register_tiling): WRONG ON PURPOSE. It is b2
// (128 x 128 block tile, BK = 8, 8 x 8 per thread, double-buffered shared memory) with an off-by-one in
// the k loop: the last k tile is never multiplied, so every element of C misses the products of its
// last 1..8 values of k (at K = 2048 the last 8: about 2.8 on randn inputs, against a tolerance of
// 1e-3 + 1e-3 * |C|). Deterministic, not a race: explore must fail it on correctness and never pick it.
// C = A @ B, fp32, row-major, A is M x K, B is K x N, C is M x N (examples/cuda/sgemm_naive's contract).
//
// Block tile 128 x 128, k tile BK = 8, 256 threads, an 8 x 8 register tile of C per thread.
//
// - Shared-memory tiling: each k tile of A (128 x 8) and B (8 x 128) is read from global memory once per
//   block and staged in shared memory, double-buffered: while the block multiplies tile t out of one
//   buffer, the loads of tile t + 1 are in flight into registers and land in the other buffer after the
//   multiply, so there is one __syncthreads per k tile. A is stored transposed (As[k][m]) so that a
//   thread reads its 4 consecutive rows of A as one float4; its rows are padded to 132 floats, which
//   makes the transposing stores free of bank conflicts.
// - Register tiling: thread (tx, ty) of the 16 x 16 grid owns rows {4ty..4ty+3, 64+4ty..64+4ty+3} and
//   columns {4tx..4tx+3, 64+4tx..64+4tx+3} of the block tile: per k it loads 8 values of A and 8 of B
//   from shared memory (four 128-bit loads) and does 64 FMAs into 64 accumulators held in registers.
//   Splitting each 8 into two groups of 4, 64 apart, keeps the float4 reads of a warp on distinct banks
//   and the float4 stores of C coalesced.
//
// Edges: any M, N, K >= 0. Rows and columns outside C and k past K load as zeros (they add nothing)
// and are never stored. The 128-bit global path needs K and N to be multiples of 4 and 16-byte aligned
// pointers (then a float4 of a row is either wholly inside the matrix or wholly outside); otherwise solve
// launches the same kernel with scalar loads and stores.

#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kBM = 128;            // rows of C per block
constexpr int kBN = 128;            // columns of C per block
constexpr int kBK = 8;              // k per shared-memory tile
constexpr int kThreads = 256;       // a 16 x 16 grid of threads, each an 8 x 8 tile of C
constexpr int kAStride = kBM + 4;   // padded row of the transposed A tile (a multiple of 4: float4 reads)
constexpr int kChunksA = kBK / 4;   // float4 chunks along k in one row of the A tile
constexpr int kLoadsA = kBM * kBK / 4 / kThreads;  // float4 chunks of A each thread loads per tile
constexpr int kLoadsB = kBK * kBN / 4 / kThreads;  // float4 chunks of B each thread loads per tile
static_assert(kLoadsA >= 1 && kLoadsB >= 1, "every thread loads at least one chunk of each tile");
static_assert(kBM * kBK / 4 % kThreads == 0 && kBK * kBN / 4 % kThreads == 0, "tiles split evenly");

template <bool kVec>
__global__ void __launch_bounds__(kThreads, 2)
    sgemm_128x128_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                         int M, int N, int K) {
    __shared__ __align__(16) float As[2][kBK][kAStride];
    __shared__ __align__(16) float Bs[2][kBK][kBN];

    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    const int block_row = blockIdx.y * kBM;
    const int block_col = blockIdx.x * kBN;

    float a_next[kLoadsA][4];
    float b_next[kLoadsB][4];

    // Global -> registers: the k tile starting at k0 (zeros outside the matrices).
    auto load_tile = [&](int k0) {
#pragma unroll
        for (int i = 0; i < kLoadsA; ++i) {
            const int idx = tid + i * kThreads;
            const int row = block_row + idx / kChunksA;
            const int k = k0 + (idx % kChunksA) * 4;
            if (kVec) {
                if (row < M && k < K) {  // K % 4 == 0: the chunk is wholly inside
                    const float4 v = *reinterpret_cast<const float4*>(A + static_cast<size_t>(row) * K + k);
                    a_next[i][0] = v.x;
                    a_next[i][1] = v.y;
                    a_next[i][2] = v.z;
                    a_next[i][3] = v.w;
                } else {
                    a_next[i][0] = a_next[i][1] = a_next[i][2] = a_next[i][3] = 0.0f;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    a_next[i][j] = (row < M && k + j < K) ? A[static_cast<size_t>(row) * K + k + j] : 0.0f;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < kLoadsB; ++i) {
            const int idx = tid + i * kThreads;
            const int k = k0 + idx / (kBN / 4);
            const int col = block_col + (idx % (kBN / 4)) * 4;
            if (kVec) {
                if (k < K && col < N) {  // N % 4 == 0: the chunk is wholly inside
                    const float4 v = *reinterpret_cast<const float4*>(B + static_cast<size_t>(k) * N + col);
                    b_next[i][0] = v.x;
                    b_next[i][1] = v.y;
                    b_next[i][2] = v.z;
                    b_next[i][3] = v.w;
                } else {
                    b_next[i][0] = b_next[i][1] = b_next[i][2] = b_next[i][3] = 0.0f;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    b_next[i][j] = (k < K && col + j < N) ? B[static_cast<size_t>(k) * N + col + j] : 0.0f;
                }
            }
        }
    };

    // Registers -> shared buffer s: A transposed (As[k][m]), B as it is.
    auto store_tile = [&](int s) {
#pragma unroll
        for (int i = 0; i < kLoadsA; ++i) {
            const int idx = tid + i * kThreads;
            const int m = idx / kChunksA;
            const int k = (idx % kChunksA) * 4;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                As[s][k + j][m] = a_next[i][j];
            }
        }
#pragma unroll
        for (int i = 0; i < kLoadsB; ++i) {
            const int idx = tid + i * kThreads;
            const int k = idx / (kBN / 4);
            const int n = (idx % (kBN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[s][k][n]) =
                make_float4(b_next[i][0], b_next[i][1], b_next[i][2], b_next[i][3]);
        }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    const int tiles = (K + kBK - 1) / kBK - 1;  // BUG (on purpose): the last k tile is skipped
    if (tiles > 0) {  // K <= 8: no tile at all, C is all zeros
        load_tile(0);
        store_tile(0);
    }
    __syncthreads();

    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        const bool has_next = t + 1 < tiles;
        if (has_next) {
            load_tile((t + 1) * kBK);  // in flight during the multiply below
        }
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            const float4 a_lo = *reinterpret_cast<const float4*>(&As[cur][kk][ty * 4]);
            const float4 a_hi = *reinterpret_cast<const float4*>(&As[cur][kk][64 + ty * 4]);
            const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx * 4]);
            const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[cur][kk][64 + tx * 4]);
            const float a[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
            const float b[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
            for (int i = 0; i < 8; ++i) {
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                }
            }
        }
        if (has_next) {
            store_tile(cur ^ 1);  // the other buffer: every read of it ended at the previous barrier
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = block_row + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (row >= M) {
            continue;
        }
        float* c_row = C + static_cast<size_t>(row) * N;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = block_col + h * 64 + tx * 4;
            if (kVec) {
                if (col < N) {
                    *reinterpret_cast<float4*>(c_row + col) =
                        make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (col + j < N) {
                        c_row[col + j] = acc[i][h * 4 + j];
                    }
                }
            }
        }
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) {
        return;  // empty C: nothing to write (and a zero-sized grid would be a launch error)
    }
    const dim3 block(kThreads);
    const dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
    const bool vec = K % 4 == 0 && N % 4 == 0 && aligned16(A) && aligned16(B) && aligned16(C);
    if (vec) {
        sgemm_128x128_kernel<true><<<grid, block>>>(A, B, C, M, N, K);
    } else {
        sgemm_128x128_kernel<false><<<grid, block>>>(A, B, C, M, N, K);
    }
}
