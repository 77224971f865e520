// CpuRunner: the float32 reference forward of Qwen3 / Qwen2 / Llama / Mistral over a paged KV
// cache, and the reference sampler. What every kernel test compares with, and what runs the
// engine on machines without a GPU (CI).
#pragma once

#include <memory>

#include "engine/runner.h"
#include "model/config.h"
#include "model/kv_scales.h"
#include "model/weights.h"

namespace nvllm {

class CpuRunner : public Runner {
 public:
  // `weights` in F32. The cache holds `num_kv_blocks` blocks of `block_size` tokens per layer.
  // `tensor_parallel_size` > 1 runs the tensor-parallel split of tp_split.h with that many
  // simulated ranks, one after another, an all-reduce being a sum in rank order: the same
  // logits within float32 rounding (proof of the sharding, not a speed-up).
  // `fp8_kv` non-null: an FP8 (E4M3) KV cache with these scales (cpu_kv_fp8.h).
  CpuRunner(const ModelConfig& config, ModelWeights weights, int block_size, int num_kv_blocks,
            int num_threads, int tensor_parallel_size = 1, const KvScales* fp8_kv = nullptr);
  ~CpuRunner() override;

  void execute(const Batch& batch, StepOutput& out) override;
  int num_kv_blocks() const override;
  const char* name() const override { return "cpu"; }

  // Teacher-forced logits: runs the whole batch and returns the float32 logits of every
  // token [num_tokens, vocab] (tests and parity checks; nothing is sampled).
  std::vector<float> forward_logits(const Batch& batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvllm
