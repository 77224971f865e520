// OutputLengths: the output lengths of a run's finished sequences that could have stopped early
// (eos not ignored, stop ids, stop strings), whose mean the planned admission expects of a
// running sequence of that kind (see scheduler.h).
#pragma once

#include <cstdint>
#include <optional>

namespace nvllm {

class OutputLengths {
 public:
  // A finished sequence's output length (>= 0).
  void add(int length);
  // The mean recorded length, rounded up (a sequence plans whole tokens); nullopt before any.
  std::optional<int> mean() const;
  int64_t count() const { return count_; }

 private:
  int64_t count_ = 0, sum_ = 0;
};

}  // namespace nvllm
