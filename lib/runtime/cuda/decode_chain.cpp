#include "runtime/cuda/decode_chain.h"

#include <cstring>
#include <utility>

#include "core/kv_layout.h"
#include "runtime/cuda/gpu_sampler.h"

namespace nvllm::cuda_detail {

bool DecodeChain::matches(const Batch& b, const GraphCache& graphs, const StepIo& io) {
  if (b.num_seqs() != 1 || b.num_tokens() != 1 || !b.decode_only || b.token_ids[0] != token_) return false;
  const GraphCache::Hit hit = graphs.find(1, b.context_lens[0]);
  if (!hit || hit.size != 1) return false;
  const StepLayout& want = packed_.layout;
  check_.assign(want.bytes, std::byte{0});  // gaps and unread table entries: zero, as there
  SamplerExtras extras;
  const PackedStep p = pack_step(b, 1, blocks_for(hit.bound, block_size_), true, kMaxTopLogprobs, check_.data(),
                                 check_.size(), extras);
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

// The step after `b` for one greedy sequence: the next position, its slot (in a block the
// sequence already holds), context + 1, the same table; the token comes from the device.
void DecodeChain::next(const Batch& b, const PackedStep& packed, GraphCache::Hit hit, int slot,
                       const GraphCache& graphs, StepIo& io, bool advanced, const Enqueue& enqueue) {
  if (b.num_seqs() != 1 || !packed.all_greedy_plain || packed.sampled_seqs.size() != 1) return;
  // Not after the sequence's last token by max_tokens or the context limit (the engine stops it
  // there): a step that is dropped costs a whole step of GPU time.
  const int bs = block_size_, pos = b.positions[0] + 1, ctx = b.context_lens[0] + 1;
  if (b.sample_step[0] + 1 >= b.params[0]->max_tokens || ctx >= max_model_len_) return;
  if (pos / bs >= b.max_blocks_per_seq || b.block_tables[pos / bs] < 0) return;
  const GraphCache::Hit next = graphs.find(1, ctx);
  if (!next || next.size != 1) return;
  Batch& n = batch_;
  n = b;
  n.positions[0] = pos;
  n.slot_mapping[0] = b.block_tables[pos / bs] * bs + pos % bs;
  n.context_lens[0] = ctx;
  n.sample_step[0] += 1;
  const int other = slot ^ 1, width = blocks_for(next.bound, bs);
  PinnedBuffer& host = io.host_staging(other);
  std::memset(host.get(), 0, make_step_layout(1, 1, width, 1).bytes);  // gaps compare equal
  SamplerExtras extras;
  PackedStep p = pack_step(n, 1, width, true, kMaxTopLogprobs, host.get(), host.bytes(), extras);
  if (!p.all_greedy_plain || !extras.empty()) return;
  // On the same graph after decode_head the device staging already holds these inputs (it
  // advanced them); otherwise every input but the token, which the device has.
  enqueue(n, p, other, advanced && next.bound == hit.bound ? p.layout.bytes : p.layout.positions, next);
  pending_ = true;
  slot_ = other;
  packed_ = std::move(p);
}

}  // namespace nvllm::cuda_detail
