#include "runtime/cuda/step_inputs.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>

#include "core/error.h"
#include "core/longest_first.h"

namespace nvllm {

namespace {
size_t align16(size_t x) { return (x + 15) & ~size_t{15}; }
}  // namespace

StepLayout make_step_layout(int tokens, int seqs, int width, int sample_rows) {
  StepLayout l;
  l.tokens = tokens;
  l.seqs = seqs;
  l.width = width;
  l.sample_rows = sample_rows;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at = align16(at + bytes);
    return here;
  };
  l.token_ids = take(sizeof(int32_t) * tokens);
  l.positions = take(sizeof(int32_t) * tokens);
  l.slots = take(sizeof(int32_t) * tokens);
  l.query_start = take(sizeof(int32_t) * (seqs + 1));
  l.context_lens = take(sizeof(int32_t) * seqs);
  l.decode_order = take(sizeof(int32_t) * seqs);
  l.block_tables = take(sizeof(int32_t) * static_cast<size_t>(seqs) * width);
  l.sample_token = take(sizeof(int32_t) * sample_rows);
  l.sample_params = take(sizeof(kernels::SampleRow) * sample_rows);
  l.bytes = at;
  return l;
}

namespace {

int32_t* ints(std::byte* base, size_t offset) { return reinterpret_cast<int32_t*>(base + offset); }

// The forward pass's arrays, padded rows after the batch's: token 0 at position 0, slot -1,
// query length 1, context 1, block-table entry 0.
void pack_forward(const Batch& b, const StepLayout& l, int padded_seqs, int width, std::byte* base) {
  const int seqs = b.num_seqs(), pad = padded_seqs - seqs, nt = b.num_tokens();
  std::memcpy(ints(base, l.token_ids), b.token_ids.data(), sizeof(int32_t) * nt);
  std::memcpy(ints(base, l.positions), b.positions.data(), sizeof(int32_t) * nt);
  std::memcpy(ints(base, l.slots), b.slot_mapping.data(), sizeof(int32_t) * nt);
  std::fill_n(ints(base, l.token_ids) + nt, pad, 0);
  std::fill_n(ints(base, l.positions) + nt, pad, 0);
  std::fill_n(ints(base, l.slots) + nt, pad, -1);

  int32_t* qs = ints(base, l.query_start);
  std::memcpy(qs, b.query_start.data(), sizeof(int32_t) * (seqs + 1));
  for (int i = 1; i <= pad; ++i) qs[seqs + i] = qs[seqs] + i;
  int32_t* ctx = ints(base, l.context_lens);
  std::memcpy(ctx, b.context_lens.data(), sizeof(int32_t) * seqs);
  std::fill_n(ctx + seqs, pad, 1);

  int32_t* bt = ints(base, l.block_tables);
  const int src_w = b.max_blocks_per_seq;
  if (src_w == width) {
    std::memcpy(bt, b.block_tables.data(), sizeof(int32_t) * static_cast<size_t>(seqs) * width);
  } else {
    for (int s = 0; s < seqs; ++s) {
      // Only the first ceil(context / block_size) entries are ever read; copy what the batch has.
      std::memcpy(bt + static_cast<size_t>(s) * width, b.block_tables.data() + static_cast<size_t>(s) * src_w,
                  sizeof(int32_t) * std::min(src_w, width));
    }
  }
  for (int s = seqs; s < padded_seqs; ++s) bt[static_cast<size_t>(s) * width] = 0;
}

// The longest query and context, padded rows (query 1, context 1) included, and how many
// sequences at the front have one query token each (the scheduler puts running decodes first).
void step_shape(const Batch& b, int pad, PackedStep& p) {
  bool leading = true;
  for (int s = 0; s < b.num_seqs(); ++s) {
    p.max_query_len = std::max(p.max_query_len, b.query_len(s));
    p.max_context_len = std::max(p.max_context_len, b.context_lens[s]);
    leading = leading && b.query_len(s) == 1;
    p.decode_seqs += leading;
  }
  if (leading) p.decode_seqs += pad;
  if (pad > 0) {
    p.max_query_len = std::max(p.max_query_len, 1);
    p.max_context_len = std::max(p.max_context_len, 1);
  }
}

// Sample row r (sequence s): its token row, its parameters, its share of the extras.
void pack_sample_row(const Batch& b, int r, int s, bool logits_row_is_seq, int max_top, std::byte* base,
                     PackedStep& p, SamplerExtras& extras) {
  const SamplingParams& sp = *b.params[s];
  ints(base, p.layout.sample_token)[r] = b.query_start[s + 1] - 1;
  kernels::SampleRow& row = reinterpret_cast<kernels::SampleRow*>(base + p.layout.sample_params)[r];
  row = kernels::SampleRow{};
  row.logits_row = logits_row_is_seq ? s : r;
  row.temperature = sp.temperature;
  row.top_k = sp.top_k;
  row.top_p = sp.top_p;
  row.min_p = sp.min_p;
  row.repetition_penalty = sp.repetition_penalty;
  row.frequency_penalty = sp.frequency_penalty;
  row.presence_penalty = sp.presence_penalty;
  row.counts_row = -1;
  if (sp.has_penalties()) {
    row.counts_row = extras.counts_rows();
    const auto& prompt = b.prompt_tokens[s];
    const auto& output = b.output_tokens[s];
    extras.ids.insert(extras.ids.end(), prompt.begin(), prompt.end());
    extras.ids.insert(extras.ids.end(), output.begin(), output.end());
    extras.row_begin.push_back(static_cast<int32_t>(extras.ids.size()));
    extras.prompt_len.push_back(static_cast<int32_t>(prompt.size()));
  }
  row.want_logprob = sp.logprobs.has_value() ? 1 : 0;
  row.num_top = sp.logprobs.has_value() ? std::clamp(*sp.logprobs, 0, max_top) : 0;
  row.suppress_begin = row.suppress_end = static_cast<int32_t>(extras.suppress.size());
  if (b.suppress_eos[s]) {
    extras.suppress.insert(extras.suppress.end(), b.eos_token_ids.begin(), b.eos_token_ids.end());
    extras.suppress.insert(extras.suppress.end(), sp.stop_token_ids.begin(), sp.stop_token_ids.end());
    row.suppress_end = static_cast<int32_t>(extras.suppress.size());
  }
  row.step = static_cast<uint32_t>(b.sample_step[s]);
  row.seed = b.seeds[s];
  if (!sp.greedy() || sp.has_penalties() || sp.logprobs.has_value() || row.suppress_end > row.suppress_begin)
    p.all_greedy_plain = false;
  if (row.num_top > 0) p.any_top_logprobs = true;
}

}  // namespace

PackedStep pack_step(const Batch& b, int padded_seqs, int width, bool logits_row_is_seq, int max_top, void* host,
                     size_t host_bytes, SamplerExtras& extras) {
  PackedStep p;
  const int seqs = b.num_seqs(), pad = padded_seqs - seqs;
  for (int s = 0; s < seqs; ++s)
    if (b.sample[s]) p.sampled_seqs.push_back(s);
  const int rows = static_cast<int>(p.sampled_seqs.size());
  p.layout = make_step_layout(b.num_tokens() + pad, padded_seqs, width, rows);
  NVLLM_CHECK(p.layout.bytes <= host_bytes, "internal: step inputs (", p.layout.bytes,
              " bytes) exceed the staging buffer (", host_bytes, ")");
  std::byte* base = static_cast<std::byte*>(host);
  pack_forward(b, p.layout, padded_seqs, width, base);
  step_shape(b, pad, p);
  int32_t* order = ints(base, p.layout.decode_order);
  longest_first(std::span(ints(base, p.layout.context_lens), p.decode_seqs), std::span(order, p.decode_seqs));
  std::iota(order + p.decode_seqs, order + padded_seqs, p.decode_seqs);
  extras.clear();
  for (int r = 0; r < rows; ++r) pack_sample_row(b, r, p.sampled_seqs[r], logits_row_is_seq, max_top, base, p, extras);
  return p;
}

}  // namespace nvllm
