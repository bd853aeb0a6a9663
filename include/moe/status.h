// Two tiers of errors (docs/design.md):
//  - Status: anything a user can cause (bad flag, bad shape, unsupported combination). The CLI prints
//    the message on one line and exits non-zero.
//  - MOE_CHECK: internal invariants. A failure is a bug: print file:line and abort.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace moe {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }
  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

// Returns early from a function that returns Status when `expr` failed.
#define MOE_RETURN_IF_ERROR(expr)         \
  do {                                    \
    ::moe::Status moe_status_ = (expr);   \
    if (!moe_status_) return moe_status_; \
  } while (0)

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "moe internal error at %s:%d: check `%s` failed: %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace moe

#define MOE_CHECK(cond, msg)                                            \
  do {                                                                  \
    if (!(cond)) ::moe::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
