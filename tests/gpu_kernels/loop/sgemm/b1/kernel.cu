// SGEMM branch b1 (methods memory.smem_tiling + compute.register_tiling): C = A @ B, fp32, row-major,
// A is M x K, B is K x N, C is M x N; the contract and ref.py of examples/cuda/sgemm_naive.
//
// Block tile 64 x 64, k tile BK = 8, 256 threads, a 4 x 4 register tile of C per thread.
//
// - Shared-memory tiling: each k tile of A (64 x 8) and B (8 x 64) is read from global memory once per
//   block (two scalar loads per thread for each) and staged in one shared buffer, with a barrier after
//   the stores and another after the multiply. A is stored transposed (As[k][m], rows padded to 68
//   floats: the transposing stores of a warp land on 32 distinct banks) so that a thread reads its 4
//   consecutive rows of A as one float4.
// - Register tiling: thread (tx, ty) of the 16 x 16 grid owns rows 4ty..4ty+3 and columns 4tx..4tx+3 of
//   the block tile: per k, one float4 of A and one of B from shared memory feed 16 FMAs into 16
//   accumulators held in registers.
//
// Edges: any M, N, K >= 0. Rows and columns outside C and k past K load as zeros (they add nothing) and
// are never stored.

#include <cuda_runtime.h>

namespace {

constexpr int kBM = 64;
constexpr int kBN = 64;
constexpr int kBK = 8;
constexpr int kThreads = 256;      // a 16 x 16 grid of threads, each a 4 x 4 tile of C
constexpr int kAStride = kBM + 4;  // padded row of the transposed A tile (a multiple of 4: float4 reads)
constexpr int kLoads = kBM * kBK / kThreads;  // elements of each tile a thread loads (A and B alike)
static_assert(kBM * kBK == kBK * kBN && kBM * kBK % kThreads == 0, "the tiles split evenly");

__global__ void __launch_bounds__(kThreads)
    sgemm_64x64_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
                       int N, int K) {
    __shared__ __align__(16) float As[kBK][kAStride];
    __shared__ __align__(16) float Bs[kBK][kBN];

    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    const int block_row = blockIdx.y * kBM;
    const int block_col = blockIdx.x * kBN;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    for (int k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
        for (int i = 0; i < kLoads; ++i) {
            const int idx = tid + i * kThreads;
            // A: a warp reads 4 rows x 8 consecutive k (one 32-byte sector each)
            const int am = idx / kBK;
            const int ak = idx % kBK;
            const int row = block_row + am;
            const int ka = k0 + ak;
            As[ak][am] = (row < M && ka < K) ? A[static_cast<size_t>(row) * K + ka] : 0.0f;
            // B: a warp reads 32 consecutive columns of one row
            const int bk = idx / kBN;
            const int bn = idx % kBN;
            const int kb = k0 + bk;
            const int col = block_col + bn;
            Bs[bk][bn] = (kb < K && col < N) ? B[static_cast<size_t>(kb) * N + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            const float4 a4 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
            const float4 b4 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
            const float a[4] = {a4.x, a4.y, a4.z, a4.w};
            const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                }
            }
        }
        __syncthreads();  // every read of this tile ends before the next one overwrites it
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = block_row + ty * 4 + i;
        if (row >= M) {
            continue;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = block_col + tx * 4 + j;
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
    const dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
    sgemm_64x64_kernel<<<grid, kThreads>>>(A, B, C, M, N, K);
}
