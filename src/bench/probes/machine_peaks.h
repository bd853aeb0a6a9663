// The machine's roofline peaks a row is read against, for a thread count: the streaming read and write
// bandwidths (bandwidth.h) and the register-resident arithmetic peak of a dtype (cpu/gemm/peak.h). Probing
// both takes about a second and a half, too long for every process: they are measured once per machine and
// kept in `peaks.json` beside auto's tuning file (the same per-machine cache; keyed by CPU model, ISA level
// and threads; replaced whole under the file's lock, as the tuning file is). Without a tuning file
// (--tuning-file none) they are measured once per process. A file that is not ours is ignored with one
// warning. A kept peak is the best measured so far (contention only lowers a probe's number): `--peak`
// measures afresh and raises what is kept; deleting the file forgets it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "moe/dtype.h"

namespace moe::bench {

class MachinePeaks {
 public:
  // path: the cache file ("": this process only).
  explicit MachinePeaks(std::string path) : path_(std::move(path)) {}
  // peaks.json in the directory of the tuning file `tuning_file` resolves to (GemmTuner::resolve_path);
  // "" for --tuning-file none or where no cache directory is known.
  static std::string path_beside_tuning_file(const std::string& tuning_file);

  // GB/s reading (streaming writes of values, of zeros) with `threads` threads; any missing measures all.
  double read_gbps(int threads);
  double write_gbps(int threads);
  double zero_write_gbps(int threads);
  // TF/s (TOP/s for s8) multiplying `arithmetic` with `threads` threads; nullopt where no ISA here does.
  std::optional<double> arithmetic_tflops(int threads, Dtype arithmetic);
  // Keeps a fresh measurement (--peak): for this process and in the file.
  void remember_read_gbps(int threads, double gbps);
  void remember_write_gbps(int threads, double gbps);
  void remember_zero_write_gbps(int threads, double gbps);
  void remember_arithmetic(int threads, Dtype arithmetic, std::optional<double> tflops);

 private:
  double kept_bandwidth(int threads, const std::string& what);
  std::optional<std::optional<double>> cached(const std::string& what);
  void keep(const std::string& what, std::optional<double> value);
  std::string key(const std::string& what) const;
  void load();
  void warn(const std::string& why);

  std::string path_;
  bool loaded_ = false, usable_ = true;
  std::map<std::string, std::optional<double>> values_;  // key -> value (null: none here)
};

}  // namespace moe::bench
