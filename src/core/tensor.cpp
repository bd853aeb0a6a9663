#include "moe/tensor.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

namespace moe {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugePageMinBytes = size_t(4) << 20;

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(0);
}

// Large blocks are kept when freed and handed to the next allocation that fits them, instead of going
// back to the kernel between runs. On a VM with free page reporting (KVM/firecracker guests, such as
// the 2-core machines this project is measured on), the guest reports memory freed at the end of one run (and
// by the dense ceiling's buffers) to the hypervisor about 2 s later: that work runs on one of the run's own
// vCPUs during the next run's timed calls (one call in three 30-60 % slow in sweeps; docs/kernels.md), and
// the hypervisor faults the pages in again. A process-level cache is what every framework's allocator
// does; it never changes what a timed call computes. It holds at most half the machine's memory
// beside what is live: a miss that would pass that frees cached blocks first.
class LargeBlocks {
 public:
  explicit LargeBlocks(size_t limit) : limit_(limit) {}
  ~LargeBlocks() {
    for (auto& [size, p] : cached_) std::free(p);
  }

  // A block of at least `bytes` (a multiple of kHugePage) and at most 5/4 of it, or nullptr.
  void* allocate(size_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = cached_.lower_bound(bytes);
    if (it != cached_.end() && it->first <= bytes + bytes / 4) {
      void* p = it->second;
      live_[p] = it->first;
      live_bytes_ += it->first;
      cached_bytes_ -= it->first;
      cached_.erase(it);
      return p;
    }
    release_largest_while([&] { return live_bytes_ + cached_bytes_ + bytes > limit_; });
    void* p = std::aligned_alloc(kHugePage, bytes);
    if (!p && !cached_.empty()) {
      release_largest_while([] { return true; });
      p = std::aligned_alloc(kHugePage, bytes);
    }
    if (!p) return nullptr;
    // Weights and activation buffers are read with strides (a GEMM's b rows, kilobytes apart): on
    // 4 KiB pages every row is a TLB miss. Where transparent huge pages are opt-in (madvise), ask
    // for them; elsewhere the advice is a no-op and failure is harmless.
    madvise(p, bytes, MADV_HUGEPAGE);
    live_[p] = bytes;
    live_bytes_ += bytes;
    return p;
  }

  // Takes `p` into the cache if it is one of ours; false (nothing done) otherwise.
  bool deallocate(void* p) {
    std::lock_guard lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    cached_.emplace(it->second, p);
    cached_bytes_ += it->second;
    live_bytes_ -= it->second;
    live_.erase(it);
    return true;
  }

 private:
  template <typename Pred>
  void release_largest_while(Pred keep_going) {
    while (!cached_.empty() && keep_going()) {
      auto last = std::prev(cached_.end());
      std::free(last->second);
      cached_bytes_ -= last->first;
      cached_.erase(last);
    }
  }

  const size_t limit_;
  std::mutex mutex_;
  std::multimap<size_t, void*> cached_;  // size -> block
  std::unordered_map<void*, size_t> live_;
  size_t live_bytes_ = 0, cached_bytes_ = 0;
};

class HostMemory final : public MemorySpace {
 public:
  std::string name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  void* allocate(size_t bytes) override {
    if (bytes >= kHugePageMinBytes) return large_.allocate((bytes + kHugePage - 1) / kHugePage * kHugePage);
    const size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  void deallocate(void* p) override {
    if (!large_.deallocate(p)) std::free(p);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }

 private:
  LargeBlocks large_{physical_memory_bytes() / 2};
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

void free_bytes(void* p) {
  host_memory().deallocate(p);
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
  memory.note_allocated(bytes());
  storage_ = std::shared_ptr<void>(p, [space = &memory, n = bytes()](void* q) {
    space->deallocate(q);
    space->note_freed(n);
  });
}

MemoryUse MemorySpace::use() const {
  return {live_bytes_.load(), peak_bytes_.load(), allocations_.load()};
}

void MemorySpace::reset_peak() {
  peak_bytes_.store(live_bytes_.load());
}

void MemorySpace::note_allocated(size_t bytes) {
  const int64_t live = live_bytes_.fetch_add(int64_t(bytes)) + int64_t(bytes);
  allocations_.fetch_add(1);
  int64_t peak = peak_bytes_.load();
  while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live)) {
  }
}

void MemorySpace::note_freed(size_t bytes) {
  live_bytes_.fetch_sub(int64_t(bytes));
}

double Tensor::get(int64_t i) const {
  switch (dtype_) {
    case Dtype::f32:
      return data<float>()[i];
    case Dtype::bf16:
      return bf16_to_f32(data<bf16_t>()[i]);
    case Dtype::f16:
      return f16_to_f32(data<f16_t>()[i]);
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
    case Dtype::f16:
      data<f16_t>()[i] = f32_to_f16(float(v));
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
