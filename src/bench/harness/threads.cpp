#include "bench/harness/threads.h"

#include <fmt/format.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace moe::bench {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

Status try_start_threads(int threads) {
  std::vector<pthread_t> started;
  started.reserve(size_t(std::max(0, threads - 1)));
  int err = 0;
  for (int i = 1; i < threads && err == 0; ++i) {
    pthread_t t;
    err = pthread_create(
        &t, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
    if (err == 0) started.push_back(t);
  }
  for (pthread_t t : started) pthread_join(t, nullptr);
  if (err == 0) return Status::ok();
  return Status::error(fmt::format("cannot start {} threads (started {} more): {}", threads, started.size(),
                                   std::strerror(err)));
}

Status set_thread_count(int requested) {
  const int cores = available_cores(), limit = kMaxThreadsPerCore * cores;
  const int threads = requested > 0 ? requested : omp_get_max_threads();
  if (threads > limit) {
    const std::string what = requested > 0 ? fmt::format("--threads={}", requested)
                                           : fmt::format("OMP_NUM_THREADS={} (--threads 0)", threads);
    return Status::error(fmt::format("invalid {}: at most {} ({} x the {} cores this process may use)", what,
                                     limit, kMaxThreadsPerCore, cores));
  }
  MOE_RETURN_IF_ERROR(try_start_threads(threads));
  omp_set_num_threads(threads);
  return Status::ok();
}

}  // namespace moe::bench
