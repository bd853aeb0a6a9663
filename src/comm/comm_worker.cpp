#include "comm/comm_worker.h"

namespace moe {

CommWorker::CommWorker(bool threaded) : threaded_(threaded) {
  if (threaded_) thread_ = std::thread([this] { run(); });
}

CommWorker::~CommWorker() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::future<Status> CommWorker::submit(std::function<Status()> collective) {
  std::packaged_task<Status()> task(std::move(collective));
  std::future<Status> done = task.get_future();
  if (!threaded_) {
    task();
    return done;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return done;
}

void CommWorker::run() {
  for (;;) {
    std::packaged_task<Status()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every submitted collective ran
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace moe
