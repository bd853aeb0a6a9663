// moe-bench under mpirun (2 and 4 ranks, oversubscribed): --parallel-mode dp and ep over MPI with
// --check against the single-process float64 reference, rank 0 alone printing and writing rows, the
// rows' parallel keys, and bad input as one clear line on every rank, exit 2, no hang. SKIPPED in a
// build without MPI.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "test_util.h"

namespace moe {
namespace {

#ifdef MOE_MPIEXEC
constexpr const char* kMpiexec = MOE_MPIEXEC;
#define REQUIRE_MPI()
#else
constexpr const char* kMpiexec = "";
#define REQUIRE_MPI() GTEST_SKIP() << "built without MPI"
#endif

// moe-bench on `ranks` MPI ranks (one OpenMP thread each), as root where CI runs as root.
testing::Ran mpirun(int ranks, const std::string& args) {
  return testing::run_command(fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 120 {} -np {} "
      "--oversubscribe --bind-to none {} {}",
      kMpiexec, ranks, MOE_BENCH_BINARY, args));
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const char* kShape =
    "--tokens 37 --hidden 32 --mlp-dim 24 --experts 8 --topk 2 --impl fused_w13 --distribution random "
    "--iters 2 --warmup 1 --ceiling off --check";

TEST(MpiCli, EveryPathChecksAgainstTheSingleProcessReference) {
  REQUIRE_MPI();
  const uint64_t seed = testing::test_seed();
  struct Case {
    int ranks;
    const char* flags;
  };
  for (const Case& k : {Case{2, "--parallel-mode dp --dtype float32 --bench-pass forward_backward"},
                        Case{2,
                             "--parallel-mode ep --dtype bfloat16 --bench-pass forward_backward "
                             "--shared-expert-dim 8"},
                        Case{4,
                             "--parallel-mode ep --ep-comm-path all_to_all --dtype float32 "
                             "--bench-pass forward_backward --shared-expert-dim 8"},
                        Case{4,
                             "--parallel-mode ep --ep-comm-path all_to_all --dtype bfloat16 "
                             "--backend ragged_dot"},
                        Case{4,
                             "--parallel-mode ep --ep-comm-path all_to_all --mesh data=2,expert=2 "
                             "--dtype float32 --bench-pass forward_backward --shared-expert-dim 8"},
                        Case{4,
                             "--parallel-mode ep --ep-comm-path all_to_all --ep-overlap 3 --dtype bfloat16 "
                             "--shared-expert-dim 8"},
                        Case{2,
                             "--parallel-mode ep --ep-comm-path ring_ag_rs --dtype float32 --tokens 36 "
                             "--bench-pass forward_backward --shared-expert-dim 8"}}) {
    const std::string args = fmt::format("{} {} --seed {}", kShape, k.flags, seed);
    SCOPED_TRACE(args);
    const testing::Ran r = mpirun(k.ranks, args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(count(r.out, "CHECK pass=true"), 1) << r.out;  // rank 0 alone prints
    EXPECT_EQ(count(r.out, "RESULT "), 1) << r.out;
    EXPECT_NE(r.out.find(fmt::format("world_size={}", k.ranks)), std::string::npos) << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(" comm_bytes=([0-9]+)"))) << r.out;
    const bool moves = std::string(k.flags).find("forward_backward") != std::string::npos ||
                       std::string(k.flags).find("--parallel-mode ep") != std::string::npos;
    EXPECT_EQ(std::stoll(m[1]) > 0, moves) << r.out;
  }
}

// The quant modes over ranks (issue 20 item 5, issue 23): --check against the quantized reference, and
// quant_rel_err of the global results, equal to the single-process run's (same quantized values).
TEST(MpiCli, QuantModesCheckAndReportTheSingleProcessError) {
  REQUIRE_MPI();
  const uint64_t seed = testing::test_seed();
  struct Case {
    int ranks;
    const char* parallel;
    const char* quant;
  };
  for (const Case& k : {Case{2, "--parallel-mode dp", "int8_all"},
                        Case{2, "--parallel-mode ep --ep-comm-path all_to_all", "int8_routed_prequant"},
                        Case{4, "--parallel-mode ep --mesh data=2,expert=2", "int8"}}) {
    const std::string flags = fmt::format(
        "{} --dtype float32 --bench-pass forward_backward --shared-expert-dim 8 --seed {} --quant-mode {}",
        kShape, seed, k.quant);
    SCOPED_TRACE(flags + " " + k.parallel);
    const testing::Ran multi = mpirun(k.ranks, flags + " " + k.parallel);
    ASSERT_EQ(multi.exit_code, 0) << multi.out << multi.err;
    EXPECT_EQ(count(multi.out, "CHECK pass=true"), 1) << multi.out;
    const testing::Ran single = testing::run_bench(flags);
    ASSERT_EQ(single.exit_code, 0) << single.out << single.err;
    std::smatch a, b;
    const std::regex err(" quant_rel_err=([0-9.e+-]+) quant_grad_rel_err=([0-9.e+-]+)");
    ASSERT_TRUE(std::regex_search(multi.out, a, err)) << multi.out;
    ASSERT_TRUE(std::regex_search(single.out, b, err)) << single.out;
    EXPECT_GT(std::stod(a[1]), 1e-4);
    EXPECT_NEAR(std::stod(a[1]), std::stod(b[1]), 1e-3 * std::stod(b[1]));
    EXPECT_NEAR(std::stod(a[2]), std::stod(b[2]), 1e-2 * std::stod(b[2]));
  }
}

// The seed's DP baseline (--impl ref_dp, spec §5.5) over 2 MPI ranks on the cpu backend, forward and
// forward_backward: --check passes, rows say which path they are (impl ref_dp, parallel_mode dp,
// world_size 2) and count the seed's FLOPs (6 H M K T forward, the padding left out; three times that
// forward_backward, as every impl's rows); what it never ran is one line per rank.
TEST(MpiCli, RefDpChecksAgainstTheSingleProcessReference) {
  REQUIRE_MPI();
  const std::string dir = testing::temp_dir("mpi_ref_dp");
  const uint64_t seed = testing::test_seed();
  const char* shape =
      "--tokens 300 --hidden 32 --mlp-dim 24 --experts 8 --topk 2 --impl ref_dp --distribution random "
      "--iters 2 --warmup 1 --ceiling off --parallel-mode dp";
  for (const char* flags : {"--dtype float32", "--dtype bfloat16 --renormalize-topk",
                            "--dtype float32 --bench-pass forward_backward",
                            "--dtype bfloat16 --renormalize-topk --bench-pass forward_backward"}) {
    const testing::Ran r = mpirun(2, fmt::format("{} {} --check --seed {} --out {}/rows.jsonl --format jsonl",
                                                 shape, flags, seed, dir));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(count(r.out, "CHECK pass=true"), 1) << r.out;
  }
  const std::vector<std::string> rows = testing::split_lines(testing::read_file(dir + "/rows.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  for (const std::string& line : rows) {
    const auto row = nlohmann::json::parse(line);
    EXPECT_EQ(row["impl"], "ref_dp");
    EXPECT_EQ(row["parallel_mode"], "dp");
    EXPECT_EQ(row["world_size"], 2);
    EXPECT_EQ(row["renormalize_topk"], row["dtype"] == "bfloat16");
    EXPECT_EQ(row["real_assignments"], 600);
    const double passes = row["pass"] == "forward_backward" ? 3 : 1;
    EXPECT_NEAR(row["tflops"].get<double>() * row["time_s"].get<double>() * 1e12,
                passes * 6.0 * 32 * 24 * 600, 1e-3);
  }
  const testing::Ran bad =
      mpirun(2, fmt::format("{} --bench-pass forward_backward --remat-mode expert_mlp", shape));
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_EQ(count(bad.err, "--impl ref_dp is the seed's DP baseline"), 2) << bad.err;
  EXPECT_EQ(count(bad.err, "--remat-mode expert_mlp"), 2) << bad.err;
  EXPECT_EQ(bad.out.find("RESULT"), std::string::npos) << bad.out;
  const testing::Ran other =
      mpirun(2, "--tokens 37 --hidden 16 --mlp-dim 8 --renormalize-topk --parallel-mode dp");
  EXPECT_EQ(other.exit_code, 2) << other.out << other.err;
  EXPECT_EQ(count(other.err, "--renormalize-topk is the seed's profile-harness routing"), 2) << other.err;
}

TEST(MpiCli, RankZeroAloneWritesTheRows) {
  REQUIRE_MPI();
  const std::string dir = testing::temp_dir("mpi_rows");
  const std::string out = dir + "/rows.jsonl";
  const testing::Ran r =
      mpirun(2, fmt::format("{} --parallel-mode ep --ep-comm-path all_to_all --dtype float32 "
                            "--topk-list 1,2 --out {} --format jsonl",
                            kShape, out));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<std::string> rows = testing::split_lines(testing::read_file(out));
  ASSERT_EQ(rows.size(), 2u) << testing::read_file(out);
  for (const std::string& row : rows) {
    EXPECT_NE(row.find("\"world_size\":2"), std::string::npos) << row;
    EXPECT_NE(row.find("\"mesh_data\":1,\"mesh_expert\":2"), std::string::npos) << row;
    EXPECT_NE(row.find("r1:tokens=[18,37) experts=[4,8)"), std::string::npos) << row;
  }
}

// A rank killed mid-run (SIGKILL, no chance to say anything) ends every rank within 10 s, non-zero.
TEST(MpiCli, AKilledRankEndsTheJobWithinTenSeconds) {
  REQUIRE_MPI();
  const uint64_t seed = testing::test_seed();
  const std::string run = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 100 {} -np 2 "
      "--oversubscribe --bind-to none {} --tokens 64 --hidden 32 --mlp-dim 32 --experts 4 --topk 2 "
      "--iters 1000000 --warmup 0 --ceiling off --parallel-mode ep --ep-comm-path all_to_all "
      "--impl fused_w13 --distribution random --seed {}",
      kMpiexec, MOE_BENCH_BINARY, seed);
  // Rank 1 is the process whose environment says so; it is killed once it has run for a second.
  const std::string script = fmt::format(
      "({} >/dev/null 2>&1; echo rc=$?) & "
      "v=; for i in $(seq 300); do for p in $(pgrep -f -- '--seed {}'); do "
      "grep -qa OMPI_COMM_WORLD_RANK=1 /proc/$p/environ 2>/dev/null && v=$p; done; "
      "[ -n \"$v\" ] && break; sleep 0.1; done; sleep 1; start=$(date +%s%N); kill -9 $v; wait; "
      "echo took_ms=$((($(date +%s%N) - start) / 1000000))",
      run, seed);
  const testing::Ran r =
      testing::run_command("bash -c '" + std::regex_replace(script, std::regex("'"), "'\\''") + "'");
  std::smatch rc, took;
  ASSERT_TRUE(std::regex_search(r.out, rc, std::regex("rc=([0-9]+)"))) << r.out << r.err;
  ASSERT_TRUE(std::regex_search(r.out, took, std::regex("took_ms=([0-9]+)"))) << r.out << r.err;
  EXPECT_NE(std::stoi(rc[1]), 0) << r.out;
  EXPECT_LT(std::stoll(took[1]), 10000) << r.out;
}

// The rows carry the bandwidth the step's collectives reach alone (measured in the same job) and the
// share of it the step got; --stage-timing and --trace-dir show every rank's stages, each exchange one.
TEST(MpiCli, RowsCarryTheCommPeakAndEveryRanksStages) {
  REQUIRE_MPI();
  const std::string dir = testing::temp_dir("mpi_trace");
  const testing::Ran r = mpirun(
      2,
      fmt::format("{} --parallel-mode ep --ep-comm-path all_to_all --dtype float32 --bench-pass "
                  "forward_backward --shared-expert-dim 8 --stage-timing --trace-dir {} --out {}/rows.jsonl "
                  "--format jsonl",
                  kShape, dir, dir));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto row = nlohmann::json::parse(testing::split_lines(testing::read_file(dir + "/rows.jsonl")).at(0));
  // Rows travel by all-to-all, the shared expert's gradients by all-reduce: both probed.
  for (const char* key :
       {"comm_peak_a2a_gbps", "comm_peak_allreduce_gbps", "comm_peak_gbps", "pct_of_comm_peak"})
    EXPECT_GT(row[key].get<double>(), 0) << key << " " << row.dump();
  EXPECT_NEAR(row["pct_of_comm_peak"].get<double>(),
              100 * row["comm_gbps"].get<double>() / row["comm_peak_gbps"].get<double>(), 1e-6);
  // The time inside collectives splits into moving bytes and waiting for a later rank.
  EXPECT_GT(row["comm_transfer_s"].get<double>(), 0) << row.dump();
  EXPECT_LE(row["comm_transfer_s"].get<double>(), row["comm_s"].get<double>()) << row.dump();
  EXPECT_GE(row["comm_wait_s"].get<double>(), 0) << row.dump();
  EXPECT_NEAR(row["comm_gbps"].get<double>(),
              row["comm_bytes"].get<double>() / row["comm_transfer_s"].get<double>() / 1e9, 1e-9);
  const std::string text = r.out + r.err;  // --out: the text lines go to stdout anyway
  for (int rank : {0, 1}) {
    for (const char* stage : {"pack", "exchange_plan", "exchange_dispatch", "up", "exchange_combine",
                              "exchange_dy_rows", "exchange_dx_rows", "exchange_weight_grads"})
      EXPECT_NE(text.find(fmt::format("pass=forward_backward rank={} stage {}_s=", rank, stage)),
                std::string::npos)
          << rank << " " << stage << "\n"
          << text;
    EXPECT_EQ(count(text, fmt::format("rank={} stage_pct ", rank)), 1) << text;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("trace_dir=(\\S+)"))) << r.out;
  const auto trace = nlohmann::json::parse(testing::read_file(m[1].str() + "/trace.json"));
  std::set<std::pair<int, std::string>> seen;
  for (const auto& e : trace["traceEvents"]) seen.insert({e["pid"].get<int>(), e["name"].get<std::string>()});
  for (int rank : {0, 1})
    for (const char* stage :
         {"process_name", "exchange_dispatch", "up", "exchange_combine", "exchange_dx_rows"})
      EXPECT_TRUE(seen.count({rank, stage})) << rank << " " << stage;
}

// The seed's lines of an EP job (issue 41, parity): devices= lists one device per rank, as the seed's forced
// host devices do, and --stage-timing prints the seed's "skipped" line before every rank's stages.
TEST(MpiCli, EpPrintsTheSeedsDevicesAndStageTimingLines) {
  REQUIRE_MPI();
  const testing::Ran r = mpirun(2, fmt::format("{} --parallel-mode ep --stage-timing", kShape));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<std::string> lines = testing::split_lines(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "devices=[CpuDevice(id=0), CpuDevice(id=1)]");
  EXPECT_EQ(count(r.out, "[random] pass=forward stage_timing skipped for parallel_mode=ep\n"), 1) << r.out;
  EXPECT_EQ(count(r.out, "rank=1 stage_pct "), 1) << r.out;
}

// moe-bench sweep under mpirun: rank 0 owns the store (each run's rows written once) and every rank
// takes its verdicts, so a wider sweep over the same store runs only the new runs and a repeated one none.
TEST(MpiCli, SweepResumesFromRankZerosStore) {
  REQUIRE_MPI();
  const std::string store = testing::temp_dir("mpi_sweep") + "/store.jsonl";
  auto sweep = [&](const char* topks) {
    return mpirun(2, fmt::format("sweep --out {} --tokens 37 --hidden 32 --mlp-dim 24 --experts 8 --impl "
                                 "fused_w13 --distribution random --iters 2 --warmup 1 --ceiling off "
                                 "--parallel-mode ep --ep-comm-path all_to_all --topk-list {}",
                                 store, topks));
  };
  const testing::Ran first = sweep("1");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(testing::split_lines(testing::read_file(store)).size(), 1u);
  const testing::Ran wider = sweep("1,2");
  ASSERT_EQ(wider.exit_code, 0) << wider.out << wider.err;
  EXPECT_EQ(count(wider.err, "1 of 2 runs were in"), 1) << wider.err;  // rank 0 alone says so
  const testing::Ran again = sweep("2,1");
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(count(again.err, "2 of 2 runs were in"), 1) << again.err;
  const std::vector<std::string> rows = testing::split_lines(testing::read_file(store));
  ASSERT_EQ(rows.size(), 2u) << testing::read_file(store);
  for (const std::string& row : rows) EXPECT_NE(row.find("\"world_size\":2"), std::string::npos) << row;
}

TEST(MpiCli, BadMeshIsOneLineOnEveryRankAndExitTwo) {
  REQUIRE_MPI();
  for (const char* flags :
       {"--parallel-mode ep --experts 6", "--parallel-mode none", "--parallel-mode dp --tokens 3"}) {
    const testing::Ran r =
        mpirun(4, fmt::format("--tokens 37 --hidden 16 --mlp-dim 8 --experts 8 --topk 2 {}", flags));
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.out << r.err;
    EXPECT_EQ(count(r.err, "moe-bench: error: "), 4) << flags << "\n" << r.err;
    EXPECT_EQ(r.out.find("RESULT"), std::string::npos) << r.out;
  }
}

// One rank's refusal after MPI starts (a --trace-dir that is a file on its host only) ends every rank at
// once with that rank's line, printed once (issue 41 item 2: the other rank waited forever in the first
// all-gather).
TEST(MpiCli, OneRanksRefusalEndsEveryRankWithItsLineOnce) {
  REQUIRE_MPI();
  const std::string shape =
      "--tokens 64 --hidden 32 --mlp-dim 32 --experts 8 --topk 2 --iters 1 --warmup 0 --impl fused_w13 "
      "--distribution random --parallel-mode ep --ceiling off";
  const auto start = std::chrono::steady_clock::now();
  const testing::Ran r = testing::run_command(
      fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 60 {} "
                  "--oversubscribe --bind-to none -np 1 {} {} : -np 1 {} {} --trace-dir /proc/version",
                  kMpiexec, MOE_BENCH_BINARY, shape, MOE_BENCH_BINARY, shape));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "the job hung until timeout killed it";
  EXPECT_LT(seconds, 10.0) << r.err;
  EXPECT_EQ(count(r.err, "moe-bench: error: "), 1) << r.err;
  EXPECT_NE(r.err.find("--trace-dir"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("RESULT"), std::string::npos) << r.out;
}

// --help under mpirun: every rank parses it and exits 0, rank 0 alone prints it (so does a subcommand's).
TEST(MpiCli, HelpIsPrintedOnce) {
  REQUIRE_MPI();
  for (const char* args : {"--help", "sweep --help", "table --help"}) {
    const testing::Ran r = mpirun(2, args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.out << r.err;
    EXPECT_EQ(count(r.out, "Usage:"), 1) << args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace moe
