// The ceilings of bench's roofline, a GPU's: the flags' figures where given, else the GPU's own,
// measured at start (runtime/device.h), else, when that measurement fails, the H100's.
#pragma once

#include <string>

namespace nvllm {

struct Ceilings {
  double bandwidth = 0, flops = 0;  // bytes/s and FLOP/s of one GPU; 0: none (the CPU without flags)
  std::string source;               // where the figures came from, for the report
};

// `peak_bandwidth` / `peak_flops`: the flags (0 when not given). `device`: "cuda" or "cpu".
Ceilings resolve_ceilings(double peak_bandwidth, double peak_flops, const std::string& device);

}  // namespace nvllm
