// The card's own ceilings for bench's roofline, measured rather than looked up by name: the same
// two figures bench/NOTES.md has used for the H100 (device copy 3.03 TB/s, bf16 GEMM 854 TFLOP/s),
// taken on whatever card runs (an H200's HBM3e is 1.4x an H100's; an H100 PCIe's is 0.6x).
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gemm.h"
#include "runtime/device.h"

namespace nvllm {
namespace {

// The fastest of `reps` timed runs of `work` on `stream`, after `warmups` untimed ones, in
// seconds. A ceiling is what the card can do: a slower run is the clocks still ramping up from
// idle or another process's work, never the card's limit. The median of ten copies after one
// warm-up read 15% low in one of 24 bench runs on an H100 (bench/NOTES.md, twenty-second
// session): that report put a step at 99% of its bound where the same binary's rerun said 84%.
template <typename Work>
double fastest_seconds(cudaStream_t stream, int warmups, int reps, Work&& work) {
  CudaEvent start, stop;
  float best = 0;
  for (int i = 0; i < warmups + reps; ++i) {
    CUDA_CHECK(cudaEventRecord(start.get(), stream));
    work();
    CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start.get(), stop.get()));
    if (i >= warmups && (best == 0 || t < best)) best = t;
  }
  return best * 1e-3;
}

}  // namespace

GpuCeilings measure_gpu_ceilings(int index) {
  int previous = 0;
  CUDA_CHECK(cudaGetDevice(&previous));
  CUDA_CHECK(cudaSetDevice(index));
  GpuCeilings c;
  // The card idle first: bench measures after its run, and work the run left queued (a chained
  // decode step enqueued before the previous one was waited for) would share the card with the
  // measurement on another stream.
  CUDA_CHECK(cudaDeviceSynchronize());
  {
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // bf16 GEMM with fp32 accumulation, 8192^3 (1.1 TFLOP, about 1.3 ms on an H100), through the
    // runner's own cuBLASLt plan; four back to back a timed run so launch gaps do not count. First:
    // its ~35 ms of tensor-core work bring the clocks up for the copy after it.
    {
      constexpr int n = 8192;
      const size_t elems = size_t{n} * n;
      DeviceBuffer x(elems * 2), w(elems * 2), y(elems * 2);
      CUDA_CHECK(cudaMemsetAsync(x.get(), 0, elems * 2, stream));
      CUDA_CHECK(cudaMemsetAsync(w.get(), 0, elems * 2, stream));
      Gemm gemm;
      const auto* xp = static_cast<const __nv_bfloat16*>(x.get());
      const auto* wp = static_cast<const __nv_bfloat16*>(w.get());
      const double s = fastest_seconds(stream, 2, 5, [&] {
        for (int i = 0; i < 4; ++i) gemm.matmul(xp, wp, y.get(), n, n, n, /*out_f32=*/false, stream);
      });
      c.bf16_flops = 4 * 2.0 * n * n * double(n) / s;
    }
    // Copy: 256 MiB, five times the largest L2 (50 MB), read + write counted, as a plain
    // cudaMemcpyAsync (an SM copy kernel; a copy captured in a graph may go to a slower engine).
    // The fastest of 100 after 10 (~20 ms of copies on an H100): the fastest of 20 after 5 (~5 ms)
    // read 5% and 16% low in 2 of 22 bench runs on an H100 (bench/NOTES.md, thirty-fourth
    // session; both runs of one experimental binary, cause not found). The wider window is a
    // precaution against a slow spell outlasting the narrow one.
    {
      const size_t bytes = size_t{256} << 20;
      DeviceBuffer a(bytes), b(bytes);
      CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, stream));
      const double s = fastest_seconds(stream, 10, 100, [&] {
        CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream));
      });
      c.copy_bytes_per_s = 2.0 * bytes / s;
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
  CUDA_CHECK(cudaSetDevice(previous));
  return c;
}

}  // namespace nvllm
