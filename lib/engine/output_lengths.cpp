#include "engine/output_lengths.h"

#include <stdexcept>

namespace nvllm {

void OutputLengths::add(int length) {
  if (length < 0) throw std::logic_error("OutputLengths::add: negative length");
  ++count_;
  sum_ += length;
}

std::optional<int> OutputLengths::mean() const {
  if (count_ == 0) return std::nullopt;
  return static_cast<int>((sum_ + count_ - 1) / count_);
}

}  // namespace nvllm
