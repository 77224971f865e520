// RAII owners of device memory, pinned host memory, streams and graphs, so that no naked
// cudaFree / cudaFreeHost appears in the runner.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.h"

namespace nvllm {

// Where a CudaBuffer's bytes live: device memory, or page-locked host memory (the only kind an
// async copy overlaps with the GPU from).
struct DeviceMemory {
  static void* allocate(size_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) out_of_memory(bytes);
    CUDA_CHECK(err);
    return p;
  }
  // One message a person can act on, at start-up (weights, KV cache, activations) or mid-run
  // (a buffer that grows): what was asked for, what is free, and which flags shrink it.
  [[noreturn]] static void out_of_memory(size_t bytes) {
    (void)cudaGetLastError();  // clear the error so that the query below works
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    ::nvllm::fail("GPU out of memory: ", bytes >> 20, " MiB needed, ", free_bytes >> 20, " MiB free of ",
                  total_bytes >> 20, " MiB. The KV cache takes --gpu-memory-utilization of the GPU after the "
                  "weights: lower it if other processes share the GPU; activations grow with --max-num-seqs and "
                  "--max-num-batched-tokens, the smallest cache with --max-model-len: lower those; or the weights "
                  "alone do not fit this GPU");
  }
  static void release(void* p) { cudaFree(p); }
};
struct PinnedMemory {
  static void* allocate(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  static void release(void* p) { cudaFreeHost(p); }
};

// One allocation of `Memory`; moves, never copies. Zero bytes owns nothing.
template <typename Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t bytes) : ptr_(bytes > 0 ? Memory::allocate(bytes) : nullptr), bytes_(bytes) {}
  ~CudaBuffer() { reset(); }
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void reset() {
    if (ptr_) Memory::release(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<DeviceMemory>;
using PinnedBuffer = CudaBuffer<PinnedMemory>;

class CudaStream {
 public:
  CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A CUDA event for timing (cudaEventDefault: it records time).
class CudaEvent {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() {
    if (event_) cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// An instantiated CUDA graph (the executable form; the captured template is dropped at once).
class CudaGraphExec {
 public:
  CudaGraphExec() = default;
  explicit CudaGraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  ~CudaGraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  CudaGraphExec(CudaGraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  CudaGraphExec& operator=(CudaGraphExec&& o) noexcept {
    if (this != &o) {
      if (exec_) cudaGraphExecDestroy(exec_);
      exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
  }
  CudaGraphExec(const CudaGraphExec&) = delete;
  CudaGraphExec& operator=(const CudaGraphExec&) = delete;
  cudaGraphExec_t get() const { return exec_; }
  explicit operator bool() const { return exec_ != nullptr; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace nvllm
