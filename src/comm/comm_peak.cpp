// The comm meter's bookkeeping and the peak it is measured against (moe/exchange.h): the largest
// message of each collective kind a step sent, repeated alone on the same comm, gives the bus bandwidth
// that kind reaches there (nccl-tests' busbw: all-to-all (R-1)/R of a rank's buffer per call,
// all-reduce 2 (R-1)/R), which is what the meter's bytes count too, so a row's comm_gbps over it is the
// share of the reachable bandwidth the step's exchanges got. Measured in the benchmark's own process
// (the same transport, the same placement) after its timed calls. The step's own time is counted as
// transfer only (measure_comm_transfer): the probe's calls start behind a barrier, the step's do not.
#include <algorithm>
#include <chrono>
#include <vector>

#include "comm/exchanges.h"

namespace moe {
namespace {

constexpr int kProbeWarmup = 2;  // the first calls set up the transport's buffers
constexpr int kProbeIters = 7;

// The largest of each rank's value over comm: every rank of comm gets it.
Status max_over(Comm& comm, double mine, double& result) {
  Tensor one(Dtype::f64, {1}), all(Dtype::f64, {comm.size()});
  one.set(0, mine);
  MOE_RETURN_IF_ERROR(comm.all_gather(all, one));
  result = mine;
  for (int r = 0; r < comm.size(); ++r) result = std::max(result, all.get(r));
  return Status::ok();
}

// The busbw of `kind` over comm with a buffer of `elements` (the largest any rank of comm sent), 0 where
// that is none.
Status probe(Comm& comm, CollectiveKind kind, Dtype dtype, int64_t elements, double& gbps) {
  double agreed = 0;
  MOE_RETURN_IF_ERROR(max_over(comm, double(elements), agreed));
  gbps = 0;
  const int R = comm.size();
  const int64_t n = int64_t(agreed);
  if (n == 0) return Status::ok();
  // all-reduce sums f32 or bf16; another dtype's bytes are probed as f32 of the same size.
  if (kind == CollectiveKind::reduce && dtype != Dtype::bf16) {
    const int64_t bytes = n * int64_t(dtype_size(dtype));
    dtype = Dtype::f32;
    elements = std::max<int64_t>(1, bytes / 4);
  } else {
    elements = kind == CollectiveKind::all_to_all ? (n + R - 1) / R * R : n;  // an even all-to-all
  }
  Tensor send(dtype, {elements}), recv(dtype, {elements});
  send.fill_zero();
  const std::vector<int64_t> counts(size_t(R), elements / R);
  auto call = [&] {
    return kind == CollectiveKind::all_to_all ? comm.all_to_all_v(recv, counts, send, counts)
                                              : comm.all_reduce_sum(send);
  };
  for (int i = 0; i < kProbeWarmup; ++i) MOE_RETURN_IF_ERROR(call());
  // Each call behind a barrier, its time the slowest rank's; the fastest call: other work on the cores
  // (ranks oversubscribed, other jobs) only ever slows a call, and where a rank is descheduled the
  // calls' times split into two clusters far apart (10x here), so neither the mean nor the median is
  // what the transport can do.
  Tensor mine(Dtype::f64, {kProbeIters}), all(Dtype::f64, {kProbeIters * R});
  for (int i = 0; i < kProbeIters; ++i) {
    MOE_RETURN_IF_ERROR(comm.barrier());
    const auto start = std::chrono::steady_clock::now();
    MOE_RETURN_IF_ERROR(call());
    mine.set(i, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  MOE_RETURN_IF_ERROR(comm.all_gather(all, mine));
  std::vector<double> slowest(size_t(kProbeIters), 0.0);
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kProbeIters; ++i)
      slowest[size_t(i)] = std::max(slowest[size_t(i)], all.get(int64_t(r) * kProbeIters + i));
  const double seconds = *std::min_element(slowest.begin(), slowest.end());
  const int64_t bytes = int64_t(send.bytes());
  const int64_t bus = kind == CollectiveKind::all_to_all ? bytes / R * (R - 1) : all_reduce_bytes(bytes, R);
  gbps = seconds > 0 ? double(bus) / seconds / 1e9 : 0;
  return Status::ok();
}

}  // namespace

void CommMeter::add(CollectiveKind kind, Comm& comm, Dtype dtype, int64_t elements, int64_t sent, double s) {
  seconds += s;
  bytes += sent;
  log.push_back({&comm, s});
  if (kind == CollectiveKind::all_to_all) a2a_bytes += sent;
  if (comm.size() < 2) return;  // nothing crossed ranks: no peak to measure
  CommMessage& largest = kind == CollectiveKind::all_to_all ? a2a : reduce;
  const int64_t size = elements * int64_t(dtype_size(dtype));
  if (largest.comm == nullptr || size > largest.elements * int64_t(dtype_size(largest.dtype)))
    largest = {&comm, dtype, elements};
}

CommMeter CommMeter::mark() const {
  CommMeter m;
  static_cast<CommTotals&>(m) = *this;
  m.log_end = log.size();
  return m;
}

void CommMeter::add_since(const CommMeter& before, const CommMeter& now) {
  seconds += now.seconds - before.seconds;
  bytes += now.bytes - before.bytes;
  a2a_bytes += now.a2a_bytes - before.a2a_bytes;
  calls += now.calls - before.calls;
  MOE_CHECK(now.log.size() >= before.log_end, "add_since: `before` is not an earlier mark of `now`");
  log.insert(log.end(), now.log.begin() + std::ptrdiff_t(before.log_end), now.log.end());
  a2a = now.a2a;
  reduce = now.reduce;
}

double CommPeak::ideal_seconds(const CommMeter& m) const {
  double s = 0;
  if (m.a2a_bytes > 0 && a2a_gbps > 0) s += double(m.a2a_bytes) / (a2a_gbps * 1e9);
  const int64_t reduce_bytes = m.bytes - m.a2a_bytes;
  if (reduce_bytes > 0 && reduce_gbps > 0) s += double(reduce_bytes) / (reduce_gbps * 1e9);
  return s;
}

Status measure_comm_peak(const CommMeter& meter, CommPeak& peak) {
  peak = CommPeak{};
  // Every rank of a comm saw the same collectives on it (they are collective), so the ranks agree on
  // which probes run, in this order: all-to-all, then reduce.
  if (meter.a2a.comm != nullptr)
    MOE_RETURN_IF_ERROR(probe(*meter.a2a.comm, CollectiveKind::all_to_all, meter.a2a.dtype,
                              meter.a2a.elements, peak.a2a_gbps));
  if (meter.reduce.comm != nullptr)
    MOE_RETURN_IF_ERROR(probe(*meter.reduce.comm, CollectiveKind::reduce, meter.reduce.dtype,
                              meter.reduce.elements, peak.reduce_gbps));
  return Status::ok();
}

Status measure_comm_transfer(const CommMeter& meter, double& seconds) {
  seconds = 0;
  // The comms in the order of first use: every rank runs the same steps, so the ranks of each comm
  // reach its all-gather in the same order relative to the others' (no rank waits on a comm whose
  // other ranks wait on another).
  std::vector<Comm*> comms;
  for (const TimedCollective& c : meter.log)
    if (std::find(comms.begin(), comms.end(), c.comm) == comms.end()) comms.push_back(c.comm);
  for (Comm* comm : comms) {
    std::vector<double> mine;
    for (const TimedCollective& c : meter.log)
      if (c.comm == comm) mine.push_back(c.seconds);
    const int R = comm->size();
    const int64_t n = int64_t(mine.size());
    Tensor count(Dtype::s64, {1}), counts(Dtype::s64, {R});
    count.data<int64_t>()[0] = n;
    MOE_RETURN_IF_ERROR(comm->all_gather(counts, count));
    for (int r = 0; r < R; ++r)
      MOE_CHECK(counts.data<int64_t>()[r] == n,
                "the ranks of a comm metered different numbers of collectives on it");
    Tensor times(Dtype::f64, {n}), all(Dtype::f64, {n * R});
    std::copy(mine.begin(), mine.end(), times.data<double>());
    MOE_RETURN_IF_ERROR(comm->all_gather(all, times));
    const double* t = all.data<double>();  // (R, n)
    for (int64_t i = 0; i < n; ++i) {
      double least = t[i];
      for (int r = 1; r < R; ++r) least = std::min(least, t[int64_t(r) * n + i]);
      seconds += least;
    }
  }
  return Status::ok();
}

}  // namespace moe
