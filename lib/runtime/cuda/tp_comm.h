// TpComm: one tensor-parallel rank's NCCL communicator (one process, one thread and one GPU per
// rank), with the three collectives the sharded model needs: the sum of the row-parallel
// projections' partial outputs (bf16, in place), the gather of the vocabulary-parallel logits
// (fp32, in place), and the minimum of a number over the ranks (the KV blocks they all have room
// for). NCCL picks its transport; nothing here asks for NVLink multicast.
//
// Small sums (a decode step's hidden states: kilobytes, where NCCL's time is all latency) go
// instead through peer memory when every GPU can read the others' (kernels::peer_all_reduce:
// one kernel, which also does the add + RMSNorm that follows the row-parallel projections; the
// smallest by pushes into each peer's inbox, the rest by a flag barrier and reads).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_linear.h"

namespace nvllm::cuda_detail {

class TpComm {
 public:
  // One communicator per GPU first_device .. first_device + size - 1, rank r on the r-th
  // (ncclCommInitAll: one process holds them all). Throws nvllm::Error with NCCL's message.
  // `peer`: also set up the peer-memory sum where every pair of GPUs has peer access.
  // `push`: small peer sums by flagged pushes (kernels::PeerReduce::inbox) rather than the barrier.
  // `gemv_push`: projections on the gemv push their outputs themselves (pushes_from_gemv).
  // `trace`: CudaTuning::peer_trace (empty: off).
  static std::vector<std::unique_ptr<TpComm>> create(int first_device, int size, bool peer = true, bool push = true,
                                                     bool gemv_push = true, const std::string& trace = {});
  ~TpComm();  // ncclCommDestroy (and the trace's file); call with every rank's at once (each on its rank's thread)
  TpComm(const TpComm&) = delete;
  TpComm& operator=(const TpComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // x[0, count) = the sum of every rank's x (bf16, in place), enqueued on `stream`.
  void all_reduce_sum(__nv_bfloat16* x, size_t count, cudaStream_t stream);
  // x [tokens, hidden] = the sum of every rank's x; with `weight`, then kernels::add_rmsnorm's
  // residual step on it. Through peer memory where it fits (one kernel), else NCCL (and
  // add_rmsnorm). Every rank gets the same values either way.
  // `ahead`: the peer-memory sum's added blocks ask L2 for the next projection's weights
  // (kernels::L2Ahead); NCCL's path does not.
  void all_reduce_add_rmsnorm(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight, int tokens,
                              int hidden, float eps, cudaStream_t stream, kernels::L2Ahead ahead = {});
  // Whether a row-parallel projection of `tokens` rows on the gemv can push its outputs straight
  // into the ranks' inboxes (gemv_all_reduce_add_rmsnorm): pushed sums, the switch on.
  bool pushes_from_gemv(int tokens, int hidden) const;
  // x [tokens, hidden] = the sum over the ranks of in [tokens, k] . w [hidden, k]^T, then the residual
  // step as all_reduce_add_rmsnorm: the projection (kernels::gemv_push, or gemv_fp8_push for E4M3
  // codes and row scales) sends each row group to every rank as it finishes, and the sum
  // (kernels::peer_reduce_pushed) does not wait for its grid's end. The same bits as kernels::gemv
  // (gemv_fp8) then all_reduce_add_rmsnorm.
  void gemv_all_reduce_add_rmsnorm(const __nv_bfloat16* in, const DeviceLinear& w, __nv_bfloat16* x,
                                   __nv_bfloat16* residual, const __nv_bfloat16* weight, int tokens, int hidden, int k,
                                   float eps, cudaStream_t stream, kernels::L2Ahead ahead = {});
  // Whether sums of [tokens, hidden] go through peer memory.
  bool uses_peer(int tokens, int hidden) const;
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
  static void set_up_peer(std::vector<std::unique_ptr<TpComm>>& comms, int first_device, bool push);

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  bool aborted_ = false;
  bool gemv_push_ = false;
  DeviceBuffer scratch_;  // min_over_ranks' one int
  // The peer-memory sum (ranks == 0: not set up): this rank's staging, signals and epochs on its
  // GPU, and the host flag that abort() raises, shared by all ranks.
  kernels::PeerReduce peer_;
  DeviceBuffer staging_, signals_, epochs_, inbox_, push_epochs_;
  DeviceBuffer trace_;        // CudaTuning::peer_trace's stamps, written to trace_path_ at the end
  std::string trace_path_;
  void write_trace();
  std::shared_ptr<PinnedBuffer> abort_flag_;
};

}  // namespace nvllm::cuda_detail
