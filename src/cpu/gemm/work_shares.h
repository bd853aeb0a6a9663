// A parallel call's items [0, count) among its threads: each thread takes its own contiguous share in order
// (a thread then streams its experts' weights in address order), and once that is done, the back half of the
// largest share another thread has left, which it then walks in order as its own. A static split ends when
// its slowest thread does, and on a shared or hybrid machine the threads' speeds differ: on a 2-core Zen 5
// VM, gemv's two threads with equal bytes each took 10.3-11.9 and 15.8-17.6 ms at times (moe-bench --model
// qwen3-30b-a3b --tokens 64), and one thread alone does not reach the memory bandwidth two do. With the
// shares the two end within 0.02 ms and that block ran 17.1-17.9 ms against 17.2-18.7 (runs routing:
// 17.1-17.3 against 18.2-18.5). dpbf16's nn_swiglu threads took 231 and 246 ms of --tokens 4096 statically;
// with the shares the block ran 0.86-0.90 TF/s against 0.80-0.88, forward_backward at 2048 tokens 0.82-0.83
// against 0.79-0.81 (alternately).
//
// Build-ISA code, called by the kernels of every ISA (never inlined into them: no ISA leak, and the
// per-item call is nothing beside an item's microseconds).
#pragma once

#include <cstdint>
#include <memory>

namespace moe::gemm_detail {

class WorkShares {
 public:
  // `threads` even shares of `count` items; shares of threads the team lacks are taken by the others.
  WorkShares(int64_t count, int threads);
  // `threads` empty shares, for set() to fill before the team starts (a kernel of any ISA passes its shares
  // so, instantiating no library code for them: docs/design.md, "ISA levels").
  explicit WorkShares(int threads);
  // Out of line, as all of it: the library code they instantiate is the build ISA's alone.
  WorkShares(WorkShares&&) noexcept;
  ~WorkShares();
  // Share t is items [begin, end) (shares ascending, from 0, items below 2^31).
  void set(int t, int64_t begin, int64_t end);

  // The item thread t runs next: the front of its share, else one of a share it took from another thread;
  // -1 when every item is taken.
  int64_t next(int t);
  // Items [begin, end) thread t runs next, up to `most` of them at once, as next() takes them one by one;
  // {-1, -1} when every item is taken. An atomic exchange per item costs where the items are short and the
  // thread's stores are non-temporal (the exchange waits for them to leave).
  struct Run {
    int64_t begin = -1, end = -1;
  };
  Run next_run(int t, int64_t most);

 private:
  struct alignas(64) Share {
    uint64_t span;  // front | back << 32: items [front, back), changed atomically
  };
  bool take_front(int t, int64_t most, Run& run);
  bool take_back_half(int t);

  int threads_;
  std::unique_ptr<Share[]> shares_;
};

}  // namespace moe::gemm_detail
