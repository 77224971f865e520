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

// A positive integer from the variable, or `fallback` when it is unset, empty or not one (a
// timing switch: no error path).
long positive_or(const char* name, long fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  return *end == '\0' && v > 0 ? v : fallback;
}

// A non-negative integer from the variable, or `fallback` (as positive_or, 0 allowed).
long non_negative_or(const char* name, long fallback) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string_view(e) == "0" ? 0 : positive_or(name, fallback);
}

}  // namespace

CudaTuning cuda_tuning_from_env() {
  CudaTuning t;
  t.pdl = on_unless_zero("NVLLM_PDL", t.pdl);
  t.fused_decode = on_unless_zero("NVLLM_FUSED_DECODE", t.fused_decode);
  t.fused_head = on_unless_zero("NVLLM_FUSED_HEAD", t.fused_head);
  t.chain_decode = on_unless_zero("NVLLM_CHAIN_DECODE", true);
  t.chain_max_seqs = int(positive_or("NVLLM_CHAIN_MAX_SEQS", t.chain_max_seqs));
  t.peer_all_reduce = on_unless_zero("NVLLM_PEER_ALL_REDUCE", t.peer_all_reduce);
  t.peer_push = on_unless_zero("NVLLM_PEER_PUSH", t.peer_push);
  t.gemv_push = on_unless_zero("NVLLM_GEMV_PUSH", t.gemv_push);
  t.gemv_silu = on_unless_zero("NVLLM_GEMV_SILU", t.gemv_silu);
  if (const char* trace = std::getenv("NVLLM_FUSED_TRACE")) t.fused_trace = trace;
  if (const char* trace = std::getenv("NVLLM_PEER_TRACE")) t.peer_trace = trace;
  t.fused_stream_smem = size_t(positive_or("NVLLM_FUSED_STREAM_SMEM", 0));
  t.fused_tile_k = positive_or("NVLLM_FUSED_TILE_K", t.fused_tile_k);
  t.fused_whole_smem = size_t(positive_or("NVLLM_FUSED_WHOLE_SMEM", 0));
  t.fused_max_cluster = positive_or("NVLLM_FUSED_CLUSTER", t.fused_max_cluster) == 8 ? 8 : 16;
  t.fused_max_batch = int(positive_or("NVLLM_FUSED_MAX_BATCH", t.fused_max_batch));
  t.gemv_blocks_per_sm = int(non_negative_or("NVLLM_GEMV_BLOCKS_PER_SM", t.gemv_blocks_per_sm));
  t.gemv_fp8_blocks_per_sm = int(non_negative_or("NVLLM_GEMV_FP8_BLOCKS_PER_SM", t.gemv_fp8_blocks_per_sm));
  t.decode_small_step_parts = on_unless_zero("NVLLM_DECODE_SMALL_PARTS", t.decode_small_step_parts);
  t.decode_cluster_merge = on_unless_zero("NVLLM_DECODE_CLUSTER_MERGE", t.decode_cluster_merge);
  t.l2_ahead_bytes = size_t(non_negative_or("NVLLM_L2_AHEAD_KB", long(t.l2_ahead_bytes >> 10))) << 10;
  return t;
}

int gemv_max_batch_from_env(int fallback) { return int(positive_or("NVLLM_GEMV_MAX_BATCH", fallback)); }

}  // namespace nvllm
