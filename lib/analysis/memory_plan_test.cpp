// plan_memory against arithmetic on the hand-sized model (analysis_test_util.h): the weights'
// bytes (bf16, or FP8 projections with the rest at the dtype), and the blocks that fit, exactly at
// a block boundary and one byte short of it.
#include <doctest/doctest.h>

#include "analysis/analysis_test_util.h"
#include "analysis/memory_plan.h"

namespace nvllm {
namespace {

// One token and one sequence: the reserve is 1 x (6 x 8 + 2 x 16 + 16 qkv) x 4 = 384 bytes of
// activations + 1 x 32 vocab x 4 = 128 of logits: 512.
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
  // bf16: 1,696 parameters x 2 = 3,392 bytes. FP8: the 1,152 projection weights x 1 + the other
  // 544 x 2 = 2,240.
  // With 3,904 + 4,095 bytes, bf16 leaves one byte short of a block and FP8's 1,152 saved bytes
  // make it whole.
  const MemoryPlan bf16 = plan_memory(input(3904 + 4095, false), test::hand_model());
  const MemoryPlan fp8 = plan_memory(input(3904 + 4095, true), test::hand_model());
  CHECK(bf16.weight_bytes == 3392);
  CHECK(fp8.weight_bytes == 2240);
  CHECK(bf16.reserve_bytes == 512);
  CHECK(fp8.reserve_bytes == 512);
  CHECK(bf16.blocks_fit == 0);
  CHECK(fp8.blocks_fit == 1);
}

TEST_CASE("plan_memory: the blocks that fit, exactly at a block's end and one byte short") {
  for (const bool fp8 : {false, true}) {
    const double fixed = (fp8 ? 2240 : 3392) + 512;  // weights + reserve
    INFO((fp8 ? "fp8" : "bf16"));
    CHECK(plan_memory(input(fixed + 10 * 4096.0, fp8), test::hand_model()).blocks_fit == 10);
    CHECK(plan_memory(input(fixed + 10 * 4096.0 - 1, fp8), test::hand_model()).blocks_fit == 9);
    CHECK(plan_memory(input(fixed - 1, fp8), test::hand_model()).blocks_fit == 0);
  }
}

}  // namespace nvllm
