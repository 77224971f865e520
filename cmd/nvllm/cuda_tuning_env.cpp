#include "cmd/nvllm/cuda_tuning_env.h"

#include <cstdlib>
#include <string_view>

namespace nvllm {
namespace {

// A switch that is on unless the variable is set to "0".
bool on_unless_zero(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  return e == nullptr ? fallback : std::string_view(e) != "0";
}

}  // namespace

CudaTuning cuda_tuning_from_env() {
  CudaTuning t;
  t.pdl = on_unless_zero("NVLLM_PDL", t.pdl);
  t.fused_decode = on_unless_zero("NVLLM_FUSED_DECODE", t.fused_decode);
  t.fused_head = on_unless_zero("NVLLM_FUSED_HEAD", t.fused_head);
  t.chain_decode = on_unless_zero("NVLLM_CHAIN_DECODE", true);
  t.peer_all_reduce = on_unless_zero("NVLLM_PEER_ALL_REDUCE", t.peer_all_reduce);
  if (const char* trace = std::getenv("NVLLM_FUSED_TRACE")) t.fused_trace = trace;
  return t;
}

}  // namespace nvllm
