// A dense row-major tensor that owns 64-byte aligned storage. Dtype is a runtime property so one
// block implementation serves float32 and bfloat16; kernels take raw pointers with shape comments.
// Index tensors (int32) use Buffer<int32_t> instead (see below): they never change dtype.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "moe/dtype.h"
#include "moe/status.h"

namespace moe {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

inline void* aligned_alloc_bytes(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  MOE_CHECK(p != nullptr, "out of memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

// A typed, aligned, uninitialised array (no per-element construction: these are hot-path scratch).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : size_(n), data_(static_cast<T*>(aligned_alloc_bytes(n * sizeof(T)))) {}
  Buffer(size_t n, T fill) : Buffer(n) {
    for (size_t i = 0; i < n; ++i) data_.get()[i] = fill;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }

 private:
  size_t size_ = 0;
  std::unique_ptr<T, AlignedFree> data_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Dtype dtype, std::vector<int64_t> shape);
  static Tensor zeros(Dtype dtype, std::vector<int64_t> shape);

  Dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(size_t(i)); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return size_t(numel_) * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }

  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }
  template <typename T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }

  // Element access through float, for tests, dumps and the reference (slow; never on the hot path).
  float get(int64_t i) const;
  void set(int64_t i, float v);
  std::vector<double> to_f64() const;
  void fill_zero();
  Tensor clone() const;
  // Same values converted to `dtype` (rounded to nearest even when narrowing).
  Tensor to(Dtype dtype) const;

  std::string shape_string() const;

 private:
  Dtype dtype_ = Dtype::f32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> storage_;
};

}  // namespace moe
