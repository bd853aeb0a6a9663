// Tensors and the memory they live in.
//
// A Tensor is a dense row-major array with a runtime dtype and shape, owning (shared) 64-byte aligned
// storage in one MemorySpace: host memory, or a device's memory reached only through its backend.
// Copying a Tensor shares its storage (a handle, like a shared_ptr); clone() copies the bytes.
//  - raw() is the address in the tensor's own memory: what a backend's ops pass to their kernels.
//  - data<T>(), get(), set() and to_f64() read or write through the host; on device memory they are
//    an invariant failure (MOE_CHECK), so code that prints, checks or dumps must copy to the host
//    first, explicitly (to_host()).
// Allocation failure throws AllocationError (the size and the memory), which the CLI reports as one
// line and exit 2.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/dtype.h"
#include "moe/status.h"

namespace moe {

class AllocationError : public std::runtime_error {
 public:
  AllocationError(size_t bytes, const std::string& memory);
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
};

// What the tensors of one memory hold: now, at most since the last reset_peak(), and how many
// allocations were made so far (a timed call that allocates shows as a growing count).
struct MemoryUse {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;
};

// Where a tensor's bytes live. Copies and fills on a device are ordered on that device's stream;
// copy_to_host returns once the host bytes are valid.
class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  // Tensor storage only (what Tensor allocates here), not a library's private workspace.
  MemoryUse use() const;
  void reset_peak();
  // Called by Tensor around allocate() and deallocate().
  void note_allocated(size_t bytes);
  void note_freed(size_t bytes);

  virtual std::string name() const = 0;  // "host", "cuda:0"
  virtual bool host_accessible() const = 0;
  // nullptr when the memory cannot hold `bytes` more.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // both in this memory
  virtual void fill_zero(void* dst, size_t bytes) = 0;

 private:
  std::atomic<int64_t> live_bytes_{0}, peak_bytes_{0}, allocations_{0};
};

// Plain process memory (aligned_alloc), what the cpu and ref backends compute in.
MemorySpace& host_memory();

// 64-byte aligned host allocation for scratch; throws AllocationError. free_bytes gives it back.
void* aligned_alloc_bytes(size_t bytes);
void free_bytes(void* p);

struct AlignedFree {
  void operator()(void* p) const { free_bytes(p); }
};

// A typed, aligned, uninitialised host array (no per-element construction: these are hot-path scratch).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : size_(n), data_(static_cast<T*>(aligned_alloc_bytes(n * sizeof(T)))) {}
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  size_t size_ = 0;
  std::unique_ptr<T, AlignedFree> data_;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised, in host memory.
  Tensor(Dtype dtype, std::vector<int64_t> shape);
  // Uninitialised, in `memory` (which must outlive the storage: backends and host_memory() are static).
  Tensor(Dtype dtype, std::vector<int64_t> shape, MemorySpace& memory);

  Dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(size_t(i)); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return size_t(numel_) * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }
  MemorySpace& memory() const { return *memory_; }
  bool on_host() const { return memory_->host_accessible(); }
  // Whether two tensors share storage (a host copy of a host tensor does).
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }

  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }
  template <typename T>
  T* data() {
    MOE_CHECK(on_host(), "host access to a tensor in " + memory_->name() + " memory");
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    MOE_CHECK(on_host(), "host access to a tensor in " + memory_->name() + " memory");
    return static_cast<const T*>(raw());
  }

  // Element access through double, for tests, dumps and the reference ops (slow; never on a hot path).
  double get(int64_t i) const;
  void set(int64_t i, double v);  // rounds to the dtype (nearest even; integers saturate)
  std::vector<double> to_f64() const;
  void fill_zero();      // in any memory
  Tensor clone() const;  // same memory, new storage
  // Host tensors only: the same values in `dtype` (rounded to nearest even when narrowing).
  Tensor to(Dtype dtype) const;
  // The host's view: this tensor itself when it is host memory, else a copy.
  Tensor to_host() const;
  // This tensor in `memory`: itself when it is already there, else a copy.
  Tensor to_memory(MemorySpace& memory) const;
  // Copies the first n elements of `src` (same dtype, any memories) to the start of this tensor;
  // nothing when both share storage.
  void copy_from(const Tensor& src, int64_t n);
  void copy_from(const Tensor& src) { copy_from(src, src.numel()); }

  std::string shape_string() const;

 private:
  Dtype dtype_ = Dtype::f32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  MemorySpace* memory_ = &host_memory();
  std::shared_ptr<void> storage_;
};

}  // namespace moe
