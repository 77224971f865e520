// CudaRunner start-up: sizing the KV cache from free memory after a warm-up pass at the
// largest step, and capturing the decode CUDA graphs.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda_check.h"
#include "runtime/cuda/cuda_runner_impl.h"

namespace nvllm::cuda_detail {

// Context-length bounds that get their own graphs: 1024, then x4, up to max_model_len (always
// included). The bound is baked into a graph twice, as the block-table width (bytes copied per
// step) and as attention_decode's max_context_len (how it splits the context), so a short-context
// decode must not replay a graph made for the longest context.
std::vector<int> context_buckets(int max_model_len) {
  std::vector<int> buckets;
  for (int b = 1024; b < max_model_len; b *= 4) buckets.push_back(b);
  buckets.push_back(max_model_len);
  return buckets;
}

// Decode sizes that get a graph: 1, 2, 4, 8, 16, 24, 32, then every 16 up to max_num_seqs
// (which is always included).
std::vector<int> graph_sizes(int max_num_seqs) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4, 8, 16, 24, 32})
    if (s < max_num_seqs) sizes.push_back(s);
  for (int s = 48; s < max_num_seqs; s += 16) sizes.push_back(s);
  sizes.push_back(max_num_seqs);
  return sizes;
}


// Sizes the KV cache from what is free after the weights, every preallocated buffer, and one
// forward + sampling pass at the largest step (which also makes cuBLASLt and the kernels
// allocate whatever they allocate lazily).
void CudaRunner::size_kv_cache() {
  const int L = c_.num_layers;
  const KvLayout kv = c_.kv_layout(opt_.block_size, sizeof(bf16));
  const size_t block_elems = kv.block_elems();
  const size_t bytes_per_block = static_cast<size_t>(kv.bytes_per_block());

  // Warm-up: the whole token budget spread over max_num_seqs sequences, every one sampling with
  // the full sampler. Slots are -1 (nothing written) and every block-table entry points at one
  // scratch block, so a single block per layer backs the reads.
  DeviceBuffer scratch(2 * block_elems * sizeof(bf16));
  CUDA_CHECK(cudaMemset(scratch.get(), 0, scratch.bytes()));
  k_cache_.assign(L, scratch.as<bf16>());
  v_cache_.assign(L, scratch.as<bf16>() + block_elems);
  {
    const int seqs = std::min(seq_cap_, opt_.max_num_batched_tokens);
    const int per_seq = std::min(opt_.max_num_batched_tokens / seqs, opt_.max_model_len);
    Batch b;
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 50;
    sp.top_p = 0.9f;
    b.max_blocks_per_seq = blocks_for(per_seq);
    b.query_start.push_back(0);
    for (int s = 0; s < seqs; ++s) {
      for (int i = 0; i < per_seq; ++i) {
        b.token_ids.push_back(i % c_.vocab_size);
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
    StepOutput out;
    execute(b, out);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  scratch.reset();

  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int per_seq_blocks = blocks_for(opt_.max_model_len);
  if (opt_.num_kv_blocks > 0) {
    num_blocks_ = opt_.num_kv_blocks;
  } else {
    const double used = static_cast<double>(total_bytes - free_bytes);
    const double budget = static_cast<double>(total_bytes) * opt_.gpu_memory_utilization - used;
    num_blocks_ = budget <= 0 ? 0 : static_cast<int>(std::min(budget / bytes_per_block, 2e9));
  }
  if (num_blocks_ < per_seq_blocks && opt_.num_kv_blocks > 0) {
    fail("--num-kv-blocks ", opt_.num_kv_blocks, ": one sequence of --max-model-len ", opt_.max_model_len, " needs ",
         per_seq_blocks, " blocks of ", opt_.block_size, " tokens; raise --num-kv-blocks or lower --max-model-len");
  }
  NVLLM_CHECK(num_blocks_ >= per_seq_blocks, "KV cache: room for ", num_blocks_, " blocks of ", opt_.block_size,
              " tokens, but one sequence of --max-model-len ", opt_.max_model_len, " needs ", per_seq_blocks,
              " (", (total_bytes - free_bytes) >> 20, " MiB of ", total_bytes >> 20,
              " MiB in use after weights and activations); lower --max-model-len or --max-num-batched-tokens, "
              "or raise --gpu-memory-utilization (now ", opt_.gpu_memory_utilization, ")");
  const size_t bytes = bytes_per_block * num_blocks_;
  if (bytes > free_bytes)
    fail("KV cache: ", num_blocks_, " blocks need ", bytes >> 20, " MiB but only ", free_bytes >> 20,
         " MiB are free on the GPU; lower --num-kv-blocks or --gpu-memory-utilization");
  kv_ = DeviceBuffer(bytes);
  // Zeroed so that padded decode rows, which read block 0, never meet NaN bit patterns.
  CUDA_CHECK(cudaMemset(kv_.get(), 0, bytes));
  for (int l = 0; l < L; ++l) {
    k_cache_[l] = kv_.as<bf16>() + kv.layer_offset(l, 0, num_blocks_);
    v_cache_[l] = kv_.as<bf16>() + kv.layer_offset(l, 1, num_blocks_);
  }
  log_info("KV cache: ", num_blocks_, " blocks x ", opt_.block_size, " tokens = ",
           static_cast<int64_t>(num_blocks_) * opt_.block_size, " tokens (", bytes >> 20, " MiB; ",
           free_bytes >> 20, " MiB were free of ", total_bytes >> 20, " MiB)");
}

// One graph per (context bound, padded decode size). Each size is first run eagerly (cuBLASLt
// picks its algorithm outside capture), then captured reading its inputs at the addresses that
// make_step_layout gives for (size, size, bound / block_size): execute() packs later steps there.
void CudaRunner::capture_graphs() {
  cudaStream_t st = stream_.get();
  std::vector<int> sizes = graph_sizes(seq_cap_);
  std::reverse(sizes.begin(), sizes.end());
  const std::vector<int> bounds = context_buckets(opt_.max_model_len);
  for (int bound : bounds) {
    const int width = blocks_for(bound);
    for (int n : sizes) {
      Batch b;  // no real sequences: every row is padding
      b.query_start.push_back(0);
      b.max_blocks_per_seq = width;
      b.decode_only = true;
      PackedStep packed = pack_step(b, n, width, true, kMaxTopLogprobs, staging_host_[0].get(), staging_host_[0].bytes(),
                                    extras_);
      CUDA_CHECK(
          cudaMemcpyAsync(staging_dev_.get(), staging_host_[0].get(), packed.layout.bytes, cudaMemcpyHostToDevice, st));
      const Step step{packed.layout, 1, bound, true, false};
      if (bound == bounds.front()) {
        forward(step);
        CUDA_CHECK(cudaStreamSynchronize(st));
      }
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      try {
        forward(step);
      } catch (...) {
        cudaStreamEndCapture(st, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(st, &g));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t err = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      CUDA_CHECK(err);
      graphs_.emplace(std::make_pair(bound, n), CudaGraphExec(exec));
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
  log_info("captured ", graphs_.size(), " CUDA graphs: decode batch sizes up to ", seq_cap_, " x context bounds up to ",
           bounds.back());
}

}  // namespace nvllm::cuda_detail
