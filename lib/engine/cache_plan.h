// CachePlan: the free KV blocks a set of running sequences will need at each future step, for
// the planned admission (scheduler.h).
//
// A sequence is described by its trajectory: the blocks it holds now, the tokens it knows
// (the cache can hold at most one more of them each step: a decode feeds back one sampled
// token a step, and a prefill chunk computes tokens already known), the tokens it will hold at
// its last step, and how many steps it still runs. When it finishes it frees the blocks it is
// the last holder of (its `own` blocks; a block shared with a sequence that runs longer is that
// sequence's). A sequence whose last step is not known (still prefilling, or not scheduled
// this step) is planned to hold its end for good.
//
// The need at step k (0: the step being scheduled) is what the plan takes from today's free
// blocks by then: every live sequence's growth beyond what it holds now, plus what sequences
// admitted now took, less the own blocks of sequences that have finished, plus blocks that a
// finished sequence was planned to free but a sequence admitted later still shares (keep()).
// Between two finishes the need only grows, so its peak is at the last step of some sequence,
// at step 0, or after every finish; fits() evaluates exactly those steps.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace nvllm {

struct Trajectory {
  static constexpr int64_t kForever = std::numeric_limits<int64_t>::max();
  int64_t steps = kForever;  // steps it still holds blocks, this one included: gone from step `steps` on
  int tokens = 0;            // known tokens now: after k more steps the cache holds at most tokens + k
  int end_tokens = 0;        // the most tokens it will hold (its planned end)
  int held = 0;              // blocks its table holds now (after this step's allocation)
  int own = 0;               // of those, the blocks it frees when it finishes
};

// `count` blocks that the plan has freed from step `from` on stay in use until the trajectory
// they belong to ends (a sequence admitted later shares them and outlives their planned holder).
struct KeptBlocks {
  int64_t from = 0;
  int64_t count = 0;
};

// Blocks `t` holds at step k beyond those it holds now (while k < t.steps).
int64_t growth(const Trajectory& t, int64_t k, int block_size);
// Block-steps `t` holds of its own over `lifetime` steps (its own blocks plus its growth, step
// by step): what admitting it spends of the cache, for pacing.
int64_t block_steps(const Trajectory& t, int64_t lifetime, int block_size);

class CachePlan {
 public:
  CachePlan(int block_size, int64_t free_blocks) : block_size_(block_size), free_(free_blocks) {}

  // A running sequence (cost 0), or one admitted now that takes `cost` free blocks, with the
  // blocks it keeps in use past their planned holders' ends.
  void add(const Trajectory& t, int64_t cost = 0, const std::vector<KeptBlocks>& kept = {});
  // Whether `t`, taking `cost` free blocks now and keeping `kept`, fits beside the added
  // sequences at every step: its peak need is at most the free blocks.
  bool fits(const Trajectory& t, int64_t cost, const std::vector<KeptBlocks>& kept = {}) const;
  // Free blocks the added sequences need at step k (0: now).
  int64_t need_at(int64_t k) const;
  // The most they need at any step.
  int64_t peak_need() const;
  int64_t free_blocks() const { return free_; }

 private:
  int64_t need_with(int64_t k, const Trajectory* extra, int64_t extra_cost,
                    const std::vector<KeptBlocks>* extra_kept) const;
  int64_t peak_with(const Trajectory* extra, int64_t extra_cost, const std::vector<KeptBlocks>* extra_kept) const;

  int block_size_;
  int64_t free_;
  std::vector<Trajectory> seqs_;
  std::vector<KeptBlocks> kept_;
  int64_t taken_ = 0;  // free blocks the admitted sequences took
};

}  // namespace nvllm
