#include "engine/output_lengths.h"

#include <algorithm>
#include <stdexcept>

namespace nvllm {

void OutputLengths::grow(int length) {
  size_t size = std::max<size_t>(histogram_.size(), 64);
  while (size <= static_cast<size_t>(length)) size *= 2;
  if (size == histogram_.size()) return;
  histogram_.resize(size, 0);
  // Rebuild both trees from the histogram: O(size).
  count_tree_.assign(size + 1, 0);
  sum_tree_.assign(size + 1, 0);
  for (size_t len = 0; len < size; ++len) {
    const size_t i = len + 1;
    count_tree_[i] += histogram_[len];
    sum_tree_[i] += histogram_[len] * static_cast<int64_t>(len);
    const size_t parent = i + (i & (~i + 1));
    if (parent <= size) {
      count_tree_[parent] += count_tree_[i];
      sum_tree_[parent] += sum_tree_[i];
    }
  }
}

void OutputLengths::add(int length) {
  if (length < 0) throw std::logic_error("OutputLengths::add: negative length");
  grow(length);
  ++histogram_[length];
  for (size_t i = static_cast<size_t>(length) + 1; i < count_tree_.size(); i += i & (~i + 1)) {
    count_tree_[i] += 1;
    sum_tree_[i] += length;
  }
  ++total_count_;
  total_sum_ += length;
}

int64_t OutputLengths::prefix_count(int length) const {
  int64_t n = 0;
  for (size_t i = std::min<size_t>(static_cast<size_t>(length) + 1, histogram_.size()); i > 0; i -= i & (~i + 1)) {
    n += count_tree_[i];
  }
  return n;
}

int64_t OutputLengths::prefix_sum(int length) const {
  int64_t s = 0;
  for (size_t i = std::min<size_t>(static_cast<size_t>(length) + 1, histogram_.size()); i > 0; i -= i & (~i + 1)) {
    s += sum_tree_[i];
  }
  return s;
}

std::optional<int> OutputLengths::expected_length(int so_far) const {
  if (so_far < 0) so_far = -1;  // every length is greater
  const int64_t n = total_count_ - (so_far >= 0 ? prefix_count(so_far) : 0);
  if (n == 0) return std::nullopt;
  const int64_t sum = total_sum_ - (so_far >= 0 ? prefix_sum(so_far) : 0);
  return static_cast<int>((sum + n - 1) / n);
}

}  // namespace nvllm
