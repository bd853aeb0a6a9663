// The ISA dispatch (moe/cpu_isa.h): what cpuid finds agrees with the kernel's /proc/cpuinfo, MOE_MAX_ISA
// holds every level down, `--list` says per variant whether it runs here, and a variant that cannot run
// is one line and exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "cpu/gemm/gemm.h"
#include "moe/cpu_isa.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::Ran;

// The value of /proc/cpuinfo's first `key : value` line ("" where there is none).
std::string cpuinfo_value(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name == key) return line.substr(std::min(line.size(), colon + 2));
  }
  return "";
}

bool cpuinfo_has_flag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w == flag) return true;
    return false;
  }
  return false;
}

TEST(CpuIsa, LevelNamesRoundTripAndUnknownNamesAreRefused) {
  for (IsaLevel l :
       {IsaLevel::baseline, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::avx512_bf16, IsaLevel::amx}) {
    IsaLevel back = IsaLevel::baseline;
    ASSERT_TRUE(parse_isa_level(isa_level_name(l), back));
    EXPECT_EQ(back, l);
  }
  IsaLevel l = IsaLevel::avx2;
  EXPECT_TRUE(parse_isa_level("AVX512_BF16", l));
  EXPECT_EQ(l, IsaLevel::avx512_bf16);
  EXPECT_FALSE(parse_isa_level("avx3", l));
  EXPECT_FALSE(parse_isa_level("", l));
}

// cpuid and the kernel agree on every extension a level needs (the kernel hides what the OS does not
// save, so a flag it lists is one we may use), the vendor and the family.
TEST(CpuIsa, DetectionAgreesWithProcCpuinfo) {
  const CpuIsa& c = cpu_isa();
  EXPECT_FALSE(c.model.empty());
  EXPECT_EQ(c.avx2 && c.os_avx, cpuinfo_has_flag("avx2"));
  EXPECT_EQ(c.fma, cpuinfo_has_flag("fma"));
  EXPECT_EQ(c.avx512f && c.os_avx512, cpuinfo_has_flag("avx512f"));
  EXPECT_EQ(c.avx512_bf16 && c.os_avx512, cpuinfo_has_flag("avx512_bf16"));
  EXPECT_EQ(c.amx_tile, cpuinfo_has_flag("amx_tile"));
  EXPECT_EQ(c.detected >= IsaLevel::avx2,
            cpuinfo_has_flag("avx2") && cpuinfo_has_flag("fma") && cpuinfo_has_flag("f16c"));
  EXPECT_EQ(c.detected >= IsaLevel::avx512_bf16,
            cpuinfo_has_flag("avx512_bf16") && cpuinfo_has_flag("avx512bw") && cpuinfo_has_flag("avx512vl") &&
                cpuinfo_has_flag("avx512_vnni"));
  EXPECT_LE(c.level(), c.detected);
  // The vendor and display family the kernel reads from cpuid too (gemv's prefetch setting keys on them).
  EXPECT_EQ(c.vendor, cpuinfo_value("vendor_id"));
  EXPECT_EQ(std::to_string(c.family), cpuinfo_value("cpu family"));
}

// Every variant either runs here or says why not (and is then refused); auto's table has rows of the
// variants that run here only, and without measurements starts with the first that auto may take here.
TEST(CpuIsa, AutoIsTheFirstVariantThatRunsHere) {
  ASSERT_TRUE(check_gemm_variant("auto"));
  const GemmVariant* first = nullptr;
  for (const GemmVariant& v : gemm_variants()) {
    if (!v.unavailable().empty()) {
      EXPECT_FALSE(check_gemm_variant(v.name)) << v.name;
      continue;
    }
    EXPECT_TRUE(check_gemm_variant(v.name)) << v.name;
    if (!first && v.tunable && v.auto_candidate()) first = &v;
  }
  ASSERT_NE(first, nullptr);
  KernelConfig k;
  k.tuning_file = "none";
  const GemmKernels table(k, nullptr);
  EXPECT_EQ(table.rows().front().variant, first);
  for (const GemmRow& r : table.rows()) EXPECT_EQ(r.variant->unavailable(), "") << r.variant->name;
}

TEST(CpuIsa, MaxIsaHoldsTheLevelAndListSaysWhatRuns) {
  const Ran r = testing::run_command("MOE_MAX_ISA=baseline " + std::string(MOE_BENCH_BINARY) + " --list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("isa level: baseline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("held to baseline by MOE_MAX_ISA"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu: " + cpu_isa().model), std::string::npos) << r.out;
#ifdef MOE_HAVE_ONEDNN
  EXPECT_NE(r.out.find("dpbf16: "), std::string::npos) << "every build has the AVX-512 BF16 variant";
  EXPECT_NE(r.out.find("no: needs AVX-512 BF16"), std::string::npos) << r.out;
#endif
  const Ran bad = testing::run_command("MOE_MAX_ISA=avx3 " + std::string(MOE_BENCH_BINARY) + " --list");
  EXPECT_EQ(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("MOE_MAX_ISA=avx3 names no ISA level"), std::string::npos) << bad.err;
}

TEST(CpuIsa, AVariantThatCannotRunHereIsOneLineAndExitTwo) {
#ifdef MOE_HAVE_ONEDNN
  const Ran r = testing::run_command("MOE_MAX_ISA=avx2 " + std::string(MOE_BENCH_BINARY) +
                                     " --tokens 8 --hidden 8 --mlp-dim 8 --experts 2 --topk 1 --iters 1 "
                                     "--gemm-variant dpbf16");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--gemm-variant dpbf16 does not run here: needs AVX-512 BF16"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
#else
  GTEST_SKIP() << "built without oneDNN: no dpbf16 variant";
#endif
}

// Rows carry the memory roofline (issue 40 item 4): the bytes a call must move (the touched experts'
// weights, x and out; forward_backward reads the weights twice and writes their gradients), the rate, and
// with --with-peak the bandwidth peak and the binding peak: one token through one expert moves ~1 FLOP a
// byte (memory-bound on any CPU), 4096 tokens through one small expert ~175 (compute-bound on any CPU).
TEST(CpuIsa, RowsCarryTheMemoryRoofline) {
  const std::string one_token =
      "--tokens 1 --hidden 512 --mlp-dim 256 --experts 1 --topk 1 --iters 2 --warmup 1 --threads 1 "
      "--impl fused_w13 --distribution random --format jsonl ";
  auto row_of = [](const testing::Ran& r) {
    return nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  };
  const testing::Ran fwd = testing::run_bench(one_token + "--with-peak");
  ASSERT_EQ(fwd.exit_code, 0) << fwd.err;
  const nlohmann::json f = row_of(fwd);
  EXPECT_EQ(f["bytes_moved"].get<double>(), 3.0 * 512 * 256 * 2 + 2.0 * 512 * 2) << f.dump();
  EXPECT_NEAR(f["gbps"].get<double>(), f["bytes_moved"].get<double>() / f["time_s"].get<double>() / 1e9,
              1e-9);
  ASSERT_TRUE(f["bw_peak_gbps"].is_number()) << f.dump();
  EXPECT_NEAR(f["pct_of_bw_peak"].get<double>(),
              100 * f["gbps"].get<double>() / f["bw_peak_gbps"].get<double>(), 1e-6);
  EXPECT_EQ(f["bound"], "memory") << f.dump();
  // One expert whose weights bind it: the per-expert roofline is the bytes at the bandwidth.
  EXPECT_NEAR(f["roofline_s"].get<double>(),
              f["bytes_moved"].get<double>() / f["bw_peak_gbps"].get<double>() / 1e9, 1e-12)
      << f.dump();
  EXPECT_NEAR(f["pct_of_roofline"].get<double>(), f["pct_of_bw_peak"].get<double>(), 1e-6) << f.dump();
  // Memory binds it: a read probe before each timed call, not the process's first one (run.cpp).
  EXPECT_EQ(f["bw_peak_source"], "each_call") << f.dump();
  // The note points at the peak that binds: pct_of_bw_peak is the number to read here.
  EXPECT_NE(f["ceiling_note"].get<std::string>().find("+memory_bound"), std::string::npos) << f.dump();
  // Without --with-peak a row reads the machine's kept peaks (machine_peaks.h): at least what the run above
  // measured, and the same bound.
  const nlohmann::json b = row_of(testing::run_bench(one_token + "--bench-pass forward_backward"));
  EXPECT_EQ(b["bytes_moved"].get<double>(), 3 * (3.0 * 512 * 256 * 2) + 2 * (2.0 * 512 * 2)) << b.dump();
  ASSERT_TRUE(b["bw_peak_gbps"].is_number()) << b.dump();
  EXPECT_GE(b["bw_read_peak_gbps"].get<double>(), f["bw_read_peak_gbps"].get<double>()) << b.dump();
  // Its gradients are written: the peak mixes the kept read and write peaks (report.h bw_peak_gbps).
  const double read = b["bw_read_peak_gbps"].get<double>(), write = b["bw_write_peak_gbps"].get<double>(),
               zeros = b["bw_zero_write_peak_gbps"].get<double>();
  EXPECT_GE(b["bw_peak_gbps"].get<double>(), std::min({read, write, zeros}) * (1 - 1e-12)) << b.dump();
  EXPECT_LE(b["bw_peak_gbps"].get<double>(), std::max({read, write, zeros}) * (1 + 1e-12)) << b.dump();
  EXPECT_TRUE(b["peak_tflops"].is_null()) << "the arithmetic peak's columns are --with-peak's";
  EXPECT_EQ(b["bound"], "memory") << b.dump();
  EXPECT_EQ(b["bw_peak_source"], "kept") << b.dump();
  const nlohmann::json off = row_of(testing::run_bench(one_token + "--ceiling off"));
  EXPECT_TRUE(off["bw_peak_gbps"].is_null() && off["bound"].is_null()) << "--ceiling off probes nothing";
  const testing::Ran many = testing::run_bench(
      "--tokens 4096 --hidden 256 --mlp-dim 256 --experts 1 --topk 1 --iters 2 --warmup 1 --threads 1 "
      "--impl fused_w13 --distribution random --dtype float32 --with-peak --format jsonl");
  ASSERT_EQ(many.exit_code, 0) << many.err;
  EXPECT_EQ(row_of(many)["bound"], "compute") << many.out;
  // Compute binds its one expert: the roofline is the FLOPs at the peak, and x read and out written beside.
  const nlohmann::json m = row_of(many);
  const double flops = m["tflops"].get<double>() * 1e12 * m["time_s"].get<double>();
  EXPECT_NEAR(m["roofline_s"].get<double>(),
              flops / (m["peak_tflops"].get<double>() * 1e12) +
                  4096.0 * 256 * 4 / (m["bw_read_peak_gbps"].get<double>() * 1e9) +
                  4096.0 * 256 * 4 / (m["bw_write_peak_gbps"].get<double>() * 1e9),
              1e-9 * m["roofline_s"].get<double>())
      << many.out;
  EXPECT_NEAR(m["pct_of_roofline"].get<double>(),
              100 * m["roofline_s"].get<double>() / m["time_s"].get<double>(), 1e-6);
  EXPECT_EQ(row_of(many)["bw_peak_source"], "around_calls") << many.out;
  EXPECT_EQ(row_of(many)["ceiling_note"].get<std::string>().find("memory_bound"), std::string::npos)
      << many.out;
}

// The kept peaks are a cache: a peaks file that is not ours is one warning and the run goes on with peaks
// of its own; a good one is read, not measured again (a value planted there comes back in the row).
TEST(CpuIsa, KeptPeaksAreReadAndABadFileIsIgnored) {
  const std::string dir = testing::temp_dir("peaks");
  const std::string run = "MOE_TUNING_FILE=" + dir + "/tuning.json " + std::string(MOE_BENCH_BINARY) +
                          " --tokens 1 --hidden 64 --mlp-dim 64 --experts 2 --topk 1 --iters 1 --warmup 0"
                          " --threads 1 --impl fused_w13 --distribution random --format jsonl";
  testing::write_file(dir + "/peaks.json", "{\"format\": 1}");
  const testing::Ran bad = testing::run_command(run);
  ASSERT_EQ(bad.exit_code, 0) << bad.err;
  EXPECT_NE(bad.err.find("peaks file"), std::string::npos) << bad.err;
  EXPECT_TRUE(nlohmann::json::parse(bad.out)["bw_peak_gbps"].is_number()) << bad.out;
  std::filesystem::remove(dir + "/peaks.json");
  ASSERT_EQ(testing::run_command(run).exit_code, 0);  // measures and keeps
  std::string kept = testing::read_file(dir + "/peaks.json");
  const size_t value = kept.find("\"value\": ", kept.find("read_gbps")) + 9;
  kept.replace(value, kept.find(',', value) - value, "1e6");  // higher than any machine reads
  testing::write_file(dir + "/peaks.json", kept);
  const testing::Ran again = testing::run_command(run);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["bw_read_peak_gbps"].get<double>(), 1e6) << kept;
  // --with-peak measures the arithmetic peak afresh but reports the best the machine reached: a fresh
  // measurement the host halved does not lower it.
  const size_t peak = kept.find("\"value\": ", kept.find(" peak ")) + 9;
  kept.replace(peak, kept.find(',', peak) - peak, "1e6");
  testing::write_file(dir + "/peaks.json", kept);
  const testing::Ran with_peak = testing::run_command(run + " --with-peak");
  ASSERT_EQ(with_peak.exit_code, 0) << with_peak.err;
  EXPECT_EQ(nlohmann::json::parse(with_peak.out)["peak_tflops"].get<double>(), 1e6) << kept;
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// --peak measures a register-resident peak for every ISA level this CPU runs (an AVX2 machine has the
// float32 FMA and int8 ones); --with-peak puts the run's arithmetic peak in its rows, with its percentage of
// it.
TEST(CpuIsa, PeakIsMeasuredPerIsaAndRowsCarryIt) {
  const Ran r = testing::run_bench("--peak --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (isa_level() >= IsaLevel::avx2) {
    EXPECT_NE(r.out.find("f32_fma_avx2"), std::string::npos) << r.out;
  }
  if (isa_level() >= IsaLevel::avx512_bf16) {
    EXPECT_NE(r.out.find("bf16_dp_avx512"), std::string::npos) << r.out;
  }
  if (isa_level() >= IsaLevel::amx) {
    EXPECT_NE(r.out.find("int8_amx"), std::string::npos) << r.out;
  }
  // The int8 peaks rows of int8 GEMMs compare against (best_peak(peaks, s8)).
  if (isa_level() >= IsaLevel::avx2) {
    EXPECT_NE(r.out.find("int8_avx2"), std::string::npos) << r.out;
  }
  if (isa_level() >= IsaLevel::avx512_bf16) {
    EXPECT_NE(r.out.find("int8_vnni_avx512"), std::string::npos) << r.out;
  }
  // The ymm vpdpbusd of AVX-VNNI (Zen 5, Intel client parts) is a CPU feature beside the avx2 level.
  EXPECT_EQ(r.out.find("int8_vnni_avx2") != std::string::npos,
            isa_level() >= IsaLevel::avx2 && cpu_isa().avx_vnni)
      << r.out;
  // The memory roofline's peaks beside the arithmetic ones (issue 40 item 4): streaming reads, writes of
  // values and of zeros, and triad.
  for (const char* bw : {"memory_read", "memory_write", "memory_write_0", "memory_triad"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(std::string(bw) + " +([0-9.]+)  GB/s"))) << r.out;
    EXPECT_GT(std::stod(m[1]), 0.1) << r.out;
  }
  if (isa_level() < IsaLevel::avx2) GTEST_SKIP() << "no peak kernel below AVX2";
  const Ran run = testing::run_bench(
      "--tokens 256 --hidden 128 --mlp-dim 128 --experts 4 --topk 2 --iters 2 --warmup 0 --threads 1 "
      "--dtype float32 --with-peak --format jsonl");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json row = nlohmann::json::parse(run.out.substr(0, run.out.find('\n')));
  ASSERT_TRUE(row["peak_tflops"].is_number()) << row.dump();
  EXPECT_GT(row["peak_tflops"].get<double>(), 0);
  // The row's percentage is its own TF/s over its peak. Whether it stays under 100 is a matter of timing,
  // which a loaded CI machine can upset (the peak probe halved by a neighbour), so it is not asserted.
  const auto pct_of_own_peak = [](const nlohmann::json& r) {
    return 100.0 * r["tflops"].get<double>() / r["peak_tflops"].get<double>();
  };
  EXPECT_NEAR(row["pct_of_peak"].get<double>(), pct_of_own_peak(row), 1e-6) << row.dump();
  // A routed int8 run compares against the int8 peak.
  const Ran int8 = testing::run_bench(
      "--tokens 256 --hidden 128 --mlp-dim 128 --experts 4 --topk 2 --iters 2 --warmup 0 --threads 1 "
      "--quant-mode int8_routed_prequant --with-peak --format jsonl");
  ASSERT_EQ(int8.exit_code, 0) << int8.err;
  const nlohmann::json int8_row = nlohmann::json::parse(int8.out.substr(0, int8.out.find('\n')));
  ASSERT_TRUE(int8_row["peak_tflops"].is_number()) << int8_row.dump();
  EXPECT_NEAR(int8_row["pct_of_peak"].get<double>(), pct_of_own_peak(int8_row), 1e-6) << int8_row.dump();
  const Ran plain = testing::run_bench(
      "--tokens 64 --hidden 32 --mlp-dim 16 --experts 4 --topk 2 --iters 1 --warmup 0 --threads 1 --format "
      "jsonl");
  EXPECT_TRUE(nlohmann::json::parse(plain.out.substr(0, plain.out.find('\n')))["peak_tflops"].is_null());
}

}  // namespace
}  // namespace moe
