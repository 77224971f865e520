// The order in which to start work items of different sizes on a machine that takes them as they
// come (a GPU's CTAs): longest first, so that a long item does not start last and run alone at
// the end (LPT scheduling). Used for the decode attention's sequences, whose contexts differ by
// up to the model's length (CudaRunner's step inputs, kernels::AttentionBatch::decode_order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>

namespace nvllm {

// order = the indices of `sizes` by descending size, equal sizes in index order (so equal sizes
// keep 0, 1, 2, ...). order.size() == sizes.size().
inline void longest_first(std::span<const int32_t> sizes, std::span<int32_t> order) {
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sizes[a] > sizes[b]; });
}

}  // namespace nvllm
