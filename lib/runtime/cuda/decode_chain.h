// DecodeChain: chained batch-1 decode (CudaTuning::chain_decode). Before waiting for a greedy
// one-sequence decode step, the step after it is enqueued with the inputs it will have (the
// next position, slot and context; the token is the one this step leaves on the device: the
// fused head writes it into the device staging, or the sampler's argmax is copied there), so the
// GPU runs on while the host finishes the step (and, under tensor parallelism, the ranks' host
// threads no longer start each step apart). The next execute()
// uses it when its batch packs to the same inputs, and otherwise waits for it and drops it (its
// only effect is the cache write at the sequence's next slot, in a block that only that sequence
// holds, which the real step would write the same way or not at all).
//
// It stays in the runner rather than the engine: the engine would need the runner's graph
// buckets and staging bytes to know when a guess is usable, and only batch 1 gains (docs/DESIGN.md).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "engine/runner.h"
#include "runtime/cuda/graph_cache.h"
#include "runtime/cuda/step_io.h"

namespace nvllm::cuda_detail {

class DecodeChain {
 public:
  // Enqueues a packed step in a slot, its inputs copied from byte `from` on, on a graph.
  using Enqueue = std::function<void(const Batch&, const PackedStep&, int slot, size_t from, GraphCache::Hit)>;

  DecodeChain(int block_size, int max_model_len) : block_size_(block_size), max_model_len_(max_model_len) {}
  bool pending() const { return pending_; }
  int slot() const { return slot_; }
  int steps() const { return steps_; }
  // Whether `b` is the pending step's batch: it packs to the same inputs, byte for byte past the
  // token, and its token is the one the step before sampled.
  bool matches(const Batch& b, const GraphCache& graphs, const StepIo& io);
  // The pending step, now the current one.
  PackedStep take();
  void drop() { pending_ = false; }
  // After `b` was enqueued in `slot` on graph `hit`: enqueues the step after it in the other
  // slot when it qualifies (one greedy sequence, not past max_tokens, the context limit or its
  // last block). `advanced`: the step's last kernel (decode_head) also moved the device staging's
  // position, slot and context on, so on the same graph nothing is copied in; otherwise every
  // input but the token is.
  void next(const Batch& b, const PackedStep& packed, GraphCache::Hit hit, int slot, const GraphCache& graphs,
            StepIo& io, bool advanced, const Enqueue& enqueue);
  // The pending step decodes the token the current step sampled.
  void set_token(int32_t token) { token_ = token; }

 private:
  int block_size_, max_model_len_;
  bool pending_ = false;
  int slot_ = 0;
  int32_t token_ = -1;
  PackedStep packed_;
  int steps_ = 0;
  Batch batch_;                    // the chained step's batch
  std::vector<std::byte> check_;  // the next batch packed, to compare
};

}  // namespace nvllm::cuda_detail
