// kernel_trace: every kernel's start and end on the GPU, CUDA-graph nodes included, for a machine
// whose Nsight Systems cannot run (bench/NOTES.md, thirty-second session). A CUDA injection
// library: the driver loads it into any CUDA program through CUDA_INJECTION64_PATH and calls
// InitializeInjection() before the first CUDA call; it turns on CUPTI's concurrent-kernel
// activity records (which do not serialise kernels) and writes them when the program exits.
//
// Build (no GPU needed):
//   g++ -O2 -std=c++20 -shared -fPIC -o libkernel_trace.so bench/tools/kernel_trace.cpp \
//       -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcupti
// Run:
//   CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so KERNEL_TRACE_OUT=trace.csv nvllm bench latency ...
//   python3 scripts/kernel_trace.py trace.csv
// Output: one line a kernel, "start_ns,end_ns,device,stream,graph_node,grid,block,name" (times
// from CUPTI's clock, names mangled), in the order CUPTI delivers them (not sorted). A tensor-
// parallel run's ranks are told apart by the device.
//
// This is a measuring tool; nvllm itself never loads it (the environment variables are read by
// the driver and by this library, not by nvllm).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = 8 << 20;
std::FILE* out = nullptr;
std::mutex out_mutex;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(out_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (out != nullptr)
      std::fprintf(out, "%llu,%llu,%u,%u,%llu,%d,%d,%s\n", static_cast<unsigned long long>(k->start),
                   static_cast<unsigned long long>(k->end), k->deviceId, k->streamId,
                   static_cast<unsigned long long>(k->graphNodeId), k->gridX * k->gridY * k->gridZ,
                   k->blockX * k->blockY * k->blockZ, k->name != nullptr ? k->name : "?");
  }
  std::free(buffer);
}

void at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out != nullptr) std::fclose(out);
  out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  out = std::fopen(path != nullptr ? path : "kernel_trace.csv", "w");
  if (out == nullptr) return 0;
  std::fprintf(out, "start_ns,end_ns,device,stream,graph_node,grid,block,name\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI refused the kernel activity records\n");
    return 0;
  }
  std::atexit(at_exit);
  return 1;
}
