// FusedDecode: a decode step of up to kernels::kFusedMaxBatch sequences as four fused kernels per
// layer (five where the q/k/v projection is split out of the attention kernel: the plan's
// split_qkv; kernels/decode_fused.h). A step of one sequence has its own plan (less shared memory)
// and, where the hidden size allows, one last kernel for the final norm, the LM head and the
// greedy token (kernels/decode_head.h). With chaining, that last kernel also advances the step's
// inputs (kernels/step_advance.h). Steps of several sequences end in the final norm and the LM
// head of the separate path (the sampler follows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/decode_fused.h"
#include "kernels/decode_head.h"
#include "kernels/kernels.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/cuda/device_model.h"

namespace nvllm::cuda_detail {

class FusedDecode {
 public:
  // After the KV cache exists (the layers hold its addresses), before graphs capture the path.
  // Leaves the path off where the tuning, the model or the device rule it out (logged).
  void setup(DeviceModel& model, const CudaTuning& tuning);
  // Whether a step of `tokens` tokens whose longest context is `max_context` (a graph's context
  // bound) takes this path: a plan serves that many sequences, and the separate kernels'
  // attention would leave at least half the SMs idle (separate_starves).
  // Under tensor parallelism, also: o_proj and down go by the gemv that pushes its rows at that
  // many sequences (forward_rank).
  bool applies(bool decode, int tokens, int max_context) const {
    return decode && plan_.cluster > 0 && (tokens == 1 || batch_plan(tokens) != nullptr) &&
           (!rank_ || tokens <= rank_tokens_) && separate_starves(tokens, max_context);
  }
  // Whether such a step's last kernel writes the greedy token (no sampler launch for greedy
  // steps): steps of one sequence, where the hidden size allows.
  bool head(bool decode, int tokens, int max_context) const {
    return head_ && tokens == 1 && applies(decode, tokens, max_context);
  }
  // The step's kernels; the greedy token goes to *out_token (where head() holds for the step),
  // and decode_head advances the inputs as `advance` says (off: not).
  void forward(const ForwardStep& step, DeviceModel& model, int32_t* out_token, const kernels::StepAdvance& advance,
               cudaStream_t stream);
  // CudaTuning::fused_trace (on the path): write_trace rewrites the file with the latest step's
  // per-CTA stamps.
  bool tracing() const { return !trace_path_.empty(); }
  void write_trace();

 private:
  // A tensor-parallel rank's step: the plan of its share of the layer (its heads, kv heads and MLP
  // columns) for the q/k/v, attention and gate_up kernels; o_proj and down as the gemv that pushes
  // its partial rows to every rank, each followed by the sum over the ranks and the residual step
  // (DeviceModel::row_parallel); the embedding and the head as the separate path has them.
  void forward_rank(const ForwardStep& step, const kernels::FusedDecodePlan& plan, kernels::FusedDecodeStep fs,
                    DeviceModel& model, cudaStream_t stream);

  // The fused attention runs the same clusters of 16 or 8 CTAs a step whatever the context;
  // the separate kernel's CTAs grow with it (kernels::attention_decode_ctas) and each CTA's warps
  // take their 16-token tiles one after another (~1 us a tile on the H100). Measured (bench/NOTES.md,
  // twenty-first session, 132 SMs): the fused path ahead at 8-64 separate CTAs (1.4-2.2x at
  // contexts of 1-8K), behind at 128 (Qwen3-0.6B 8 x 4K, Llama-3.2-1B / Qwen3-0.6B 1 x 32K: by 20-30%).
  bool separate_starves(int tokens, int max_context) const {
    return 2 * kernels::attention_decode_ctas(tokens, max_context, separate_.heads, separate_.kv_heads, separate_.fp8) <=
           separate_.sms;
  }
  struct SeparateAttention {
    int heads = 0, kv_heads = 0;
    bool fp8 = false;
    int sms = 0;
  };

  // The plan for a step of `tokens` > 1 sequences: the first of batch_plans_ sized for that many
  // (none: the step takes the separate kernels).
  const kernels::FusedDecodePlan* batch_plan(int tokens) const {
    for (const kernels::FusedDecodePlan& p : batch_plans_)
      if (tokens <= p.max_batch) return &p;
    return nullptr;
  }

  bool rank_ = false;   // a tensor-parallel rank (forward_rank)
  int rank_tokens_ = 0;  // its most sequences a step whose o_proj and down push their rows
  kernels::FusedDecodePlan plan_;  // steps of one sequence
  // Steps of several: plans for up to 2, 4, ... sequences, the last for the tuning's most or the
  // most that fits. A plan sized for fewer sequences streams larger weight tiles (bench/NOTES.md,
  // fifty-first session: a plan for 8 slowed steps of 2 by 7%).
  std::vector<kernels::FusedDecodePlan> batch_plans_;
  SeparateAttention separate_;
  std::vector<kernels::FusedDecodeLayer> layers_;
  DeviceBuffer ss_;  // the norms' published sums of squares (kernels::FusedDecodeStep::ss)
  bool head_ = false;
  DeviceBuffer head_scratch_;
  std::string trace_path_;
  DeviceBuffer trace_;
};

}  // namespace nvllm::cuda_detail
