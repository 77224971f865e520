// What GPU, if any, this process can use. Answers "no GPU" in a build without CUDA.
#pragma once

#include <cstddef>
#include <string>

namespace nvllm {

struct GpuInfo {
  bool available = false;
  std::string name;        // e.g. "NVIDIA H100 80GB HBM3"
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  int sm_count = 0;
  int compute_capability = 0;  // 90 for Hopper
  int device_count = 0;  // GPUs this process can see (CUDA_VISIBLE_DEVICES applies)
};

// Queries device `index`; never throws (a machine without a driver has no GPU).
GpuInfo query_gpu(int index = 0);

}  // namespace nvllm
