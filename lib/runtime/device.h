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

// What device `index` does at best, measured on it (about 0.1 s, 0.9 GB of its memory for the
// time): the device-to-device copy rate (read + write counted) and the bf16 matrix multiply rate
// (fp32 accumulation, 8192^3 through cuBLASLt). Zeros in a build without CUDA. Throws
// nvllm::Error when the card cannot run it (out of memory, say).
struct GpuCeilings {
  double copy_bytes_per_s = 0;
  double bf16_flops = 0;
};
GpuCeilings measure_gpu_ceilings(int index = 0);

}  // namespace nvllm
