// Before any test: a fatal signal names the GEMM row and shape that were running (moe/fatal_signal.h),
// as moe-bench's do, so a kernel dying on some CPU says which. And auto's tuning file (cpu/gemm/gemm.h) is
// the build's (MOE_TEST_CACHE_DIR), never the user's cache, whatever the shell says; the moe-bench runs the
// tests start inherit it. Set in a static initializer, since the tuning file is looked up lazily, at the
// first GEMM a table measures.
#include <cstdlib>
#include <string>

#include "moe/fatal_signal.h"

namespace {

const bool kFatalSignalReport = [] {
  moe::install_fatal_signal_report();
  return true;
}();

const bool kTestCache = [] {
  const std::string dir = MOE_TEST_CACHE_DIR;
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  setenv("MOE_TUNING_FILE", (dir + "/moe-bench/tuning.json").c_str(), 1);
  return true;
}();

}  // namespace
