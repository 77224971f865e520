// CudaRunner start-up: sizing the KV cache from free memory after a warm-up pass at the
// largest step (kv_sizing.h), and capturing the decode CUDA graphs (graph_cache.h).
#include <cuda_runtime.h>

#include "core/kv_layout.h"
#include "core/log.h"
#include "kernels/cuda_check.h"
#include "runtime/cuda/cuda_runner_impl.h"
#include "runtime/cuda/kv_sizing.h"
#include "runtime/cuda/tp_comm.h"

namespace nvllm::cuda_detail {

// Sizes the KV cache from what is free after the weights, every preallocated buffer, and one
// forward + sampling pass at the largest step (which also makes cuBLASLt and the kernels
// allocate whatever they allocate lazily). During that pass every layer reads one scratch block.
void CudaRunner::size_kv_cache() {
  const ModelConfig& c = model_.config();
  KvViews& kv = model_.kv();
  const KvLayout layout = c.kv_layout(opt_.block_size, kv.element_bytes());
  const size_t block_bytes = layout.block_elems() * layout.dtype_bytes;  // one layer's K (or V) of one block
  DeviceBuffer scratch(2 * block_bytes);
  CUDA_CHECK(cudaMemset(scratch.get(), 0, scratch.bytes()));
  kv.point_at(scratch.as<char>(), scratch.as<char>() + block_bytes, 0, c.num_layers, c.num_kv_heads);
  {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 50;
    sp.top_p = 0.9f;
    StepOutput out;
    execute(warmup_batch(opt_, seq_cap_, model_.vocab(), sp), out);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  scratch.reset();

  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  kv.num_blocks = kv_blocks_that_fit(opt_, layout, free_bytes, total_bytes);
  // Every rank follows the same block tables: each gets the count all of them have room for.
  if (model_.tensor_parallel()) kv.num_blocks = model_.tp_comm()->min_over_ranks(kv.num_blocks, stream_.get());
  check_kv_blocks(opt_, layout, kv.num_blocks, free_bytes, total_bytes);
  const size_t bytes = static_cast<size_t>(layout.bytes_per_block()) * kv.num_blocks;
  kv.storage = DeviceBuffer(bytes);
  // Zeroed so that padded decode rows, which read block 0, never meet NaN bit patterns.
  CUDA_CHECK(cudaMemset(kv.storage.get(), 0, bytes));
  // layer_offset counts elements; the views take bytes.
  const size_t e = layout.dtype_bytes;
  char* base = kv.storage.as<char>();
  kv.point_at(base + e * layout.layer_offset(0, 0, kv.num_blocks), base + e * layout.layer_offset(0, 1, kv.num_blocks),
              e * layout.layer_offset(1, 0, kv.num_blocks), c.num_layers, c.num_kv_heads);
  log_info("KV cache: ", kv.num_blocks, " blocks x ", opt_.block_size, " tokens = ",
           static_cast<int64_t>(kv.num_blocks) * opt_.block_size, " tokens (",
           kv.dtype == kernels::KvDtype::kFp8E4M3 ? "fp8_e4m3" : "bfloat16", ", ", bytes >> 20, " MiB; ",
           free_bytes >> 20, " MiB were free of ", total_bytes >> 20, " MiB)");
}

// One graph per (context bound, padded decode size), reading its inputs at the addresses that
// make_step_layout gives for (size, size, bound / block_size): execute() packs later steps there.
void CudaRunner::capture_graphs() {
  cudaStream_t st = stream_.get();
  StepLayout layout;
  auto stage = [&](int n, int bound) {
    Batch b;  // no real sequences: every row is padding
    b.query_start.push_back(0);
    b.max_blocks_per_seq = blocks_for(bound, opt_.block_size);
    b.decode_only = true;
    PinnedBuffer& host = io_.host_staging(0);
    layout = pack_step(b, n, b.max_blocks_per_seq, true, kMaxTopLogprobs, host.get(), host.bytes(), sampler_.extras())
                 .layout;
    io_.copy_in(0, 0, layout.bytes, st);
  };
  auto record = [&](int, int bound) { forward(io_.step(layout, 1, bound, true, false, layout.seqs)); };
  graphs_.capture(seq_cap_, opt_.max_model_len, st, stage, record);
}

}  // namespace nvllm::cuda_detail
