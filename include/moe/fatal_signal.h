// What a crash says. A kernel this CPU cannot run or a library bug at some size (oneDNN 2.6's AMX brgemm
// died with SIGILL on the AMX host, the kernels log (git show 26fb9b0:docs/kernels.md), "Session 16") kills
// the process with a signal; this turns that into one line on stderr naming the GEMM row and shape that were
// running, then lets the signal take its default action (exit status 128 + signal, a core where the system
// keeps one).
#pragma once

#include <string_view>

namespace moe {

// Installs the report for SIGILL, SIGSEGV, SIGBUS and SIGFPE (once per process; moe-bench's main).
void install_fatal_signal_report();

// While one is alive, a fatal signal's line names `what` ("GEMM row onednn: nt bf16->bf16 Kd=17 ...").
// The text lives in one process-wide buffer (a signal handler cannot allocate, and the signal arrives
// on whichever OpenMP thread faulted, not the thread that set it), so the newest scope names it; ending
// a scope clears it. Rank threads setting it at once may mix their texts, never more.
class FatalSignalContext {
 public:
  explicit FatalSignalContext(std::string_view what);
  ~FatalSignalContext();
  FatalSignalContext(const FatalSignalContext&) = delete;
  FatalSignalContext& operator=(const FatalSignalContext&) = delete;
};

// The text a fatal signal would name now ("" outside any scope): tests.
std::string current_fatal_signal_context();

}  // namespace moe
