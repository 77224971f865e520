// OutputLengths: the output lengths of the finished sequences of a run that could have stopped
// early (eos not ignored, stop ids, stop strings), to estimate how far a running one will still
// go: the planned admission's guess for sequences whose length is not fixed (see scheduler.h).
//
// The estimate for a sequence that has produced `so_far` tokens is the mean length of the
// finished ones that ran longer than that (a sequence that has come far is likely to go far),
// or nothing when none did. Counts and sums live in two Fenwick trees indexed by length, so
// adding a length and asking for an estimate both take O(log longest).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace nvllm {

class OutputLengths {
 public:
  // A finished sequence's output length (>= 0).
  void add(int length);
  // The mean of the recorded lengths greater than `so_far`, rounded up (a sequence reserves
  // whole tokens); nullopt when no recorded length is greater.
  std::optional<int> expected_length(int so_far) const;
  int64_t count() const { return total_count_; }

 private:
  // Fenwick trees over lengths 0..size-1 (position length + 1); grown by doubling.
  void grow(int length);
  int64_t prefix_count(int length) const;  // recorded lengths <= length
  int64_t prefix_sum(int length) const;

  std::vector<int64_t> count_tree_, sum_tree_;
  std::vector<int64_t> histogram_;  // plain counts by length, to rebuild the trees when grown
  int64_t total_count_ = 0, total_sum_ = 0;
};

}  // namespace nvllm
