// The process-wide launch switches. pdl_enabled(): PDL needs sm_90; set_pdl(false) turns it off
// to measure what it buys (CudaTuning::pdl, set by the runner; NVLLM_PDL=0 in the CLI and the GPU
// test binary). gemv_blocks_per_sm(): the small-batch projections' grids (CudaTuning). And
// l2_ahead_blocks(), the blocks a small kernel adds for an L2 look-ahead (kernels.h, L2Ahead).
#include <algorithm>
#include <atomic>

#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {
std::atomic<bool> pdl_allowed{true};
std::atomic<int> gemv_blocks{kGemvDefaultBlocksPerSm}, gemv_fp8_blocks{kGemvFp8DefaultBlocksPerSm};
std::atomic<int> small_step_ctas{0};
std::atomic<bool> cluster_merge{true};
}  // namespace

void set_pdl(bool on) { pdl_allowed.store(on, std::memory_order_relaxed); }
void set_gemv_blocks_per_sm(int bf16_blocks, int fp8_blocks) {
  gemv_blocks.store(bf16_blocks, std::memory_order_relaxed);
  gemv_fp8_blocks.store(fp8_blocks, std::memory_order_relaxed);
}
int gemv_blocks_per_sm(bool fp8) { return (fp8 ? gemv_fp8_blocks : gemv_blocks).load(std::memory_order_relaxed); }
void set_decode_small_step_ctas(int ctas) { small_step_ctas.store(ctas, std::memory_order_relaxed); }
void set_decode_cluster_merge(bool on) { cluster_merge.store(on, std::memory_order_relaxed); }
namespace decode_detail {
int decode_small_step_ctas() { return small_step_ctas.load(std::memory_order_relaxed); }
bool decode_cluster_merge() { return cluster_merge.load(std::memory_order_relaxed); }
}  // namespace decode_detail

int max_active_clusters(const void* kernel, dim3 grid, dim3 cluster, dim3 block, size_t smem) {
  const cudaLaunchAttribute attr = cluster_attr(cluster);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = const_cast<cudaLaunchAttribute*>(&attr);
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // not an error of the run
    return 0;
  }
  return clusters;
}

int l2_ahead_blocks(const L2Ahead& a) {
  if (a.p == nullptr || a.bytes == 0) return 0;
  static const int sms = device_attribute(cudaDevAttrMultiProcessorCount);
  return int(std::min<size_t>(size_t(sms), (a.bytes + 65535) / 65536));
}

bool pdl_enabled() {
  // The device's capability, asked once (a property of the machine, not a switch).
  static const bool supported = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
      return false;
    return major >= 9;
  }();
  return supported && pdl_allowed.load(std::memory_order_relaxed);
}

}  // namespace nvllm::kernels
