#include "runtime/cuda/step_io.h"

#include "kernels/cuda_check.h"

namespace nvllm::cuda_detail {

void StepIo::allocate(size_t staging_bytes, size_t out_bytes) {
  staging_dev_ = DeviceBuffer(staging_bytes);
  for (PinnedBuffer& h : staging_host_) h = PinnedBuffer(staging_bytes);
  for (PinnedBuffer& h : out_host_) h = PinnedBuffer(out_bytes);
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

void StepIo::copy_tokens(size_t offset, const int32_t* tokens, int count, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(staging_dev_.as<std::byte>() + offset, tokens, sizeof(int32_t) * count,
                             cudaMemcpyDeviceToDevice, stream));
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
