#include "moe/tensor.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace moe {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugePageMinBytes = size_t(4) << 20;

class HostMemory final : public MemorySpace {
 public:
  std::string name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  void* allocate(size_t bytes) override {
    if (bytes >= kHugePageMinBytes) {
      // Weights and activation buffers are read with strides (a GEMM's b rows, kilobytes apart):
      // on 4 KiB pages every row is a TLB miss. Where transparent huge pages are opt-in (madvise),
      // ask for them; elsewhere the advice is a no-op and failure is harmless.
      const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
      void* p = std::aligned_alloc(kHugePage, rounded);
      if (p) madvise(p, rounded, MADV_HUGEPAGE);
      return p;
    }
    const size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  void deallocate(void* p) override { std::free(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
};

template <typename I>
I saturate(double v) {
  if (std::isnan(v)) return 0;
  const double lo = double(std::numeric_limits<I>::min()), hi = double(std::numeric_limits<I>::max());
  return I(std::llround(std::clamp(v, lo, hi)));
}

}  // namespace

AllocationError::AllocationError(size_t bytes, const std::string& memory)
    : std::runtime_error(fmt::format("cannot allocate {} bytes ({:.2f} GiB) of {} memory", bytes,
                                     double(bytes) / 1073741824.0, memory)),
      bytes_(bytes) {}

MemorySpace& host_memory() {
  static HostMemory memory;
  return memory;
}

void* aligned_alloc_bytes(size_t bytes) {
  void* p = host_memory().allocate(bytes);
  if (!p) throw AllocationError(bytes, "host");
  return p;
}

Tensor::Tensor(Dtype dtype, std::vector<int64_t> shape) : Tensor(dtype, std::move(shape), host_memory()) {}

Tensor::Tensor(Dtype dtype, std::vector<int64_t> shape, MemorySpace& memory)
    : dtype_(dtype), shape_(std::move(shape)), memory_(&memory) {
  numel_ = 1;
  for (int64_t d : shape_) {
    MOE_CHECK(d >= 0, "negative tensor dimension");
    numel_ *= d;
  }
  void* p = memory.allocate(bytes());
  if (!p) throw AllocationError(bytes(), memory.name());
  storage_ = std::shared_ptr<void>(p, [space = &memory](void* q) { space->deallocate(q); });
}

double Tensor::get(int64_t i) const {
  switch (dtype_) {
    case Dtype::f32:
      return data<float>()[i];
    case Dtype::bf16:
      return bf16_to_f32(data<bf16_t>()[i]);
    case Dtype::f64:
      return data<double>()[i];
    case Dtype::s8:
      return data<int8_t>()[i];
    case Dtype::s32:
      return data<int32_t>()[i];
    case Dtype::s64:
      return double(data<int64_t>()[i]);
  }
  MOE_CHECK(false, "unknown dtype");
}

void Tensor::set(int64_t i, double v) {
  switch (dtype_) {
    case Dtype::f32:
      data<float>()[i] = float(v);
      return;
    case Dtype::bf16:
      data<bf16_t>()[i] = f32_to_bf16(float(v));
      return;
    case Dtype::f64:
      data<double>()[i] = v;
      return;
    case Dtype::s8:
      data<int8_t>()[i] = saturate<int8_t>(v);
      return;
    case Dtype::s32:
      data<int32_t>()[i] = saturate<int32_t>(v);
      return;
    case Dtype::s64:
      data<int64_t>()[i] = saturate<int64_t>(v);
      return;
  }
  MOE_CHECK(false, "unknown dtype");
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[size_t(i)] = get(i);
  return out;
}

void Tensor::fill_zero() {
  memory_->fill_zero(raw(), bytes());
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_, *memory_);
  memory_->copy(t.raw(), raw(), bytes());
  return t;
}

Tensor Tensor::to(Dtype dtype) const {
  if (dtype == dtype_) return clone();
  Tensor t(dtype, shape_);
  for (int64_t i = 0; i < numel_; ++i) t.set(i, get(i));
  return t;
}

Tensor Tensor::to_host() const {
  return to_memory(host_memory());
}

Tensor Tensor::to_memory(MemorySpace& memory) const {
  // Host-accessible memory is one address space: a host tensor is already where the host reads.
  if (&memory == memory_ || (memory.host_accessible() && on_host())) return *this;
  Tensor t(dtype_, shape_, memory);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src, int64_t n) {
  MOE_CHECK(src.dtype_ == dtype_ && n >= 0 && n <= numel_ && n <= src.numel_,
            "copy_from: dtype differs or more elements than a tensor holds");
  const size_t bytes = size_t(n) * dtype_size(dtype_);
  if (bytes == 0 || same_storage(src)) return;
  if (src.on_host())
    memory_->copy_from_host(raw(), src.raw(), bytes);
  else if (on_host())
    src.memory_->copy_to_host(raw(), src.raw(), bytes);
  else {
    MOE_CHECK(src.memory_ == memory_, "copy_from: device to another device is not supported");
    memory_->copy(raw(), src.raw(), bytes);
  }
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + ")";
}

}  // namespace moe
