#include "runtime/cuda/step_io.h"

#include <cstring>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace nvllm::cuda_detail {

void StepIo::allocate(size_t staging_bytes, size_t out_bytes, int chain_seqs) {
  staging_dev_ = DeviceBuffer(staging_bytes);
  for (PinnedBuffer& h : staging_host_) h = PinnedBuffer(staging_bytes);
  for (PinnedBuffer& h : out_host_) h = PinnedBuffer(out_bytes);
  if (chain_seqs > 0) {
    host_tokens_ = PinnedBuffer(2 * sizeof(unsigned long long) * chain_seqs);
    std::memset(host_tokens_.get(), 0xff, host_tokens_.bytes());  // no position's word
  }
}

kernels::StepAdvance StepIo::advance(const StepLayout& l, int rows, int block_size) const {
  NVLLM_CHECK(rows <= host_rows() && rows <= l.seqs && l.tokens == l.seqs, "internal: advancing ", rows, " rows of ",
              l.seqs, " sequences (", l.tokens, " tokens), ", host_rows(), " with host words");
  std::byte* d = staging_dev_.as<std::byte>();
  return {reinterpret_cast<int32_t*>(d + l.token_ids),
          reinterpret_cast<int32_t*>(d + l.positions),
          reinterpret_cast<int32_t*>(d + l.slots),
          reinterpret_cast<int32_t*>(d + l.context_lens),
          reinterpret_cast<const int32_t*>(d + l.block_tables),
          block_size,
          l.width,
          host_tokens_.as<unsigned long long>()};
}

int32_t StepIo::host_token(int row, int32_t position) const {
  NVLLM_CHECK(row < host_rows(), "internal: no host word for row ", row);
  const uint32_t pos = static_cast<uint32_t>(position);
  const auto* words = reinterpret_cast<const volatile unsigned long long*>(host_tokens_.get());
  const unsigned long long word = words[2 * row + (pos & 1)];
  NVLLM_CHECK(word >> 32 == pos, "internal: the token of row ", row, " at position ", pos, " was not written");
  return static_cast<int32_t>(word & 0xffffffffu);
}

void StepIo::begin(int slot, size_t from, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaEventRecord(step_begin_[slot].get(), stream));
  copy_in(slot, from, bytes, stream);
}

void StepIo::copy_in(int slot, size_t from, size_t bytes, cudaStream_t stream) {
  if (from < bytes)
    CUDA_CHECK(cudaMemcpyAsync(staging_dev_.as<std::byte>() + from, staging_host_[slot].as<std::byte>() + from,
                               bytes - from, cudaMemcpyHostToDevice, stream));
}

void StepIo::end(int slot, const DeviceBuffer& out_dev, size_t bytes, cudaStream_t stream) {
  if (bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(out_host_[slot].get(), out_dev.get(), bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaEventRecord(step_end_[slot].get(), stream));
}

void StepIo::wait(int slot) {
  CUDA_CHECK(cudaEventSynchronize(step_end_[slot].get()));
  float device_ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&device_ms, step_begin_[slot].get(), step_end_[slot].get()));
  last_step_device_s_ = device_ms * 1e-3;
}

}  // namespace nvllm::cuda_detail
