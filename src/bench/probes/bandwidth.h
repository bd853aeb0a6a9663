// The machine's streaming memory bandwidth for a number of threads, the roofline's second peak beside
// the arithmetic ones (--peak): where few tokens reach each expert, the block is bound by reading its
// weights, not by multiplying them. STREAM-like: arrays far larger than any cache, first touched by the
// threads that later read them (so a NUMA machine places them near), each kernel timed several times and
// the best kept (contention only slows a pass).
//   read:  sum += a[i]               8 bytes an element
//   triad: a[i] = b[i] + s * c[i]    24 bytes an element (the write-allocate read is not counted, as in
//   STREAM)
#pragma once

namespace moe::bench {

struct Bandwidth {
  double read_gbps = 0;
  double triad_gbps = 0;
};

// Takes about a second; `bytes_per_array` defaults to 256 MiB.
Bandwidth measure_bandwidth(int threads, double bytes_per_array = 256.0 * 1024 * 1024);

// The read kernel alone, on one array, the best of `repeats` passes (about 0.2 s): what a run measures just
// before and after its calls. Ten passes span ~0.1 s, the time over which a shared VM's memory was seen to
// move between ~19 and ~28 GB/s (2-core Zen 4).
double measure_read_gbps(int threads, double bytes = 256.0 * 1024 * 1024, int repeats = 10);

}  // namespace moe::bench
