// DeviceLinear: one projection's weight on the GPU, as the layer loop (device_model.h) and the
// tensor-parallel sums that run a projection themselves (tp_comm.h) take it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace nvllm::cuda_detail {

// One projection's weight [n, k]: bf16, or (FP8 weights) E4M3 codes with one fp32 scale per
// output row, quantised at upload as the CPU's --quantization fp8 does.
struct DeviceLinear {
  const __nv_bfloat16* w = nullptr;
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;  // [n]
  bool fp8() const { return codes != nullptr; }
};

}  // namespace nvllm::cuda_detail
