// DecodeChain: chained greedy decode steps (CudaTuning::chain_decode). Before waiting for a
// greedy decode step of at most CudaTuning::chain_max_seqs sequences (1 by default), the step
// after it is enqueued with the inputs it will have (each sequence's next position, slot and
// context, and the token this step picks), so the GPU runs on while the host finishes the step
// (and, under tensor parallelism, the ranks' host threads no longer start each step apart). The
// kernel that picks the tokens (the fused head at batch 1, else the argmax) has already advanced
// those inputs in the device staging (kernels/step_advance.h): on the same graph nothing is
// copied in; on a larger one, everything after the tokens. The next execute() uses it when its batch packs to the same
// inputs, and otherwise waits for it and drops it (its only effect is the cache writes at the
// sequences' next slots, in blocks that only those sequences hold, which the real step would
// write the same way or not at all). A dropped step costs a whole step of GPU time: a sequence
// that ends unforeseen (a stop token) or a request admitted beside the running ones drops one;
// ends by max_tokens or the context limit are foreseen and chain nothing.
//
// It stays in the runner rather than the engine: the engine would need the runner's graph
// buckets and staging bytes to know when a guess is usable (docs/DESIGN.md).
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

  DecodeChain(int block_size, int max_model_len, int max_seqs)
      : block_size_(block_size), max_model_len_(max_model_len), max_seqs_(max_seqs) {}
  bool pending() const { return pending_; }
  int slot() const { return slot_; }
  int steps() const { return steps_; }
  // Whether `b` is the pending step's batch: it packs to the same inputs, byte for byte past the
  // tokens, and its tokens are the ones the step before sampled.
  bool matches(const Batch& b, const GraphCache& graphs, const StepIo& io);
  // The pending step, now the current one.
  PackedStep take();
  void drop() { pending_ = false; }
  // After `b` was enqueued in `slot` on graph `hit`: enqueues the step after it in the other
  // slot when it qualifies (1 to max_seqs greedy sequences, each one token, none past max_tokens,
  // the context limit or its last held block).
  void next(const Batch& b, const PackedStep& packed, GraphCache::Hit hit, int slot, const GraphCache& graphs,
            StepIo& io, const Enqueue& enqueue);
  // The pending step decodes the tokens the current step sampled (one a sequence).
  void set_tokens(const std::vector<int32_t>& tokens) { tokens_ = tokens; }

 private:
  int block_size_, max_model_len_, max_seqs_;
  bool pending_ = false;
  int slot_ = 0;
  std::vector<int32_t> tokens_;
  PackedStep packed_;
  int steps_ = 0;
  Batch batch_;                    // the chained step's batch
  std::vector<std::byte> check_;  // the next batch packed, to compare
};

}  // namespace nvllm::cuda_detail
