// Programmatic dependent launch (PDL, sm_90+): a kernel launched with launch_pdl() may be
// scheduled while the kernel before it in the stream is still running, so its launch latency
// and prologue (a gemv's first weight loads) hide behind the other's tail. Decode steps are chains
// of ~250 small kernels; each boundary otherwise costs a few microseconds of idle SMs.
//
// The contract for every kernel launched this way:
//  - call pdl_wait() before reading anything an earlier kernel wrote or writing anything an
//    earlier kernel reads (only constants, such as weights, may be touched before it);
//  - call pdl_wait() on every path, early exits included, so that a kernel's completion
//    still implies the completion of all kernels before it (the next kernel relies on that);
//  - call pdl_launch_dependents() once it no longer needs SM room for itself. The separate
//    kernels call it right after pdl_wait() (at most two kernels of the chain resident at a
//    time); the fused batch-1 kernels call it just before, so that the next kernel's weight copy
//    starts while this one waits (decode_fused.cu, wait_inputs); the pushed peer sum first thing
//    (its few blocks are resident from the start; peer_reduce.cu); and the blocks a small kernel
//    adds only to ask L2 for the next projection's weights (tma.cuh, l2_ahead_block) first too.
// One kernel waits last instead of first: peer_reduce_pushed_kernel (peer_reduce.cu) reads rows
// that the gemv before it pushed as flagged words, and everything else it reads or writes was
// last touched by kernels that ended before that gemv passed its own wait; its wait at the end
// keeps "a kernel's end implies its predecessors' ends" true.
// Both are no-ops when the kernel was launched normally or on GPUs before sm_90.
#pragma once

#include <cuda_runtime.h>

#include <span>
#include <utility>

#include "kernels/cuda_check.h"

namespace nvllm::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Both together, at the top of a kernel with nothing to do before its inputs are ready.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

// Whether launches ask for PDL: on for sm_90+ devices unless set_pdl(false) (kernels.h; A/B timing).
bool pdl_enabled();

// kernel<<<grid, block, smem, stream>>>(args...) with launch attributes (cudaLaunchKernelEx).
template <typename... Params, typename... Args>
void launch_with(std::span<const cudaLaunchAttribute> attrs, void (*kernel)(Params...), dim3 grid, dim3 block,
                 size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = const_cast<cudaLaunchAttribute*>(attrs.data());
  cfg.numAttrs = static_cast<unsigned>(attrs.size());
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// The launch attribute for thread-block clusters of `dims` CTAs (sm_90); an int: along x.
inline cudaLaunchAttribute cluster_attr(dim3 dims) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = dims.x;
  a.val.clusterDim.y = dims.y;
  a.val.clusterDim.z = dims.z;
  return a;
}
inline cudaLaunchAttribute cluster_attr(int cluster) { return cluster_attr(dim3(unsigned(cluster), 1, 1)); }

// How many clusters of `cluster` CTAs of `kernel` (`block` threads, `smem` bytes of dynamic shared
// memory) the device can hold at once, for a grid of `grid`; 0 where it cannot run them at all
// (the query's error cleared: a smaller cluster, or none, is the caller's answer).
int max_active_clusters(const void* kernel, dim3 grid, dim3 cluster, dim3 block, size_t smem = 0);

// The launch attribute that allows PDL (launch_pdl's, for launches with more attributes).
inline cudaLaunchAttribute pdl_attr() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute when pdl_enabled().
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  if (!pdl_enabled()) {
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  const cudaLaunchAttribute attr = pdl_attr();
  launch_with({&attr, 1}, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace nvllm::kernels
