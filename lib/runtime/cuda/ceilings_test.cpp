// measure_gpu_ceilings against the card's data sheet, worked out from its attributes: the copy
// rate cannot pass the memory's peak (2 transfers a clock x bus width) and on a healthy card
// reaches most of it; the bf16 GEMM rate cannot pass the tensor cores' peak (4,096 dense bf16
// FLOP a clock an SM on sm_90, 2,048 on sm_80) and reaches most of it. A factor-of-two slip in
// either figure (read + write, 2 FLOP a multiply-add) falls outside its window. Named gpu.bench.*:
// a timing case, which the sanitizers (scripts/gpu_sanitize.sh) leave out, as they slow it 100x.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "runtime/device.h"

namespace nvllm {

TEST_CASE("gpu.bench.ceilings: measured copy and GEMM rates sit under the card's peaks, near them") {
  int device = 0, mem_khz = 0, bus_bits = 0, sm_khz = 0, sms = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const double memory_peak = 2.0 * mem_khz * 1e3 * bus_bits / 8;
  const GpuCeilings c = measure_gpu_ceilings(device);
  MESSAGE("copy ", c.copy_bytes_per_s / 1e12, " TB/s of ", memory_peak / 1e12, "; bf16 GEMM ", c.bf16_flops / 1e12,
          " TFLOP/s");
  CHECK(c.copy_bytes_per_s <= memory_peak);
  CHECK(c.copy_bytes_per_s >= 0.6 * memory_peak);
  if (major == 9 || major == 8) {
    const double flops_peak = double(sms) * sm_khz * 1e3 * (major == 9 ? 4096 : 2048);
    MESSAGE("bf16 peak at the boost clock ", flops_peak / 1e12, " TFLOP/s");
    CHECK(c.bf16_flops <= flops_peak);
    CHECK(c.bf16_flops >= 0.5 * flops_peak);
  }
}

}  // namespace nvllm
