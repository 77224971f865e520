#include "runtime/cuda/kv_sizing.h"

#include <algorithm>

#include "core/error.h"

namespace nvllm::cuda_detail {

Batch warmup_batch(const CudaRunnerOptions& opt, int seq_cap, int vocab, const SamplingParams& sp) {
  const int seqs = std::min(seq_cap, opt.max_num_batched_tokens);
  const int per_seq = std::min(opt.max_num_batched_tokens / seqs, opt.max_model_len);
  Batch b;
  b.max_blocks_per_seq = blocks_for(per_seq, opt.block_size);
  b.query_start.push_back(0);
  for (int s = 0; s < seqs; ++s) {
    for (int i = 0; i < per_seq; ++i) {
      b.token_ids.push_back(i % vocab);
      b.positions.push_back(i);
      b.slot_mapping.push_back(-1);
    }
    b.query_start.push_back(b.query_start.back() + per_seq);
    b.context_lens.push_back(per_seq);
    b.block_tables.insert(b.block_tables.end(), b.max_blocks_per_seq, 0);
    b.sample.push_back(1);
    b.params.push_back(&sp);
    b.prompt_tokens.emplace_back();
    b.output_tokens.emplace_back();
    b.seeds.push_back(s);
    b.sample_step.push_back(0);
    b.suppress_eos.push_back(0);
  }
  b.decode_only = per_seq == 1;
  return b;
}

int kv_blocks_that_fit(const CudaRunnerOptions& opt, const KvLayout& kv, size_t free_bytes, size_t total_bytes) {
  if (opt.num_kv_blocks > 0) return opt.num_kv_blocks;
  const double used = static_cast<double>(total_bytes - free_bytes);
  const double budget = static_cast<double>(total_bytes) * opt.gpu_memory_utilization - used;
  return budget <= 0 ? 0 : static_cast<int>(std::min(budget / static_cast<double>(kv.bytes_per_block()), 2e9));
}

void check_kv_blocks(const CudaRunnerOptions& opt, const KvLayout& kv, int num_blocks, size_t free_bytes,
                     size_t total_bytes) {
  const size_t bytes_per_block = static_cast<size_t>(kv.bytes_per_block());
  const int per_seq_blocks = blocks_for(opt.max_model_len, opt.block_size);
  if (num_blocks < per_seq_blocks && opt.num_kv_blocks > 0) {
    fail("--num-kv-blocks ", opt.num_kv_blocks, ": one sequence of --max-model-len ", opt.max_model_len, " needs ",
         per_seq_blocks, " blocks of ", opt.block_size, " tokens; raise --num-kv-blocks or lower --max-model-len");
  }
  NVLLM_CHECK(num_blocks >= per_seq_blocks, "KV cache: room for ", num_blocks, " blocks of ", opt.block_size,
              " tokens, but one sequence of --max-model-len ", opt.max_model_len, " needs ", per_seq_blocks,
              " (", (total_bytes - free_bytes) >> 20, " MiB of ", total_bytes >> 20,
              " MiB in use after weights and activations); lower --max-model-len or --max-num-batched-tokens, "
              "or raise --gpu-memory-utilization (now ", opt.gpu_memory_utilization, ")");
  const size_t bytes = bytes_per_block * num_blocks;
  if (bytes > free_bytes)
    fail("KV cache: ", num_blocks, " blocks need ", bytes >> 20, " MiB but only ", free_bytes >> 20,
         " MiB are free on the GPU; lower --num-kv-blocks or --gpu-memory-utilization");
}

}  // namespace nvllm::cuda_detail
