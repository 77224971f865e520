// NVLLM_HOST_DEVICE: a function of core/ that the CUDA kernels call as well as the host code, so
// that both compute the same bits (the sampling helpers).
#pragma once

#if defined(__CUDACC__)
#define NVLLM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NVLLM_HOST_DEVICE inline
#endif
