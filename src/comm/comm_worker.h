// A thread that runs collectives in the order they are submitted while its caller computes
// (--ep-overlap: the dispatch of one chunk of rows overlaps the experts of the previous one). Every rank
// submits the same collectives in the same order, so they meet as if called in line. Where the comm
// may not be called from another thread (an MPI library below MPI_THREAD_SERIALIZED), it runs each at
// submit, in line: the same results, no overlap.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "moe/status.h"

namespace moe {

class CommWorker {
 public:
  explicit CommWorker(bool threaded);
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // Runs `collective` after every collective submitted before it; the future holds its Status. The
  // caller keeps what it reads and writes alive and untouched until then. Only the worker calls the
  // comm between a submit and the wait for its future.
  std::future<Status> submit(std::function<Status()> collective);

 private:
  void run();

  bool threaded_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<Status()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace moe
