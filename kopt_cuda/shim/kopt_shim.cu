// Linked into every kopt_cuda build next to the candidate's own source. It gives the bench worker the
// CUDA runtime *of that library* (nvcc links the runtime statically, so the worker's PyTorch runtime
// cannot see launch errors raised here), and CUDA-graph capture of solve's launches on the per-thread
// default stream, which is how kernels of a few microseconds are timed without launch gaps.
#include <cuda_runtime.h>
#include <cstdio>

// Holds the stream for `ns` nanoseconds. Launched just before the start event so that the event and the
// timed launch are both queued before the GPU reaches them: without it, the host's launch latency (a few
// microseconds through ctypes) would sit between the start event and the kernel and be counted as kernel
// time.
__global__ void kopt_shim_spin_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

extern "C" {

// The last launch/runtime error of this library's runtime (cleared by reading), as code and text.
int kopt_shim_last_error(char* text, int size) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess && text != nullptr && size > 0) {
    std::snprintf(text, size, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return static_cast<int>(err);
}

// The name and text this library's runtime gives a CUDA error code ("cudaErrorMemoryAllocation: out of
// memory"), for the errors the other shim calls return as plain codes.
int kopt_shim_error_text(int code, char* text, int size) {
  if (text != nullptr && size > 0) {
    cudaError_t err = static_cast<cudaError_t>(code);
    std::snprintf(text, size, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return code;
}

int kopt_shim_capture_begin() {
  return static_cast<int>(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
}

// Ends the capture and instantiates it. *kernel_nodes receives how many kernel launches were captured:
// a solve that launched on another stream, or skipped its launch, captures fewer than expected and the
// worker refuses to time that graph.
int kopt_shim_capture_end(void** exec_out, int* kernel_nodes) {
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(cudaStreamPerThread, &graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return static_cast<int>(err);
  }
  size_t count = 0;
  err = cudaGraphGetNodes(graph, nullptr, &count);
  int kernels = 0;
  if (err == cudaSuccess && count > 0) {
    cudaGraphNode_t* nodes = new cudaGraphNode_t[count];
    err = cudaGraphGetNodes(graph, nodes, &count);
    for (size_t i = 0; err == cudaSuccess && i < count; ++i) {
      cudaGraphNodeType type;
      if (cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++kernels;
    }
    delete[] nodes;
  }
  *kernel_nodes = kernels;
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return static_cast<int>(err);
  }
  *exec_out = exec;
  return 0;
}

int kopt_shim_graph_launch(void* exec) {
  return static_cast<int>(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), cudaStreamPerThread));
}

int kopt_shim_graph_destroy(void* exec) {
  return static_cast<int>(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

// Events on the same stream and runtime as solve's launches (the per-thread default stream).
int kopt_shim_timer_create(void** start, void** end) {
  cudaError_t err = cudaEventCreate(reinterpret_cast<cudaEvent_t*>(start));
  if (err == cudaSuccess) err = cudaEventCreate(reinterpret_cast<cudaEvent_t*>(end));
  return static_cast<int>(err);
}

int kopt_shim_timer_start(void* start, unsigned long long spin_ns) {
  kopt_shim_spin_kernel<<<1, 1, 0, cudaStreamPerThread>>>(spin_ns);
  cudaError_t err = cudaPeekAtLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  return static_cast<int>(cudaEventRecord(static_cast<cudaEvent_t>(start), cudaStreamPerThread));
}

int kopt_shim_timer_stop(void* end) {
  return static_cast<int>(cudaEventRecord(static_cast<cudaEvent_t>(end), cudaStreamPerThread));
}

int kopt_shim_timer_elapsed(void* start, void* end, float* ms) {
  cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(end));
  if (err == cudaSuccess) err = cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
  return static_cast<int>(err);
}

}  // extern "C"
