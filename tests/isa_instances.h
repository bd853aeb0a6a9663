// Tests of code compiled once per ISA level (cpu/gemm/isa_pick.h: swiglu_isa.h, quantize_isa.h): each
// instance is a parameter, run where this CPU reaches its level and SKIPPED with the reason elsewhere.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "moe/cpu_isa.h"

namespace moe::testing {

template <typename Passes>
struct IsaInstance {
  const char* name;
  IsaLevel level;
  Passes (*passes)();
};

// The fixture's instance, or a skip where this CPU does not reach its level.
template <typename Passes>
class IsaInstanceTest : public ::testing::TestWithParam<IsaInstance<Passes>> {
 protected:
  void SetUp() override {
    const IsaInstance<Passes>& i = this->GetParam();
    if (isa_level() < i.level)
      GTEST_SKIP() << i.name << ": this CPU's ISA level is " << isa_level_name(isa_level());
    passes_ = i.passes();
  }
  Passes passes_{};
};

// The three instances of isa_pick.h's levels.
template <typename Passes>
std::array<IsaInstance<Passes>, 3> isa_instances(Passes (*baseline)(), Passes (*avx2)(),
                                                 Passes (*avx512_bf16)()) {
  return {{{"baseline", IsaLevel::baseline, baseline},
           {"avx2", IsaLevel::avx2, avx2},
           {"avx512_bf16", IsaLevel::avx512_bf16, avx512_bf16}}};
}

template <typename Passes>
std::string isa_instance_name(const ::testing::TestParamInfo<IsaInstance<Passes>>& info) {
  return info.param.name;
}

}  // namespace moe::testing
