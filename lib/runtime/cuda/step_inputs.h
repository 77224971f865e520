// Packing one step's Batch into the runner's staging layout: every int array the forward pass
// and the sampler read, back to back in one pinned host buffer, so that one H2D copy moves a
// step's inputs. The same offsets address the device copy. The forward arrays' offsets depend
// only on (tokens, seqs, block-table width), which is what lets a CUDA graph captured for a
// padded decode size read a later step's inputs from the same addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/runner.h"
#include "kernels/sampling.h"

namespace nvllm {

struct StepLayout {
  int tokens = 0, seqs = 0, width = 0, sample_rows = 0;
  size_t token_ids = 0, positions = 0, slots = 0;  // [tokens]
  size_t query_start = 0;                          // [seqs + 1]
  size_t context_lens = 0;                         // [seqs]
  size_t decode_order = 0;                         // [seqs]: AttentionBatch::decode_order
  size_t block_tables = 0;                         // [seqs, width]
  size_t sample_token = 0;                         // [sample_rows]: token row that samples
  size_t sample_params = 0;                        // [sample_rows] kernels::SampleRow
  size_t bytes = 0;
};

StepLayout make_step_layout(int tokens, int seqs, int width, int sample_rows);

// The variable-length sampler inputs that only penalties and min_tokens need; a second copy,
// made only in steps that have them.
struct SamplerExtras {
  std::vector<int32_t> ids;        // per counts row: prompt tokens then output tokens
  std::vector<int32_t> row_begin;  // [counts_rows + 1]
  std::vector<int32_t> prompt_len; // [counts_rows]
  std::vector<int32_t> suppress;   // eos / stop ids of the rows under min_tokens
  int counts_rows() const { return static_cast<int>(prompt_len.size()); }
  bool empty() const { return prompt_len.empty() && suppress.empty(); }
  void clear() {
    ids.clear();
    row_begin.assign(1, 0);
    prompt_len.clear();
    suppress.clear();
  }
};

struct PackedStep {
  StepLayout layout;
  std::vector<int> sampled_seqs;  // sequence of each sample row
  bool all_greedy_plain = true;   // the argmax fast path applies
  bool any_top_logprobs = false;
  int max_query_len = 0, max_context_len = 0;
  int decode_seqs = 0;  // leading sequences with one query token (all of them in a decode step)
};

// Writes `batch` into `host` (layout.bytes bytes) as a batch of `padded_seqs` sequences
// (padded_seqs > num_seqs only for a decode graph: padded sequences have one token at
// position 0, slot -1, context 1 in block 0) with block tables `width` wide.
// `logits_row_is_seq`: the sampler reads logits row s (graph) instead of row r (gathered).
// decode_order holds the leading decode sequences (padded ones included) longest context first,
// then the others in place.
PackedStep pack_step(const Batch& batch, int padded_seqs, int width, bool logits_row_is_seq, int max_top,
                     void* host, size_t host_bytes, SamplerExtras& extras);

}  // namespace nvllm
