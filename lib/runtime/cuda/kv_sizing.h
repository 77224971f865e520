// KV sizing: how many KV blocks the CUDA runner allocates. It runs one forward + sampling pass
// at the largest step first (warmup_batch), so that what is free afterwards already excludes
// the activations and whatever cuBLASLt and the kernels allocate lazily.
#pragma once

#include <cstddef>

#include "core/kv_layout.h"
#include "engine/runner.h"
#include "runtime/cuda/cuda_runner.h"

namespace nvllm::cuda_detail {

// The whole token budget spread over the most sequences a step may hold, every one sampling
// with the full sampler (`params`). Slots are -1 (nothing written) and every block-table entry
// is 0, so one scratch block per layer backs the reads.
Batch warmup_batch(const CudaRunnerOptions& opt, int seq_cap, int vocab, const SamplingParams& params);

// The blocks to allocate: --num-kv-blocks, else what --gpu-memory-utilization leaves of the
// device after the warm-up (tensor-parallel ranks then take the least of theirs).
int kv_blocks_that_fit(const CudaRunnerOptions& opt, const KvLayout& kv, size_t free_bytes, size_t total_bytes);
// Throws an actionable nvllm::Error when `num_blocks` cannot hold one sequence of --max-model-len
// or exceed what is free.
void check_kv_blocks(const CudaRunnerOptions& opt, const KvLayout& kv, int num_blocks, size_t free_bytes,
                     size_t total_bytes);

}  // namespace nvllm::cuda_detail
