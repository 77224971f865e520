// StepIo: the host/device traffic of a step. Two slots (a step and the chained one after it may
// be in flight together), each with its pinned staging of packed inputs, its pinned copy of the
// sampler's outputs and the events that time it; one device staging that every slot's inputs go
// to (a chained step's inputs are written there only after the step before has read its own).
// With chaining, the greedy tokens of a graph step come back without a copy: the kernel that
// picks them writes them into mapped host memory and advances the staging's inputs
// (kernels/step_advance.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/step_advance.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/step_inputs.h"

namespace nvllm::cuda_detail {

// Device addresses of one step's inputs (inside the device staging) and its shape.
struct ForwardStep {
  std::byte* staging = nullptr;
  StepLayout layout;
  int max_query_len = 0, max_context_len = 0;
  bool decode = false;
  bool gather = true;   // sample rows are gathered before the final norm (eager steps)
  int decode_seqs = 0;  // leading sequences with one query token: decode attention in a mixed step
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(staging + offset);
  }
};

class StepIo {
 public:
  // `chain_seqs`: the sequences whose tokens may come back through mapped memory (0: none).
  void allocate(size_t staging_bytes, size_t out_bytes, int chain_seqs);
  ForwardStep step(const StepLayout& layout, int max_query_len, int max_context_len, bool decode, bool gather,
                   int decode_seqs) const {
    return {staging_dev_.as<std::byte>(), layout, max_query_len, max_context_len, decode, gather, decode_seqs};
  }
  // The device address of a packed input.
  template <typename T>
  const T* device(size_t offset) const {
    return reinterpret_cast<const T*>(staging_dev_.as<std::byte>() + offset);
  }
  PinnedBuffer& host_staging(int slot) { return staging_host_[slot]; }
  const PinnedBuffer& host_staging(int slot) const { return staging_host_[slot]; }
  const std::byte* host_out(int slot) const { return out_host_[slot].as<std::byte>(); }
  // Copies the slot's packed inputs [from, bytes) to the device staging.
  void copy_in(int slot, size_t from, size_t bytes, cudaStream_t stream);
  // Records the slot's begin event, then copy_in.
  void begin(int slot, size_t from, size_t bytes, cudaStream_t stream);
  // The advance of the first `rows` rows of a step laid out as `layout` in the device staging
  // (rows of a decode step: one token a sequence), with the tokens to mapped host memory.
  kernels::StepAdvance advance(const StepLayout& layout, int rows, int block_size) const;
  // Row `row`'s token, written by the advance of the step at `position`; throws if it is not there.
  int32_t host_token(int row, int32_t position) const;
  // Copies `bytes` of the sampler's outputs back and records the slot's end event.
  void end(int slot, const DeviceBuffer& out_dev, size_t bytes, cudaStream_t stream);
  // Waits for the slot's end event; its device time becomes last_step_device_seconds().
  void wait(int slot);
  double last_step_device_seconds() const { return last_step_device_s_; }

 private:
  // The sequences with host words.
  int host_rows() const { return static_cast<int>(host_tokens_.bytes() / (2 * sizeof(unsigned long long))); }

  DeviceBuffer staging_dev_;
  PinnedBuffer staging_host_[2];
  PinnedBuffer out_host_[2];
  PinnedBuffer host_tokens_;  // 2 words a sequence (kernels::StepAdvance::host_token)
  CudaEvent step_begin_[2], step_end_[2];
  double last_step_device_s_ = 0;
};

}  // namespace nvllm::cuda_detail
