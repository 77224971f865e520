// GpuSampler: a step's sampling on the GPU (docs/sampling.md). Greedy steps without penalties
// or logprobs take an argmax per row; others the full sampler (kernels/sampling.h) with the
// token counts that penalties read and the ids that min_tokens suppresses (the "extras", copied
// only in steps that have them). Its outputs (token, logprob, top logprobs per row) lie in one
// device buffer that StepIo copies back, and unpack() turns into a StepOutput.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "engine/runner.h"
#include "kernels/step_advance.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/step_inputs.h"

namespace nvllm::cuda_detail {

constexpr int kMaxTopLogprobs = 20;  // what vLLM allows; larger requests are clamped

class GpuSampler {
 public:
  // Output room for `seqs` rows over a vocabulary of `vocab`.
  void allocate(int seqs, int vocab);
  // Filled by pack_step with the step's extras.
  SamplerExtras& extras() { return extras_; }
  const DeviceBuffer& out() const { return out_dev_; }
  int32_t* out_tokens() { return out_dev_.as<int32_t>(); }
  // Logs once that a request asked for more top logprobs than kMaxTopLogprobs.
  void warn_top_clamp(const Batch& b);
  // Samples the packed step's rows from `logits`: nothing where the fused head already wrote the
  // greedy token (token_ready), an argmax over `argmax_rows` logits rows where every row is
  // greedy and plain (advancing a chained step's inputs as `advance` says), else the full sampler.
  void launch(const float* logits, const PackedStep& packed, const kernels::SampleRow* rows, int argmax_rows,
              bool token_ready, const kernels::StepAdvance& advance, cudaStream_t stream);
  // Bytes of the outputs to copy back for `packed` (top logprobs only when asked for).
  size_t copy_bytes(const PackedStep& packed) const {
    return packed.any_top_logprobs ? out_dev_.bytes() : out_top_ids_;
  }
  // The copied-back outputs `host` into `out` (sized by the caller); `use_graph`: greedy tokens
  // lie at their sequence's row.
  void unpack(const Batch& b, const PackedStep& packed, const std::byte* host, bool use_graph, StepOutput& out) const;

 private:
  // Copies the extras in and builds the penalties' token counts; sets what sample_rows reads.
  void stage_extras(cudaStream_t stream, const int32_t** counts, const int32_t** suppress);

  int vocab_ = 0;
  SamplerExtras extras_;
  PinnedBuffer extras_host_;
  DeviceBuffer extras_dev_, counts_;
  DeviceBuffer out_dev_;  // tokens [seqs] int32, logprobs [seqs], top ids and logprobs [seqs, kMaxTopLogprobs]
  size_t out_lp_ = 0, out_top_ids_ = 0, out_top_lp_ = 0;  // offsets inside out_dev_
  bool warned_top_clamp_ = false;
};

}  // namespace nvllm::cuda_detail
