// TpComm: one tensor-parallel rank's NCCL communicator (one process, one thread and one GPU per
// rank), with the three collectives the sharded model needs: the sum of the row-parallel
// projections' partial outputs (bf16, in place), the gather of the vocabulary-parallel logits
// (fp32, in place), and the minimum of a number over the ranks (the KV blocks they all have room
// for). NCCL picks its transport; nothing here asks for NVLink multicast.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "runtime/cuda/device_buffer.h"

namespace nvllm::cuda_detail {

class TpComm {
 public:
  // One communicator per GPU first_device .. first_device + size - 1, rank r on the r-th
  // (ncclCommInitAll: one process holds them all). Throws nvllm::Error with NCCL's message.
  static std::vector<std::unique_ptr<TpComm>> create(int first_device, int size);
  ~TpComm();  // ncclCommDestroy; call with every rank's at once (each on its rank's thread)
  TpComm(const TpComm&) = delete;
  TpComm& operator=(const TpComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // x[0, count) = the sum of every rank's x (bf16, in place), enqueued on `stream`.
  void all_reduce_sum(__nv_bfloat16* x, size_t count, cudaStream_t stream);
  // buf[r * count, (r + 1) * count) = rank r's part, for every r; this rank's part is already at
  // its place (in place), enqueued on `stream`.
  void all_gather(float* buf, size_t count, cudaStream_t stream);
  // The smallest of every rank's `value`; blocks until all ranks have called it.
  int min_over_ranks(int value, cudaStream_t stream);
  // Makes NCCL calls of every rank return (a rank failed and the others would wait for it
  // forever); the communicator is unusable afterwards.
  void abort();

 private:
  TpComm(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  bool aborted_ = false;
  DeviceBuffer scratch_;  // min_over_ranks' one int
};

}  // namespace nvllm::cuda_detail
