// The CPU-only build's answer; the CUDA build links lib/runtime/cuda/device_cuda.cpp instead.
#include "runtime/device.h"

#ifndef NVLLM_HAVE_CUDA
namespace nvllm {
GpuInfo query_gpu(int) { return {}; }
GpuCeilings measure_gpu_ceilings(int) { return {}; }
}  // namespace nvllm
#endif
