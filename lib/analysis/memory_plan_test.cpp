// plan_memory against arithmetic: the weights' bytes (bf16, or FP8 projections with the rest at
// the dtype), and the blocks that fit, exactly at a block boundary and one byte short of it.
#include <doctest/doctest.h>

#include "analysis/memory_plan.h"
#include "model/config.h"

namespace nvllm {
namespace {

ModelConfig llama_like() {
  ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 1000;
  return c;
}

MemoryPlanInput input(double gpu_bytes, bool fp8) {
  MemoryPlanInput in;
  in.gpu_bytes = gpu_bytes;
  in.gpu_memory_utilization = 1.0;
  in.max_num_seqs = 1;
  in.max_num_batched_tokens = 1;
  in.dtype_bytes = 2;
  in.fp8_weights = fp8;
  in.block_bytes = 4096;
  return in;
}

}  // namespace

TEST_CASE("plan_memory: FP8 projections take one byte a weight, the rest the dtype's two") {
  const ModelConfig c = llama_like();
  const double projections = c.num_layers * c.layer_matmul_params();
  REQUIRE(projections > 0);
  const MemoryPlan bf16 = plan_memory(input(1e9, false), c);
  const MemoryPlan fp8 = plan_memory(input(1e9, true), c);
  CHECK(bf16.weight_bytes == c.num_parameters() * 2);
  CHECK(fp8.weight_bytes == bf16.weight_bytes - projections);
  CHECK(fp8.blocks_fit > bf16.blocks_fit);
}

TEST_CASE("plan_memory: the blocks that fit, exactly at a block's end and one byte short") {
  const ModelConfig c = llama_like();
  for (bool fp8 : {false, true}) {
    const MemoryPlan base = plan_memory(input(0, fp8), c);  // what the weights and the reserve take
    const double fixed = base.weight_bytes + base.reserve_bytes;
    CHECK(plan_memory(input(fixed + 10 * 4096.0, fp8), c).blocks_fit == 10);
    CHECK(plan_memory(input(fixed + 10 * 4096.0 - 1, fp8), c).blocks_fit == 9);
    CHECK(plan_memory(input(fixed - 1, fp8), c).blocks_fit == 0);
  }
}

}  // namespace nvllm
