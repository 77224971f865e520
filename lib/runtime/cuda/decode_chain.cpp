#include "runtime/cuda/decode_chain.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/kv_layout.h"
#include "runtime/cuda/gpu_sampler.h"

namespace nvllm::cuda_detail {

bool DecodeChain::matches(const Batch& b, const GraphCache& graphs, const StepIo& io) {
  const int S = b.num_seqs();
  if (S != batch_.num_seqs() || b.num_tokens() != S || !b.decode_only || b.token_ids != tokens_) return false;
  const GraphCache::Hit hit = graphs.find(S, *std::max_element(b.context_lens.begin(), b.context_lens.end()));
  if (!hit) return false;
  const StepLayout& want = packed_.layout;
  check_.assign(want.bytes, std::byte{0});  // gaps and unread table entries: zero, as there
  SamplerExtras extras;
  const PackedStep p = pack_step(b, hit.size, blocks_for(hit.bound, block_size_), true, kMaxTopLogprobs,
                                 check_.data(), check_.size(), extras);
  const std::byte* host = io.host_staging(slot_).as<std::byte>();
  return p.layout.bytes == want.bytes && p.all_greedy_plain && extras.empty() &&
         p.sampled_seqs == packed_.sampled_seqs &&
         std::memcmp(check_.data() + want.positions, host + want.positions, want.bytes - want.positions) == 0;
}

PackedStep DecodeChain::take() {
  ++steps_;
  pending_ = false;
  return std::move(packed_);
}

// The step after `b` for its greedy sequences, each one token: the next position, its slot (in a
// block the sequence already holds), context + 1, the same table; the tokens come from the device.
void DecodeChain::next(const Batch& b, const PackedStep& packed, GraphCache::Hit hit, int slot,
                       const GraphCache& graphs, StepIo& io, const Enqueue& enqueue) {
  const int S = b.num_seqs(), bs = block_size_, W = b.max_blocks_per_seq;
  if (S > max_seqs_ || b.num_tokens() != S || !packed.all_greedy_plain || int(packed.sampled_seqs.size()) != S)
    return;
  // Not after a sequence's last token by max_tokens or the context limit (the engine stops it
  // there): a step that is dropped costs a whole step of GPU time.
  int max_ctx = 0;
  for (int s = 0; s < S; ++s) {
    const int pos = b.positions[s] + 1, ctx = b.context_lens[s] + 1;
    if (b.sample_step[s] + 1 >= b.params[s]->max_tokens || ctx >= max_model_len_) return;
    if (pos / bs >= W || b.block_tables[size_t(s) * W + pos / bs] < 0) return;
    max_ctx = std::max(max_ctx, ctx);
  }
  const GraphCache::Hit next = graphs.find(S, max_ctx);
  if (!next) return;
  Batch& n = batch_;
  n = b;
  for (int s = 0; s < S; ++s) {
    const int pos = b.positions[s] + 1;
    n.positions[s] = pos;
    n.slot_mapping[s] = b.block_tables[size_t(s) * W + pos / bs] * bs + pos % bs;
    n.context_lens[s] += 1;
    n.sample_step[s] += 1;
  }
  const int other = slot ^ 1, width = blocks_for(next.bound, bs);
  PinnedBuffer& host = io.host_staging(other);
  std::memset(host.get(), 0, make_step_layout(next.size, next.size, width, next.size).bytes);  // gaps compare equal
  SamplerExtras extras;
  PackedStep p = pack_step(n, next.size, width, true, kMaxTopLogprobs, host.get(), host.bytes(), extras);
  if (!p.all_greedy_plain || !extras.empty()) return;
  // The device staging holds these inputs already (the step advanced them) where the layout is
  // the same; on a larger graph's, every input after the tokens goes in.
  enqueue(n, p, other, next.bound == hit.bound ? p.layout.bytes : p.layout.positions, next);
  pending_ = true;
  slot_ = other;
  packed_ = std::move(p);
}

}  // namespace nvllm::cuda_detail
