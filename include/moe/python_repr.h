// Values printed the way Python prints them, for the lines and messages the seed harness (a Python
// script) prints with str()/repr(): a parser or a diff written against the seed must not notice.
#pragma once

#include <string>

namespace moe {

// repr(float): the shortest text that reads back to v, fixed notation for 1e-4 <= |v| < 1e16 with
// ".0" on whole numbers (0.0, 1.0, 1000000000000000.0), else exponent notation (1e-05, 1e+16,
// 1.5e+300); nan, inf, -inf.
std::string python_float(double v);

inline const char* python_bool(bool b) {
  return b ? "True" : "False";
}

}  // namespace moe
