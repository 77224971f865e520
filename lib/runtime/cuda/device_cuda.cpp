#include <cuda_runtime.h>

#include "runtime/device.h"

namespace nvllm {

GpuInfo query_gpu(int index) {
  GpuInfo info;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return info;
  }
  info.device_count = count;
  if (index >= count) return info;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return info;
  info.available = true;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.compute_capability = prop.major * 10 + prop.minor;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(index);
  cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  cudaSetDevice(previous);
  return info;
}

}  // namespace nvllm
