#include "cmd/nvllm/bench_ceilings.h"

#include "analysis/workload.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/device.h"

namespace nvllm {

Ceilings resolve_ceilings(double peak_bandwidth, double peak_flops, const std::string& device) {
  if (device != "cuda") return {peak_bandwidth, peak_flops, "--peak-bandwidth/--peak-flops"};
  Ceilings out;
  try {
    const GpuCeilings measured = measure_gpu_ceilings(0);
    out = {measured.copy_bytes_per_s, measured.bf16_flops, "measured on this GPU: device copy, bf16 GEMM 8192^3"};
  } catch (const Error& e) {
    log_warn("could not measure this GPU's ceilings (", e.what(), "); the roofline uses the H100's");
    out = {kH100Bandwidth, kH100Flops, "the H100's measured figures (this GPU's could not be measured)"};
  }
  if (peak_bandwidth > 0) out.bandwidth = peak_bandwidth;
  if (peak_flops > 0) out.flops = peak_flops;
  if (peak_bandwidth > 0 || peak_flops > 0) out.source += "; overridden by --peak-bandwidth/--peak-flops";
  return out;
}

}  // namespace nvllm
