// The machine's streaming memory bandwidth for a number of threads, the roofline's second peak beside
// the arithmetic ones (--peak): where few tokens reach each expert, the block is bound by reading its
// weights, not by multiplying them. STREAM-like: arrays far larger than any cache, first touched by the
// threads that later read them (so a NUMA machine places them near), each kernel timed several times and
// the best kept (contention only slows a pass).
//   read:  sum += a[i]               8 bytes an element
//   write: a[i] = v                  8 bytes an element, streaming (non-temporal) stores, as a
//   forward_backward
//                                    streams its gradients (cpu/gemm/zero_gradient.h): they skip the
//                                    write-allocate read, so a run that writes much is bounded by reads and
//                                    writes apart. Twice: values (2.0) and zeros, which a machine may write
//                                    faster (a 2-core Zen 3 VM: zeros 30-40 GB/s, other values 19-22,
//                                    alternately in one process; reads 20-28), and at few tokens most of
//                                    the gradient bytes are zeros (experts no row reached)
//   triad: a[i] = b[i] + s * c[i]    24 bytes an element (the write-allocate read is not counted, as in
//   STREAM)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace moe::bench {

struct Bandwidth {
  double read_gbps = 0;
  double write_gbps = 0;       // values
  double zero_write_gbps = 0;  // zeros
  double triad_gbps = 0;
};

// The sum of the 64-bit words of [p, p + bytes), read once by `threads` threads, each a contiguous part, in
// 16 independent sums (integer: any bit pattern adds at one speed). One vector sum a thread (as `omp simd`
// reduces) is bound by the add's latency, not by memory: built for the x86-64 baseline (SSE2), one thread
// read 18.9 GB/s so against 28.5 with the chains, two 30 against 34-36 (2-core Zen 4), and the portable
// build's rows read up to 124 % of that peak. The probes' read kernel, and the reference a GEMM bench times
// its weights' read with (bench/gemv/bench_few_rows.cpp).
uint64_t read_words(const void* p, int64_t bytes, int threads);

// Writes `value` to every 64-bit word of [p, p + bytes) (p 16-byte aligned) by `threads` threads, each a
// contiguous part, with streaming stores (SSE2: every x86-64 CPU), fenced: the probes' write kernel.
void write_words(void* p, int64_t bytes, int threads, uint64_t value);

// Takes about a second; `bytes_per_array` defaults to 256 MiB.
Bandwidth measure_bandwidth(int threads, double bytes_per_array = 256.0 * 1024 * 1024);

// The read kernel alone, on one array, the best of `repeats` passes (about 0.2 s): what a run measures just
// before and after its calls. Ten passes span ~0.1 s, the time over which a shared VM's memory was seen to
// move between ~19 and ~28 GB/s (2-core Zen 4).
double measure_read_gbps(int threads, double bytes = 256.0 * 1024 * 1024, int repeats = 10);

// A memory probe over its own buffer, first touched by the probing threads; read_gbps() (write_gbps()) is
// the best of `repeats` read (streaming write: of zeros or of values) passes over it. Beside each timed call
// of a memory-bound run (bench/harness/run.cpp) it is bytes_beside_calls() long and read four times (a pass
// moves by +-10 % from the one before), ~15 ms at 35 GB/s: a shared VM's memory moves between ~33 and ~60
// GB/s within seconds (2-core Zen 4; Zen 5 ~50 / ~85), so probes around the calls may meet another speed than
// the calls did, and one row's % of the bandwidth peak read 49-125 % from run to run (Qwen3-30B-A3B, 64
// tokens, runs routing; with these probes 79-95 %). Its passes leave the caches holding the buffer's end, not
// the weights of the call before. A run that writes much (a forward_backward's gradients) probes writes
// beside each call as well.
class MemoryProbe {
 public:
  MemoryProbe(int threads, double bytes);
  ~MemoryProbe();
  double read_gbps(int repeats) const;
  double write_gbps(int repeats, bool zeros) const;

 private:
  struct Array;
  int threads_;
  int64_t elements_;
  std::unique_ptr<Array> array_;
};

// Four last-level caches (cpu/gemm/tuning.h): no pass finds the one before it in them.
double bytes_beside_calls();
constexpr int kPassesBesideCalls = 4;

}  // namespace moe::bench
