#include "runtime/cuda/graph_cache.h"

#include <algorithm>

#include "core/log.h"
#include "kernels/cuda_check.h"

namespace nvllm::cuda_detail {

// Context-length bounds that get their own graphs: 1024, 2048, 4096, then x4, up to max_model_len
// (always included). 2048 is where the tensor-core decode attention takes a second split, and with
// it the step where a batch of 8 leaves the fused path (FusedDecode::separate_starves): a context
// of 1,025-2,048 tokens in a 4,096 graph would run the separate kernels at up to 1.4x the time.
// The bound is baked into a graph twice, as the block-table width (bytes copied per step) and as
// attention_decode's max_context_len (how it splits the context), so a short-context decode must
// not replay a graph made for the longest context.
std::vector<int> context_buckets(int max_model_len) {
  std::vector<int> buckets;
  for (int b = 1024; b < max_model_len; b *= b < 4096 ? 2 : 4) buckets.push_back(b);
  buckets.push_back(max_model_len);
  return buckets;
}

// Decode sizes that get a graph: 1, 2, 4, 8, 16, 24, 32, then every 16 up to max_num_seqs
// (which is always included).
std::vector<int> graph_sizes(int max_num_seqs) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4, 8, 16, 24, 32})
    if (s < max_num_seqs) sizes.push_back(s);
  for (int s = 48; s < max_num_seqs; s += 16) sizes.push_back(s);
  sizes.push_back(max_num_seqs);
  return sizes;
}

void GraphCache::capture(int max_num_seqs, int max_model_len, cudaStream_t st,
                         const std::function<void(int, int)>& stage, const std::function<void(int, int)>& record) {
  std::vector<int> sizes = graph_sizes(max_num_seqs);
  std::reverse(sizes.begin(), sizes.end());
  const std::vector<int> bounds = context_buckets(max_model_len);
  for (int bound : bounds) {
    for (int n : sizes) {
      stage(n, bound);
      if (bound == bounds.front()) {
        record(n, bound);
        CUDA_CHECK(cudaStreamSynchronize(st));
      }
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      try {
        record(n, bound);
      } catch (...) {
        cudaStreamEndCapture(st, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(st, &g));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t err = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      CUDA_CHECK(err);
      graphs_.emplace(std::make_pair(bound, n), CudaGraphExec(exec));
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
  log_info("captured ", graphs_.size(), " CUDA graphs: decode batch sizes up to ", max_num_seqs,
           " x context bounds up to ", bounds.back());
}

GraphCache::Hit GraphCache::find(int seqs, int max_context) const {
  auto it = graphs_.lower_bound({max_context, seqs});
  // Keys sort by bound, then size: skip the rest of a bound whose sizes are all too small.
  while (it != graphs_.end() && it->first.second < seqs) ++it;
  if (it == graphs_.end()) return {};
  return {it->second.get(), it->first.second, it->first.first};
}

}  // namespace nvllm::cuda_detail
