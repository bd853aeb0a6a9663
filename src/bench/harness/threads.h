// --threads (and OMP_NUM_THREADS when --threads is 0): bounded by a small multiple of the cores this
// process may run on, and the threads actually started once before any run, so an impossible count is
// one error line and exit 2 instead of a segfault, a hang or libgomp's own exit.
#pragma once

#include "moe/status.h"

namespace moe::bench {

// Oversubscription beyond this many threads per available core is refused.
constexpr int kMaxThreadsPerCore = 4;

// CPUs in this process's affinity mask (what taskset / a container's cpuset allows).
int available_cores();

// Starts `threads` - 1 threads with the default stack and joins them; fails when the system will not.
Status try_start_threads(int threads);

// Validates the thread count (`requested` > 0, else OpenMP's default), starts the threads once and
// makes it OpenMP's count.
Status set_thread_count(int requested);

}  // namespace moe::bench
