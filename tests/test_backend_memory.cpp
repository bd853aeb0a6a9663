// The memory half of every registered backend's table: allocate, fill, copy host -> device ->
// device -> host, synchronize; and host access to device memory is an invariant failure (a death
// test), so nothing reads a device tensor without copying it to the host first.
#include <gtest/gtest.h>

#include <cstring>

#include "moe/backend.h"
#include "moe/rng.h"
#include "test_util.h"

namespace moe {
namespace {

class MemoryOfBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (Status s = be().available(); !s) GTEST_SKIP() << s.message();
  }
  Backend& be() { return testing::test_backend(GetParam()); }
};

TEST_P(MemoryOfBackend, RoundTripFillAndCopy) {
  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f64, Dtype::s8, Dtype::s32, Dtype::s64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor host(dt, {3, 37});
    for (int64_t i = 0; i < host.numel(); ++i)
      host.set(i, is_float(dt) ? random_normal(11, uint64_t(i)) : double(i % 100));
    const std::vector<double> want = host.to_f64();
    Tensor dev = be().to_device(host);  // on a host backend: the same storage
    EXPECT_EQ(dev.memory().name(), be().memory().name());
    Tensor dev_copy = dev.clone();  // device to device
    dev.fill_zero();
    be().synchronize();
    EXPECT_EQ(dev_copy.to_host().to_f64(), want);
    const Tensor zeros = dev.to_host();
    for (int64_t i = 0; i < zeros.numel(); ++i) ASSERT_EQ(zeros.get(i), 0.0) << i;
    Tensor partial = be().empty(dt, {3, 37});
    partial.fill_zero();
    partial.copy_from(dev_copy, 40);  // a prefix only
    const Tensor back = partial.to_host();
    for (int64_t i = 0; i < back.numel(); ++i) ASSERT_EQ(back.get(i), i < 40 ? want[size_t(i)] : 0.0) << i;
  }
  Tensor empty = be().empty(Dtype::f32, {0, 5});
  EXPECT_EQ(empty.to_host().numel(), 0);
}

// Rows report tensor bytes live, their peak and allocations made while timing (issue 21's memory
// report): every tensor's storage is counted when made and when its last handle goes.
TEST_P(MemoryOfBackend, TensorBytesAreCountedWhileTheyLive) {
  MemorySpace& memory = be().memory();
  memory.reset_peak();
  const MemoryUse start = memory.use();
  {
    Tensor a = be().empty(Dtype::f32, {1000});
    Tensor shared = a;  // a handle, not an allocation
    const MemoryUse held = memory.use();
    EXPECT_EQ(held.live_bytes - start.live_bytes, 4000);
    EXPECT_EQ(held.allocations - start.allocations, 1);
    { Tensor b = be().empty(Dtype::bf16, {500}); }
    EXPECT_EQ(memory.use().live_bytes, held.live_bytes);
    EXPECT_EQ(memory.use().peak_bytes - start.live_bytes, 5000);
  }
  const MemoryUse end = memory.use();
  EXPECT_EQ(end.live_bytes, start.live_bytes);
  EXPECT_EQ(end.allocations - start.allocations, 2);
  memory.reset_peak();
  EXPECT_EQ(memory.use().peak_bytes, start.live_bytes);
}

TEST_P(MemoryOfBackend, HostAccessToDeviceMemoryIsAnInvariantFailure) {
  Tensor dev = be().empty(Dtype::f32, {4});
  if (dev.on_host()) {
    EXPECT_NO_FATAL_FAILURE(dev.data<float>()[0] = 1.0f);
    return;
  }
  // The child re-runs this test from exec: forking a process with a live CUDA context is not safe.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(dev.data<float>()[0] = 1.0f, "host access to a tensor in .* memory");
  EXPECT_DEATH((void)dev.get(0), "host access to a tensor in .* memory");
}

TEST(Allocation, TooLargeIsAnAllocationErrorWithTheSize) {
  try {
    Tensor t(Dtype::f32, {int64_t(1) << 46});  // 256 TiB
    FAIL() << "allocated 256 TiB";
  } catch (const AllocationError& e) {
    EXPECT_EQ(e.bytes(), size_t(1) << 48);
    EXPECT_NE(std::string(e.what()).find("281474976710656 bytes"), std::string::npos) << e.what();
  }
}

// Large host blocks are cached when freed (a run's buffers serve the next run, so the kernel never
// reclaims them between runs): the next allocation of about the same size takes a freed block, a live
// block is never handed out twice, and a request never gets a block smaller than itself or one more
// than 5/4 its size.
TEST(Allocation, AFreedLargeBlockServesTheNextAllocationOfAboutItsSize) {
  MemorySpace& host = host_memory();
  constexpr size_t kMiB = size_t(1) << 20;
  void* a = host.allocate(38 * kMiB);
  host.deallocate(a);
  void* b = host.allocate(34 * kMiB);
  EXPECT_EQ(b, a);
  void* c = host.allocate(38 * kMiB);
  EXPECT_NE(c, a);
  std::memset(b, 1, 34 * kMiB);
  std::memset(c, 2, 38 * kMiB);
  EXPECT_EQ(static_cast<unsigned char*>(b)[34 * kMiB - 1], 1);
  host.deallocate(b);
  void* small = host.allocate(22 * kMiB);  // a (38 MiB) is more than 5/4 of it
  EXPECT_NE(small, a);
  void* large = host.allocate(40 * kMiB);  // a is smaller
  EXPECT_NE(large, a);
  std::memset(large, 3, 40 * kMiB);
  for (void* p : {c, small, large}) host.deallocate(p);
}

INSTANTIATE_TEST_SUITE_P(Backends, MemoryOfBackend, ::testing::ValuesIn(testing::backend_names()),
                         testing::param_name);

}  // namespace
}  // namespace moe
