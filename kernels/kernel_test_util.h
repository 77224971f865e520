// Shared pieces of the kernel tests: seeded random bf16 inputs, an RAII device buffer that can
// be poisoned (0xFF bytes: every bf16 / fp32 element reads as NaN, so an element the kernel
// never writes fails the comparison), the device's SM count, the relative error ||out - ref|| / ||ref||, a
// fused kernel's bits against its unfused reference (count_bits), and the timing cases' graph
// replay (graph_median_us).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cuda_check.h"

namespace nvllm::kernels::test {

using bf16 = __nv_bfloat16;

// The current device's SM count (launch rules that follow it are tested at their switch).
inline int sm_count() { return device_attribute(cudaDevAttrMultiProcessorCount); }

inline float to_f(bf16 x) { return __bfloat162float(x); }
inline bf16 to_bf(float x) { return __float2bfloat16(x); }
inline float round_bf(float x) { return to_f(to_bf(x)); }

// n values drawn uniformly from [lo, hi], rounded to bf16.
inline std::vector<bf16> random_bf16(std::mt19937& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<bf16> v(n);
  for (auto& x : v) x = to_bf(dist(rng));
  return v;
}

inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = to_f(v[i]);
  return f;
}

// A device allocation of n elements of T, freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&ptr_, bytes() ? bytes() : 1)); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  void poison() { CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes())); }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

inline float to_f(float x) { return x; }

// ||out - ref|| / ||ref|| in double, for bf16 or fp32 outputs; NaN (an unwritten, poisoned
// element) makes it NaN, and NaN < tolerance is false, so the check fails.
template <typename T>
double rel_error(const std::vector<T>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = double(to_f(out[i])) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

// Tolerance for bf16 outputs: one bf16 rounding is a relative 2^-9 ~ 2e-3 per element, and the
// kernels accumulate in fp32, so a correct kernel lands well under 1e-2.
constexpr double kBf16Tolerance = 1e-2;

// The gemv tests' bound: every element within one bf16 rounding of the reference (half an ulp:
// 2^-8 relative) plus 1e-4 of the outputs' RMS for the fp32 sums (and gemv_fp8's block scale,
// applied before the FMAs): a lost or doubled chunk of K, a row or sequence mixed up, or an
// element never written (NaN) all fail. Returns the number of elements outside.
template <typename T>
int outside_bf16(const std::vector<T>& y, const std::vector<double>& ref) {
  double ss = 0;
  for (double v : ref) ss += v * v;
  const double rms = std::sqrt(ss / double(ref.size()));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(to_f(y[i])) - ref[i]);
    if (!(d <= std::ldexp(std::fabs(ref[i]), -8) * 1.001 + 1e-4 * rms)) ++bad;
  }
  return bad;
}

// A fused kernel against its unfused reference, bit for bit: `out` (poisoned, NaN everywhere)
// holds the kernel's outputs over ref.size() elements and a margin past them. Counts the
// elements that differ from ref (NaN: never written) and those written past ref.
struct BitsCount {
  int differ = 0, past = 0;
};
inline BitsCount count_bits(const std::vector<bf16>& out, const std::vector<bf16>& ref) {
  BitsCount c;
  for (size_t i = 0; i < ref.size(); ++i) c.differ += !(to_f(out[i]) == to_f(ref[i]));
  for (size_t i = ref.size(); i < out.size(); ++i) c.past += !std::isnan(to_f(out[i]));
  return c;
}

// Timing cases: the median of 20 replays, after 2 untimed ones, of a CUDA graph holding
// `record`'s launches on stream `s`, in microseconds.
inline double graph_median_us(cudaStream_t s, const std::function<void()>& record) {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  record();
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_CHECK(cudaGraphDestroy(g));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 22; ++i) {
    CUDA_CHECK(cudaEventRecord(e0, s));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 2) ms.push_back(t);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

}  // namespace nvllm::kernels::test
