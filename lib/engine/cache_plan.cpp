#include "engine/cache_plan.h"

#include <algorithm>

namespace nvllm {

void CachePlan::add(const Trajectory& t, int64_t cost, const std::vector<KeptBlocks>& kept) {
  seqs_.push_back(t);
  taken_ += cost;
  kept_.insert(kept_.end(), kept.begin(), kept.end());
}

namespace {

int64_t blocks_for(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace

int64_t growth(const Trajectory& t, int64_t k, int block_size) {
  // min(k, end_tokens) first: k may be near kForever.
  const int64_t tokens = std::min<int64_t>(t.tokens + std::min<int64_t>(k, t.end_tokens), t.end_tokens);
  return std::max<int64_t>(0, blocks_for(tokens, block_size) - t.held);
}

int64_t block_steps(const Trajectory& t, int64_t lifetime, int block_size) {
  // Sum over k < lifetime of own + growth(k): growth is blocks_for(min(tokens + k, end)) - held
  // wherever positive. Summed per block boundary rather than per step: the growth is constant
  // between the steps where tokens + k crosses a block boundary.
  int64_t sum = t.own * lifetime;
  int64_t k = 0;
  while (k < lifetime) {
    const int64_t g = growth(t, k, block_size);
    // The next step where the growth can change: tokens + k needs one more block.
    const int64_t tokens = t.tokens + k;
    int64_t next = tokens >= t.end_tokens ? lifetime : k + (blocks_for(tokens, block_size) * block_size + 1 - tokens);
    next = std::min(std::max(next, k + 1), lifetime);
    sum += g * (next - k);
    k = next;
  }
  return sum;
}

int64_t CachePlan::need_with(int64_t k, const Trajectory* extra, int64_t extra_cost,
                             const std::vector<KeptBlocks>* extra_kept) const {
  int64_t need = taken_;
  for (const Trajectory& t : seqs_) need += k < t.steps ? growth(t, k, block_size_) : -t.own;
  for (const KeptBlocks& kb : kept_) need += k >= kb.from ? kb.count : 0;
  if (extra) {
    need += k < extra->steps ? extra_cost + growth(*extra, k, block_size_) : extra_cost - extra->own;
    for (const KeptBlocks& kb : *extra_kept) need += k >= kb.from ? kb.count : 0;
  }
  return need;
}

int64_t CachePlan::need_at(int64_t k) const { return need_with(k, nullptr, 0, nullptr); }

int64_t CachePlan::peak_with(const Trajectory* extra, int64_t extra_cost,
                             const std::vector<KeptBlocks>* extra_kept) const {
  // Step 0, the last step of each sequence that finishes, and for good after every finish.
  std::vector<int64_t> points = {0, Trajectory::kForever - 1};
  for (const Trajectory& t : seqs_) {
    if (t.steps != Trajectory::kForever && t.steps > 0) points.push_back(t.steps - 1);
  }
  if (extra && extra->steps != Trajectory::kForever && extra->steps > 0) points.push_back(extra->steps - 1);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  int64_t peak = 0;
  for (int64_t k : points) peak = std::max(peak, need_with(k, extra, extra_cost, extra_kept));
  return peak;
}

int64_t CachePlan::peak_need() const { return peak_with(nullptr, 0, nullptr); }

bool CachePlan::fits(const Trajectory& t, int64_t cost, const std::vector<KeptBlocks>& kept) const {
  return peak_with(&t, cost, &kept) <= free_;
}

}  // namespace nvllm
