#include "moe/python_repr.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace moe {

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form ("-1.25e-05"), then laid out as CPython's
  // float_repr does: decimal point position decpt = exponent + 1, fixed notation for -4 < decpt <= 16.
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific).ptr;
  std::string s(buf, end);
  std::string out = s[0] == '-' ? "-" : "";
  if (s[0] == '-') s.erase(0, 1);
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // the '.'
  const int decpt = exponent + 1, n = int(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return out + "0." + std::string(size_t(-decpt), '0') + digits;
    if (decpt >= n) return out + digits + std::string(size_t(decpt - n), '0') + ".0";
    return out + digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
  }
  out += digits[0];
  if (n > 1) out.append(".").append(digits, 1);
  const int mag = std::abs(exponent);
  return out.append(exponent < 0 ? "e-" : "e+").append(mag < 10 ? "0" : "").append(std::to_string(mag));
}

}  // namespace moe
