// The one checking macro for CUDA runtime and cuBLAS calls: failures become nvllm::Error
// with the call, file and line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t err_ = (call);                                                              \
    if (err_ != cudaSuccess)                                                                \
      ::nvllm::fail("CUDA error ", cudaGetErrorString(err_), " in ", #call, " at ",         \
                    __FILE__, ":", __LINE__);                                               \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t st_ = (call);                                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::nvllm::fail("cuBLAS error ", cublasGetStatusString(st_), " in ", #call, " at ",     \
                    __FILE__, ":", __LINE__);                                               \
  } while (0)

// An attribute of the current device (cudaDeviceGetAttribute, checked).
inline int device_attribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}
