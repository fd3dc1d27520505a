// CUTLASS 3.x Hopper GEMM: C = A @ B with fp16 inputs, fp32 accumulation and fp16 output, built from
// CUTLASS's collective builders: TMA loads into a multi-stage shared-memory pipeline, wgmma (warpgroup
// MMA) reading both operands from shared memory, a warp-specialized persistent kernel, and a TMA-store
// epilogue.
//
// Layouts ("TN" in BLAS terms: both operands K-major, the canonical layout for Hopper GEMMs):
//   A: M x K row-major (K contiguous)         -> a torch tensor of shape (M, K)
//   B: K x N column-major (K contiguous), i.e. the buffer holds B^T row-major: a torch tensor of shape
//      (N, K) whose row n is column n of B. ref.py's buffers() gives B the shape (N, K) and its reference
//      computes A @ B.T.
//   C: M x N row-major                         -> a torch tensor of shape (M, N)
// TMA needs 16-byte aligned strides, so K and N must be multiples of 8 (can_implement refuses others).
//
// Configuration: CTA tile 128x128x64, clusters of 2x1x1 CTAs (the two CTAs of a cluster share a B tile,
// multicast by TMA), KernelTmaWarpSpecializedCooperative (one producer warp group issuing TMA, two consumer
// warp groups splitting the 128x128 tile, 384 threads per CTA) with a persistent tile scheduler over the
// SMs, as many mainloop stages as fit in shared memory after the epilogue's share
// (StageCountAutoCarveout: 6 stages of 32 KiB; 214016 bytes of shared memory per CTA in all), and the
// matching TmaWarpSpecializedCooperative epilogue (128x32 subtiles).
// The epilogue has no source operand (ElementC = void): it computes D = 1 * accumulator and never reads C.
//
// kopt contract: const pointers A and B are inputs, C is the output; M, N, K are dims given on the
// command line. solve launches on the default stream (per-thread under kopt's build flags) and never
// synchronizes. It queries the device once (SM count, cluster occupancy) and keeps a workspace that
// only grows (this configuration needs none: get_workspace_size is 0, so nothing is allocated).

// NDEBUG before any include: without it CuTe's device-side assert()s stay in the kernel as calls to
// __assertfail, and ptxas then serializes every wgmma of the mainloop (warning C7510: "wgmma.mma_async
// instructions are serialized due to wgmma pipeline crossing function boundary at a function call").
// CUTLASS's release builds define NDEBUG through CMake, and kopt's CUTLASS backend passes -DNDEBUG; the
// guard keeps the kernel right when it is built any other way.
#ifndef NDEBUG
#define NDEBUG
#endif

#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/util/packed_stride.hpp"

#if defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)

namespace {

using namespace cute;

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementC = void;  // no source operand: D = alpha * A @ B
using ElementD = cutlass::half_t;
using ElementAccumulator = float;
using ElementCompute = float;

using LayoutA = cutlass::layout::RowMajor;     // M x K, K contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // K x N, K contiguous
using LayoutD = cutlass::layout::RowMajor;     // M x N, N contiguous

// TMA moves 16-byte aligned rows: 8 halves.
constexpr int kAlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
constexpr int kAlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;
constexpr int kAlignmentC = kAlignmentD;  // unused with ElementC = void, but the builder takes one

using TileShape = Shape<_128, _128, _64>;  // CTA tile M x N x K
using ClusterShape = Shape<_2, _1, _1>;    // 2 CTAs along M share (multicast) each B tile
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAccumulator, ElementCompute,
    ElementC, LayoutD, kAlignmentC,
    ElementD, LayoutD, kAlignmentD,
    EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<ElementD, ElementCompute, ElementC, ElementCompute>
  >::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, kAlignmentA,
    ElementB, LayoutB, kAlignmentB,
    ElementAccumulator,
    TileShape, ClusterShape,
    // Stages: whatever shared memory is left once the epilogue's storage is set aside.
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule
  >::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>,  // problem shape M, N, K, L (L = batch = 1)
    CollectiveMainloop,
    CollectiveEpilogue>;        // default tile scheduler: persistent over the SMs

using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename Gemm::GemmKernel::StrideA;
using StrideB = typename Gemm::GemmKernel::StrideB;
using StrideC = typename Gemm::GemmKernel::StrideC;
using StrideD = typename Gemm::GemmKernel::StrideD;

// The device's SM count and how many 2x1 clusters of this kernel fit at once, queried once per device
// (cudaDeviceGetAttribute and cudaOccupancyMaxActiveClusters cost host time on every call otherwise).
const cutlass::KernelHardwareInfo& hardware_info() {
    static int cached_device = -1;
    static cutlass::KernelHardwareInfo info;
    int device = 0;
    cudaGetDevice(&device);
    if (device != cached_device) {
        info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<GemmKernel>(device);
        cached_device = device;
    }
    return info;
}

// A workspace that only grows, so solve allocates at most once per size increase (not per call).
void* workspace_of_size(size_t bytes, bool* ok) {
    static void* workspace = nullptr;
    static size_t capacity = 0;
    *ok = true;
    if (bytes <= capacity) {
        return workspace;
    }
    if (workspace != nullptr) {
        cudaFree(workspace);
        workspace = nullptr;
        capacity = 0;
    }
    cudaError_t err = cudaMalloc(&workspace, bytes);
    if (err != cudaSuccess) {
        fprintf(stderr, "gemm_sm90_tma_ws: cudaMalloc of a %zu-byte workspace failed: %s\n", bytes,
                cudaGetErrorString(err));
        workspace = nullptr;
        *ok = false;
        return nullptr;
    }
    capacity = bytes;
    return workspace;
}

}  // namespace

#endif  // defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)

// One definition of solve (kopt needs exactly one entry point per file, preprocessor branches included),
// with its body guarded as CUTLASS's examples guard theirs.
extern "C" void solve(const cutlass::half_t* A, const cutlass::half_t* B, cutlass::half_t* C, int M, int N,
                      int K) {
#if defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
    if (M <= 0 || N <= 0 || K <= 0) {
        fprintf(stderr, "gemm_sm90_tma_ws: M, N, K must be positive (got %d, %d, %d)\n", M, N, K);
        return;
    }
    // Packed strides: A is (M, K, L) with K contiguous, B is (N, K, L) with K contiguous, D is (M, N, L)
    // with N contiguous.
    const StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, 1));
    const StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
    const StrideC stride_c = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, 1));
    const StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, 1));

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, 1},
        {A, stride_a, B, stride_b},
        {{}, /*ptr_C=*/nullptr, stride_c, /*ptr_D=*/C, stride_d},
        hardware_info()};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;

    cutlass::Status status = Gemm::can_implement(args);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr,
                "gemm_sm90_tma_ws: CUTLASS cannot run M=%d N=%d K=%d: %s (K and N must be multiples of %d "
                "for TMA's 16-byte alignment)\n",
                M, N, K, cutlassGetStatusString(status), kAlignmentA);
        return;
    }
    bool ok = true;
    void* workspace = workspace_of_size(Gemm::get_workspace_size(args), &ok);
    if (!ok) {
        return;
    }
    Gemm gemm;
    status = gemm.initialize(args, workspace, cudaStreamPerThread);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr, "gemm_sm90_tma_ws: initialize failed: %s (%s)\n", cutlassGetStatusString(status),
                cudaGetErrorString(cudaGetLastError()));
        return;
    }
    status = gemm.run(cudaStreamPerThread);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr, "gemm_sm90_tma_ws: launch failed: %s (%s)\n", cutlassGetStatusString(status),
                cudaGetErrorString(cudaGetLastError()));
    }
#else
    (void)A; (void)B; (void)C;
    fprintf(stderr,
            "gemm_sm90_tma_ws: built without CUTLASS_ARCH_MMA_SM90_SUPPORTED (CUTLASS sets it for nvcc "
            "12.0 or newer; this Hopper kernel needs that and an sm_90a build); nothing was computed for "
            "M=%d N=%d K=%d\n",
            M, N, K);
#endif  // defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
}

// For kopt search: the valid SM90 configurations of this GEMM (fp16 A and B, fp16 C, fp32 accumulation,
// TN), listed by the nvidia-cutlass wheel's cutlass_library and emitted with the same solve.
// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn
