// GraphCache: the CUDA graphs of decode steps, one per (context bound, padded batch size)
// (buckets as in mini-sglang's GraphRunner): captured once at start-up, found per step, replayed.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "runtime/cuda/device_buffer.h"

namespace nvllm::cuda_detail {

// Context-length bounds that get their own graphs, and the decode batch sizes that do.
std::vector<int> context_buckets(int max_model_len);
std::vector<int> graph_sizes(int max_num_seqs);

class GraphCache {
 public:
  // A graph for a step: its padded size and the context bound it was captured for.
  struct Hit {
    cudaGraphExec_t exec = nullptr;
    int size = 0, bound = 0;
    explicit operator bool() const { return exec != nullptr; }
  };
  // One graph per (bound, size): stage(size, bound) copies a padded decode step's inputs in,
  // outside the capture; record(size, bound) enqueues that step's kernels. Each size is first
  // recorded eagerly at the smallest bound (cuBLASLt picks its algorithm outside capture).
  void capture(int max_num_seqs, int max_model_len, cudaStream_t stream, const std::function<void(int, int)>& stage,
               const std::function<void(int, int)>& record);
  // The graph for a decode step of `seqs` sequences whose longest context is `max_context`, or none.
  Hit find(int seqs, int max_context) const;
  bool empty() const { return graphs_.empty(); }

 private:
  std::map<std::pair<int, int>, CudaGraphExec> graphs_;  // (context bound, padded size) -> graph
};

}  // namespace nvllm::cuda_detail
