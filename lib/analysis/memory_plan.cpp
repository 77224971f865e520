#include "analysis/memory_plan.h"

namespace nvllm {

MemoryPlan plan_memory(const MemoryPlanInput& in, const ModelConfig& c) {
  MemoryPlan p;
  p.gpu_bytes = in.gpu_bytes;
  p.source = in.source;
  const double h = c.hidden_size;
  const double projections = c.num_layers * c.layer_matmul_params();
  p.weight_bytes = in.fp8_weights ? (c.num_parameters() - projections) * in.dtype_bytes + projections
                                  : c.num_parameters() * in.dtype_bytes;
  // Activations of the largest step: a few hidden-sized buffers per token, the MLP's wide one,
  // and fp32 logits for every sequence that samples.
  p.reserve_bytes = double(in.max_num_batched_tokens) * (6 * h + 2 * c.intermediate_size + c.qkv_size()) * 4 +
                    double(in.max_num_seqs) * c.vocab_size * 4;
  const double usable = p.gpu_bytes * in.gpu_memory_utilization - p.weight_bytes - p.reserve_bytes;
  p.blocks_fit = usable > 0 ? static_cast<int>(usable / in.block_bytes) : 0;
  return p;
}

}  // namespace nvllm
