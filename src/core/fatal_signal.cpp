#include "moe/fatal_signal.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

namespace moe {
namespace {

// Relaxed atomics: the handler may read while a scope writes (a torn text at worst, no data race).
constexpr size_t kContextBytes = 256;
std::atomic<char> context_text[kContextBytes];

void set_context(std::string_view what) {
  const size_t n = std::min(what.size(), kContextBytes - 1);
  for (size_t i = 0; i < n; ++i) context_text[i].store(what[i], std::memory_order_relaxed);
  context_text[n].store('\0', std::memory_order_relaxed);
}

// The context's text into what (kContextBytes), NUL-terminated: the handler's read and the tests'.
void read_context(char* what) {
  size_t i = 0;
  for (; i < kContextBytes - 1; ++i) {
    what[i] = context_text[i].load(std::memory_order_relaxed);
    if (what[i] == '\0') return;
  }
  what[i] = '\0';
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGILL:
      return "SIGILL (an instruction this CPU does not run, or a tile or vector state it was not set up for)";
    case SIGSEGV:
      return "SIGSEGV (a memory access outside the process's memory)";
    case SIGBUS:
      return "SIGBUS (a memory access the hardware refused)";
    case SIGFPE:
      return "SIGFPE (an arithmetic fault)";
    default:
      return "a fatal signal";
  }
}

// Appends text to a fixed line without allocating (the handler's only tool).
struct Line {
  char bytes[768];
  size_t n = 0;
  void add(const char* s) {
    while (*s && n < sizeof(bytes) - 1) bytes[n++] = *s++;
  }
};

void report(int sig) {
  Line line;
  line.add("moe-bench: fatal ");
  line.add(signal_name(sig));
  char what[kContextBytes];
  read_context(what);
  if (what[0] != '\0') {
    line.add(" while running ");
    line.add(what);
    line.add("; --gemm-variant can name another variant for it (moe-bench --list says which run here)");
  }
  line.add("\n");
  // write(2) is async-signal-safe; a short write is all a dying process can do anyway.
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, line.bytes, line.n);
  // SA_RESETHAND restored the default action: raising again ends the process as the signal would have.
  raise(sig);
}

}  // namespace

void install_fatal_signal_report() {
  struct sigaction action {};
  action.sa_handler = report;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGILL, SIGSEGV, SIGBUS, SIGFPE}) sigaction(sig, &action, nullptr);
}

FatalSignalContext::FatalSignalContext(std::string_view what) {
  set_context(what);
}

FatalSignalContext::~FatalSignalContext() {
  set_context("");
}

std::string current_fatal_signal_context() {
  char what[kContextBytes];
  read_context(what);
  return what;
}

}  // namespace moe
