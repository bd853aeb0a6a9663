// A fatal signal's one line (moe/fatal_signal.h): what was running, then the signal's own ending.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "moe/fatal_signal.h"

namespace moe {
namespace {

TEST(FatalSignalContext, NamesTheNewestScopeAndClearsWhenItEnds) {
  EXPECT_EQ(current_fatal_signal_context(), "");
  {
    const FatalSignalContext c("GEMM row onednn: nt bfloat16->bfloat16 Kd=17 N=63");
    EXPECT_EQ(current_fatal_signal_context(), "GEMM row onednn: nt bfloat16->bfloat16 Kd=17 N=63");
  }
  EXPECT_EQ(current_fatal_signal_context(), "");
  const FatalSignalContext long_one(std::string(1000, 'x'));
  EXPECT_EQ(current_fatal_signal_context().size(), 255u) << "kept to the buffer, not past it";
}

TEST(FatalSignalDeathTest, AnIllegalInstructionNamesWhatRanAndEndsAsTheSignalWould) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_fatal_signal_report();
        const FatalSignalContext c("GEMM row onednn: nt bfloat16->bfloat16 Kd=17 N=63 E=6 rows<=128 parts=1");
        raise(SIGILL);
      },
      ::testing::KilledBySignal(SIGILL),
      "^moe-bench: fatal SIGILL \\(.*\\) while running GEMM row onednn: nt bfloat16->bfloat16 Kd=17 N=63 E=6 "
      "rows<=128 parts=1; --gemm-variant can name another variant");
  EXPECT_EXIT(
      {
        install_fatal_signal_report();
        raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV), "moe-bench: fatal SIGSEGV \\([^)]*\\)\n$");
}

// The table runs every row inside a context naming it: a row that faults (here the reference GEMM
// writing through a pointer to nothing) is named with the call's shape class; after a call, nothing is.
TEST(FatalSignalDeathTest, TheGemmTableNamesTheRowThatFaulted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KernelConfig k;
  k.gemm_variant = "ref";
  k.tuning_file = "none";
  GemmKernels table(k, nullptr);
  std::vector<float> a(3 * 4, 1.0f), b(4 * 5, 1.0f), out(3 * 5);  // a (3, 4), b (4, 5), out (3, 5)
  table.dense(out.data(), Dtype::f32, a.data(), Dtype::f32, b.data(), Dtype::f32, 3, 4, 5);
  EXPECT_EQ(current_fatal_signal_context(), "");
  EXPECT_EXIT(
      {
        install_fatal_signal_report();
        float* nowhere = reinterpret_cast<float*>(uintptr_t{64});
        table.dense(nowhere, Dtype::f32, a.data(), Dtype::f32, b.data(), Dtype::f32, 3, 4, 5);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "^moe-bench: fatal SIGSEGV \\(.*\\) while running GEMM row ref: dense float32->float32 Kd=4 N=5 R<=4;");
}

}  // namespace
}  // namespace moe
