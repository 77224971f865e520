// HostTensor: an owned, contiguous, row-major block of host memory with a dtype and a shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"

namespace nvllm {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape)
      : dtype_(dtype), shape_(std::move(shape)), bytes_(product(shape_) * dtype_size(dtype_)),
        data_(std::make_unique_for_overwrite<std::byte[]>(bytes_)) {}

  // A deep copy (the class itself only moves, so that no large copy happens by accident).
  HostTensor clone() const {
    if (empty()) return {};
    HostTensor out(dtype_, shape_);
    std::memcpy(out.data(), data(), bytes_);
    return out;
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return shape_.empty() && !data_ ? 0 : n;
  }
  size_t nbytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  // Typed views; the caller knows the dtype (F32 for float, BF16/F16 for uint16_t).
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data_.get()); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_.get()); }
  std::span<float> f32() { return {as<float>(), static_cast<size_t>(numel())}; }
  std::span<const float> f32() const { return {as<float>(), static_cast<size_t>(numel())}; }

 private:
  static size_t product(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }

  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte[]> data_;
};

}  // namespace nvllm
