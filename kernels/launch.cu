// pdl_enabled(): PDL needs sm_90; NVLLM_PDL=0 turns it off to measure what it buys.
#include <cstdlib>
#include <cstring>

#include "kernels/launch.cuh"

namespace nvllm::kernels {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("NVLLM_PDL");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
      return false;
    return major >= 9;
  }();
  return enabled;
}

}  // namespace nvllm::kernels
