// auto measured, not list order (cpu/gemm/gemm.h, src/cpu/gemm/tuning.h): the first call of a shape class
// times each variant that takes it and keeps the fastest in the tuning file; later tables read it; --tune
// measures again; a corrupt, foreign or unreadable file is ignored with one warning line and never written
// over; an entry naming a variant that cannot run here is never taken. Files live in a temp dir of the test's
// own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "cpu/gemm/tuning.h"
#include "moe/reference.h"
#include "moe/rng.h"
#include "moe/tensor.h"
#include "test_util.h"

namespace moe {
namespace {

// A grouped float32 nn of groups of 40 and 33 rows (one call: both on one side of gemv's kGemvMaxRows, so the
// table splits none; above kFewRows, so measured back to back), with fresh inputs.
struct NnCase {
  std::vector<int64_t> offset{0, 40, 40, 73};  // (E+1)
  Tensor lhs, rhs;                             // (73, 16), (3, 16, 24)
  explicit NnCase(uint64_t seed) : lhs(Dtype::f32, {73, 16}), rhs(Dtype::f32, {3, 16, 24}) {
    const uint64_t key = derive_key(seed, 7);
    for (int64_t i = 0; i < lhs.numel(); ++i) lhs.set(i, random_normal(key, uint64_t(i)));
    for (int64_t i = 0; i < rhs.numel(); ++i) rhs.set(i, random_normal(key, uint64_t(1000 + i)));
  }
  GroupedShape groups() const { return {offset.data(), 3}; }
  // Runs it and returns the output.
  Tensor run(GemmKernels& table) const {
    Tensor out(Dtype::f32, {73, 24});
    table.nn(out.raw(), Dtype::f32, lhs.raw(), rhs.raw(), Dtype::f32, groups(), 16, 24);
    return out;
  }
};

// How many variants auto may measure for it here (the reference is not one).
int candidates() {
  GemmCall call;
  call.rows = 33;
  call.experts = 3;
  call.Kd = 16;
  call.N = 24;
  int n = 0;
  for (const GemmVariant& v : gemm_variants())
    n += v.tunable && v.unavailable().empty() && v.supports(call, GemmThresholds{}).empty();
  return n;
}

KernelConfig config_for(const std::string& path) {
  KernelConfig k;
  k.tuning_file = path;
  return k;
}

#define MOE_SKIP_WITHOUT_A_CHOICE() \
  if (candidates() < 2) GTEST_SKIP() << "one GEMM variant takes this call here: nothing to measure"

TEST(Tuning, AutoMeasuresOnceKeepsTheFastestAndLaterTablesReadIt) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const std::string path = testing::temp_dir("tuning_once") + "/sub/tuning.json";  // the directory is made
  const NnCase c(testing::test_seed());
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  c.run(table);
  c.run(table);
  EXPECT_EQ(table.measurements(), 1);
  const std::string ran = table.take_choices();
  const nlohmann::json doc = nlohmann::json::parse(testing::read_file(path));
  EXPECT_EQ(doc["format"], "moe-bench tuning 1");
  EXPECT_EQ(doc["cpu_model"], cpu_isa().model);
  ASSERT_EQ(doc["entries"].size(), 1u) << doc.dump();
  const auto& entry = doc["entries"].begin().value();
  EXPECT_EQ(ran, "nn:" + entry["variant"].get<std::string>());
  EXPECT_EQ(entry["seconds"].size(), size_t(candidates()));
  // A later process: reads it, measures nothing, takes the same variant.
  GemmTuner later(path, false);
  GemmKernels again(config_for(path), &later);
  c.run(again);
  EXPECT_EQ(again.measurements(), 0);
  EXPECT_EQ(again.take_choices(), ran);
  // --tune: measures again.
  GemmTuner retune(path, true);
  GemmKernels tuned(config_for(path), &retune);
  c.run(tuned);
  EXPECT_EQ(tuned.measurements(), 1);
}

// An int8 call whose weights come with their WeightPacks (kept across calls: a kernel packs them once) is a
// shape class of its own: auto measures it apart from the same call with weights packed in every call.
TEST(Tuning, Int8WeightsKeptAreAClassOfTheirOwn) {
  GemmCall plain;
  plain.form = GemmForm::nn_s8;
  plain.in_dtype = plain.b_dtype = Dtype::s8;
  plain.out_dtype = Dtype::bf16;
  plain.rows = 33;
  plain.experts = 3;
  plain.Kd = 16;
  plain.N = 24;
  GemmCall kept = plain;
  kept.weights_kept = true;
  EXPECT_NE(plain.shape_class(), kept.shape_class());
  EXPECT_NE(kept.shape_class().find(" kept"), std::string::npos) << kept.shape_class();
  int int8_candidates = 0;
  for (const GemmVariant& v : gemm_variants())
    int8_candidates += v.tunable && v.unavailable().empty() && v.supports(plain, GemmThresholds{}).empty();
  if (int8_candidates < 2) GTEST_SKIP() << "one int8 GEMM variant runs here: nothing to measure";
  const std::string path = testing::temp_dir("tuning_int8_kept") + "/tuning.json";
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  const int64_t offset[] = {0, 20, 20, 53};
  const std::vector<int8_t> lhs(53 * 16, 3), rhs(3 * 16 * 24, -2);
  const std::vector<float> ls(53, 1.0f), rs(3, 1.0f);
  Tensor out(Dtype::bf16, {53, 24});
  WeightPacks packs;
  Int8Operands in{lhs.data(), ls.data(), rhs.data(), rs.data()};
  table.nn_s8(out.raw(), Dtype::bf16, in, {offset, 3}, 16, 24);
  EXPECT_EQ(table.measurements(), 1);
  in.rhs_packs = &packs;
  table.nn_s8(out.raw(), Dtype::bf16, in, {offset, 3}, 16, 24);
  EXPECT_EQ(table.measurements(), 2) << "weights kept: measured again, as a class of its own";
  table.nn_s8(out.raw(), Dtype::bf16, in, {offset, 3}, 16, 24);
  EXPECT_EQ(table.measurements(), 2);
}

// time_candidates on scripted call times (no clock): each candidate's calls return its script in turn.
struct ScriptedCalls {
  std::vector<std::vector<double>> script;  // per candidate, the seconds of its calls in order
  std::vector<size_t> order;                // which candidate each call ran
  std::vector<double> run() {
    std::vector<size_t> made(script.size(), 0);
    return time_candidates(script.size(), [&](size_t i) {
      order.push_back(i);
      EXPECT_LT(made[i], script[i].size()) << "candidate " << i << " called more often than scripted";
      return script[i][std::min(made[i]++, script[i].size() - 1)];
    });
  }
};

TEST(Tuning, ASlowTimedCallDoesNotLoseTheFasterKernel) {
  // Candidate 0 is the faster kernel, but the machine was busy during its first timed call: one timed
  // call each would keep candidate 1. The extra rounds alternate and keep each one's fastest call.
  ScriptedCalls calls{{{0.010, 0.030, 0.010, 0.011}, {0.020, 0.020, 0.021, 0.019}}, {}};
  const std::vector<double> t = calls.run();
  EXPECT_EQ(t, (std::vector<double>{0.010, 0.019}));
  EXPECT_EQ(calls.order, (std::vector<size_t>{0, 0, 1, 1, 1, 0, 0, 1})) << "warm, timed; then in turns";
}

TEST(Tuning, AColdClassKeepsGemvUnlessAnotherBeatsItByTheMargin) {
  const std::vector<double> times{0.70e-3, 0.50e-3, 0.42e-3};  // dpbf16, gemv, onednn, say
  EXPECT_EQ(pick_candidate(times, std::nullopt), 2u) << "no preference: the fastest";
  EXPECT_EQ(pick_candidate(times, 1), 1u) << "0.42 is within the margin of 0.50";
  EXPECT_EQ(pick_candidate({0.70e-3, 0.50e-3, 0.38e-3}, 1), 2u) << "0.38 beats 0.50 by more than the margin";
  EXPECT_EQ(pick_candidate({0.70e-3, 0.40e-3, 0.46e-3}, 1), 1u) << "the preferred one is also the fastest";
}

// A bf16 nn call of groups of at most `rows` rows.
GemmCall bf16_nn_call(int64_t rows, int64_t experts, int64_t Kd, int64_t N) {
  GemmCall call;
  call.in_dtype = call.b_dtype = call.out_dtype = Dtype::bf16;
  call.rows = rows;
  call.experts = experts;
  call.Kd = Kd;
  call.N = N;
  return call;
}

// Wired into auto: a few-row bf16 class on kept weights records the pick pick_candidate makes of its
// recorded seconds with the faster of gemv and amx preferred; the same class on weights read in place, the
// fastest.
TEST(Tuning, FewRowClassesOnKeptWeightsPreferAPackingVariant) {
  const std::vector<int64_t> offset{0, 3, 3, 7};  // (E+1): 3 experts of 3, 0 and 4 rows
  std::vector<bf16_t> lhs(7 * 32), rhs(3 * 32 * 48), out(7 * 48);
  for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = f32_to_bf16(float(i % 7) / 8.0f);
  for (size_t i = 0; i < rhs.size(); ++i) rhs[i] = f32_to_bf16(float(i % 5) / 16.0f - 0.1f);
  for (const bool kept : {true, false}) {
    const std::string path =
        testing::temp_dir(kept ? "tuning_gemv_kept" : "tuning_gemv_in_place") + "/t.json";
    GemmTuner tuner(path, false);
    GemmKernels table(config_for(path), &tuner);
    WeightPacks packs;
    const ExpertWeights w = kept ? ExpertWeights(rhs.data()).kept(&packs) : ExpertWeights(rhs.data());
    table.nn(out.data(), Dtype::bf16, lhs.data(), w, Dtype::bf16, {offset.data(), 3}, 32, 48);
    const nlohmann::json doc = nlohmann::json::parse(testing::read_file(path));
    ASSERT_EQ(doc["entries"].size(), 1u) << doc.dump();
    const nlohmann::json& entry = doc["entries"].begin().value();
    if (entry["seconds"].size() < 2 || !entry["seconds"].contains("gemv")) GTEST_SKIP() << entry.dump();
    std::vector<double> times;
    std::vector<std::string> names;
    for (const auto& [name, seconds] : entry["seconds"].items()) {
      names.push_back(name);
      times.push_back(seconds.get<double>());
    }
    GemmCall call = bf16_nn_call(4, 3, 32, 48);
    call.weights_kept = kept;
    EXPECT_EQ(entry["variant"], names[pick_candidate(times, preferred_candidate(call, names, times))])
        << entry.dump();
  }
}

// The variants that read their own packing of kept weights (gemv, amx): the faster of them, on a cold call's
// kept weights only.
TEST(Tuning, APackingVariantIsPreferredOnAColdCallsKeptWeightsOnly) {
  GemmCall call = bf16_nn_call(4, 8, 768, 2048);
  const std::vector<std::string> names{"amx", "dpbf16", "gemv", "onednn"};
  const std::vector<double> times{0.60e-3, 0.70e-3, 0.50e-3, 0.42e-3};
  EXPECT_EQ(preferred_candidate(call, names, times), std::nullopt) << "weights read in place: measured alone";
  call.weights_kept = true;
  EXPECT_EQ(preferred_candidate(call, names, times), std::optional<size_t>(2)) << "gemv: faster than amx";
  EXPECT_EQ(preferred_candidate(call, names, {0.45e-3, 0.70e-3, 0.50e-3, 0.42e-3}), std::optional<size_t>(0))
      << "amx: faster than gemv";
  EXPECT_EQ(preferred_candidate(call, {"dpbf16", "onednn"}, {0.70e-3, 0.42e-3}), std::nullopt)
      << "neither among them";
  call.rows = kFewRows + 1;
  EXPECT_EQ(preferred_candidate(call, names, times), std::nullopt) << "not a few-row call";
}

TEST(Tuning, AHopelessCandidateRunsOnceAndOnlyContendersRunAgain) {
  // 2: its first call took over 8x the best first call; 1: timed at over 1.6x the best, not re-timed.
  ScriptedCalls calls{{{0.010, 0.010, 0.012, 0.011}, {0.020, 0.017}, {0.090}}, {}};
  const std::vector<double> t = calls.run();
  EXPECT_EQ(t, (std::vector<double>{0.010, 0.017, 0.090}));
  EXPECT_EQ(calls.order, (std::vector<size_t>{0, 0, 1, 1, 2})) << "no second contender: no extra rounds";
}

TEST(Tuning, ExtraRoundsStopOnceTheyHaveTakenThreeSeconds) {
  // Calls of 2 s: one extra round (4 s) passes the budget, so there is no second one.
  ScriptedCalls calls{{{2.0, 2.0, 1.9}, {2.0, 2.1, 2.2}}, {}};
  const std::vector<double> t = calls.run();
  EXPECT_EQ(t, (std::vector<double>{1.9, 2.1}));
  EXPECT_EQ(calls.order, (std::vector<size_t>{0, 0, 1, 1, 1, 0}));
}

// One table serves every thread that calls it (the thread comm's ranks share the cpu backend's): threads
// meeting new shape classes at once measure each class once and agree on its variant, and calls that
// alternate between classes (each thread's fatal-signal text changes every call) corrupt nothing. Before
// the table's lock the ranks' concurrent decisions and texts corrupted the heap within a few runs.
TEST(Tuning, ThreadsCallingOneTableAtOnceMeasureOnceAndAgree) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const uint64_t seed = testing::test_seed();
  const NnCase c(seed);
  Tensor a(Dtype::f32, {5, 7}), b(Dtype::f32, {7, 9});
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, random_normal(seed, uint64_t(i)));
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, random_normal(seed, uint64_t(100 + i)));
  auto dense = [&](GemmKernels& table) {
    Tensor out(Dtype::f32, {5, 9});
    table.dense(out.raw(), Dtype::f32, a.raw(), Dtype::f32, b.raw(), Dtype::f32, 5, 7, 9);
    return out;
  };
  const std::string serial_path = testing::temp_dir("tuning_serial") + "/tuning.json";
  GemmTuner serial_tuner(serial_path, false);
  GemmKernels serial(config_for(serial_path), &serial_tuner);
  c.run(serial);
  dense(serial);
  const std::string path = testing::temp_dir("tuning_threads") + "/tuning.json";
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  constexpr int kThreads = 4, kCalls = 40;
  std::vector<Tensor> nn_out(kThreads), dense_out(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        nn_out[size_t(t)] = c.run(table);
        dense_out[size_t(t)] = dense(table);
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(table.measurements(), serial.measurements()) << "each class measured once";
  for (int t = 1; t < kThreads; ++t) {
    EXPECT_EQ(std::memcmp(nn_out[size_t(t)].raw(), nn_out[0].raw(), nn_out[0].bytes()), 0) << "thread " << t;
    EXPECT_EQ(std::memcmp(dense_out[size_t(t)].raw(), dense_out[0].raw(), dense_out[0].bytes()), 0) << t;
  }
  const Tensor want = c.run(serial);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(nn_out[0].get(i), want.get(i), 1e-4 * (1 + std::fabs(want.get(i)))) << i;
}

// --gemm-variant overrides: nothing measured, nothing written.
TEST(Tuning, ANamedVariantIsNeverMeasured) {
  const std::string path = testing::temp_dir("tuning_named") + "/tuning.json";
  KernelConfig k = config_for(path);
  k.gemm_variant = "portable";
  GemmTuner tuner(path, false);
  GemmKernels table(k, &tuner);
  NnCase(testing::test_seed()).run(table);
  EXPECT_EQ(table.measurements(), 0);
  EXPECT_EQ(table.take_choices(), "nn:portable");
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A file we cannot take: one warning line, the results right, the file as it was, measured in memory.
void expect_ignored(const std::string& name, const std::string& content, const std::string& why) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const std::string path = testing::temp_dir(name) + "/tuning.json";
  std::ofstream(path) << content;
  const NnCase c(testing::test_seed());
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  KernelConfig plain;
  plain.gemm_variant = "portable";
  GemmKernels reference(plain, nullptr);
  ::testing::internal::CaptureStderr();
  const Tensor got = c.run(table);
  c.run(table);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("tuning file '" + path + "'"), std::string::npos) << err;
  EXPECT_NE(err.find(why), std::string::npos) << err;
  EXPECT_EQ(testing::read_file(path), content) << "never written over";
  EXPECT_EQ(table.measurements(), 1);
  const Tensor want = c.run(reference);
  EXPECT_LE(relative_error(got.to_f64(), want.to_f64()), 1e-5);
}

TEST(Tuning, ACorruptFileIsIgnoredWithOneWarning) {
  expect_ignored("tuning_corrupt", "{\"format\": \"moe-bench tuning 1\", \"entries\": [", "not JSON");
}

TEST(Tuning, AFileOfAnotherFormatIsIgnoredWithOneWarning) {
  expect_ignored("tuning_other", "{\"hello\": 1}\n", "not a moe-bench tuning file");
}

// Keys of the wrong JSON type (a "format" that is no string aborted every auto run with an uncaught type
// error, issue 41 item 1): the file is ignored like any other that is not ours.
TEST(Tuning, KeysOfTheWrongTypeAreIgnoredWithOneWarning) {
  expect_ignored("tuning_format_number", "{\"format\": 1}\n", "not a moe-bench tuning file");
  expect_ignored("tuning_entries_list", R"({"format": "moe-bench tuning 1", "cpu_model": 7, "entries": {}})",
                 "not a moe-bench tuning file");
  // Issue 41 item 3: nested deeper than any JSON reader should follow (it overflowed the stack).
  expect_ignored("tuning_deep", "{\"format\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n",
                 "nested deeper than 256 levels");
}

TEST(Tuning, AForeignCpusFileIsIgnoredWithOneWarning) {
  expect_ignored("tuning_foreign",
                 R"({"format": "moe-bench tuning 1", "cpu_model": "Some Other CPU 9000", "entries": {}})",
                 "made on CPU \"Some Other CPU 9000\"");
}

TEST(Tuning, AnUnreadableFileIsIgnoredWithOneWarning) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const std::string path = testing::temp_dir("tuning_dir") + "/tuning.json";
  std::filesystem::create_directories(path);  // a directory where the file should be
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  ::testing::internal::CaptureStderr();
  NnCase(testing::test_seed()).run(table);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(table.measurements(), 1);
}

// An entry of this CPU naming a variant that does not run here (a hand edit, another build) is not taken.
TEST(Tuning, AnEntryNamingAVariantThatCannotRunHereIsNotTaken) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const std::string dir = testing::temp_dir("tuning_bad_entry"), path = dir + "/tuning.json";
  // Learn the key this machine writes, then point it at a variant no CPU runs.
  {
    GemmTuner tuner(path, false);
    GemmKernels table(config_for(path), &tuner);
    NnCase(testing::test_seed()).run(table);
  }
  nlohmann::json doc = nlohmann::json::parse(testing::read_file(path));
  for (auto& [key, entry] : doc["entries"].items()) entry["variant"] = "amx_from_the_future";
  std::ofstream(path) << doc.dump();
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  NnCase(testing::test_seed()).run(table);
  EXPECT_EQ(table.measurements(), 1);
  EXPECT_EQ(table.take_choices().find("amx_from_the_future"), std::string::npos);
}

// An entry whose measurement did not time every variant that takes its class now (made before one came to
// take it: gemv's groups grew from 32 rows to 64) is stale: the class is measured again, and the new entry,
// timing them all, replaces it in the file; a later process takes that one without measuring.
TEST(Tuning, AnEntryThatDidNotTimeEveryCandidateIsMeasuredAgain) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const std::string path = testing::temp_dir("tuning_stale_entry") + "/tuning.json";
  const NnCase c(testing::test_seed());
  {
    GemmTuner tuner(path, false);
    GemmKernels table(config_for(path), &tuner);
    c.run(table);
  }
  nlohmann::json doc = nlohmann::json::parse(testing::read_file(path));
  ASSERT_EQ(doc["entries"].size(), 1u) << doc.dump();
  nlohmann::json& entry = doc["entries"].begin().value();
  const std::string timed_out = entry["seconds"].begin().key();  // as if that variant took no such class then
  entry["seconds"].erase(timed_out);
  entry["variant"] = entry["seconds"].begin().key();
  std::ofstream(path) << doc.dump();
  GemmTuner tuner(path, false);
  GemmKernels table(config_for(path), &tuner);
  c.run(table);
  EXPECT_EQ(table.measurements(), 1) << "stale: measured again";
  const nlohmann::json after = nlohmann::json::parse(testing::read_file(path));
  EXPECT_TRUE(after["entries"].begin().value()["seconds"].contains(timed_out)) << after.dump();
  GemmTuner later(path, false);
  GemmKernels again(config_for(path), &later);
  c.run(again);
  EXPECT_EQ(again.measurements(), 0) << "the replaced entry times them all";
}

// A choice measured under one OpenMP wait policy is not taken under another (a few-row call's parallel
// regions cost differently: tuned in a passive process, the AMX host's 1-token down kept dpbf16 at half
// gemv's speed in spinning ones): the class is measured again and both entries stay in the file.
TEST(Tuning, AChoiceMeasuredUnderAnotherWaitPolicyIsMeasuredAgain) {
  MOE_SKIP_WITHOUT_A_CHOICE();
  const std::string path = testing::temp_dir("tuning_wait_policy") + "/tuning.json";
  const NnCase c(testing::test_seed());
  const auto measurements = [&](const std::string& wait_policy) {
    GemmTuner tuner(path, false, wait_policy);
    GemmKernels table(config_for(path), &tuner);
    c.run(table);
    return table.measurements();
  };
  EXPECT_EQ(measurements("passive"), 1);
  EXPECT_EQ(measurements("passive"), 0) << "the same policy takes the file's choice";
  EXPECT_EQ(measurements("spin"), 1) << "another policy measures again";
  EXPECT_EQ(measurements("spin"), 0);
  const nlohmann::json doc = nlohmann::json::parse(testing::read_file(path));
  ASSERT_EQ(doc["entries"].size(), 2u) << doc.dump();
  for (const char* policy : {" wait=passive ", " wait=spin "}) {
    bool keyed = false;
    for (const auto& [key, entry] : doc["entries"].items()) keyed |= key.find(policy) != std::string::npos;
    EXPECT_TRUE(keyed) << policy << " in " << doc.dump();
  }
}

// The CLI: --tuning-file is where auto keeps its choices; rows name the kernels per form, the CPU and the
// ISA level (the text RESULT line too, one word per value); --tuning-file none measures nothing. One wait
// policy for both processes: auto's may differ between them, and the second would then measure again.
TEST(Tuning, TheCliKeepsChoicesInTheFileAndRowsNameTheKernels) {
  const std::string dir = testing::temp_dir("tuning_cli"), path = dir + "/t.json";
  const std::string run =
      "--tokens 64 --hidden 32 --mlp-dim 16 --experts 4 --topk 2 --iters 1 --warmup 0 --impl fused_w13 "
      "--bench-pass forward_backward --dtype float32 --ceiling off --wait-policy passive --tuning-file " +
      path;
  const testing::Ran jsonl = testing::run_bench(run + " --format jsonl");
  ASSERT_EQ(jsonl.exit_code, 0) << jsonl.err;
  const nlohmann::json row = nlohmann::json::parse(jsonl.out.substr(0, jsonl.out.find('\n')));
  const std::string kernels = row["gemm_kernels"];
  for (const char* form : {"nn_swiglu:", "nn:", "nt_swiglu_grad:", "nt:", "tn:", "tn_pair:"})
    EXPECT_NE(kernels.find(form), std::string::npos) << form << " in " << kernels;
  EXPECT_EQ(row["cpu_model"], cpu_isa().model);
  EXPECT_EQ(row["device_model"], cpu_isa().model);  // the cpu backend computes on this CPU
  EXPECT_EQ(row["isa"], isa_level_name(isa_level()));
  EXPECT_FALSE(row["gemm_thresholds"].get<std::string>().empty());
  if (candidates() >= 2) {
    // Its choices are keyed by the policy the row says its threads waited under.
    const nlohmann::json doc = nlohmann::json::parse(testing::read_file(path));
    ASSERT_FALSE(doc["entries"].empty()) << doc.dump();
    const std::string wait = " wait=" + row["wait_policy"].get<std::string>() + " ";
    for (const auto& [key, entry] : doc["entries"].items())
      EXPECT_NE(key.find(wait), std::string::npos) << key;
  }
  const testing::Ran text = testing::run_bench(run);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(" gemm_kernels=" + kernels), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" isa=" + std::string(isa_level_name(isa_level()))), std::string::npos) << text.out;
  const testing::Ran none =
      testing::run_bench(run.substr(0, run.find("--tuning-file")) + "--tuning-file none");
  ASSERT_EQ(none.exit_code, 0) << none.err;
}

// --trace-dir's traced call is a warm one: with a fresh tuning file auto measures in the untimed call
// before it (run.cpp checks that the traced call measured nothing; before, the traced call was the
// run's first and its stages held auto's measurements).
TEST(Tuning, TheTracedCallComesAfterAutoHasMeasured) {
  const std::string dir = testing::temp_dir("tuning_trace"), path = dir + "/t.json";
  const testing::Ran ran = testing::run_bench(
      "--tokens 96 --hidden 32 --mlp-dim 16 --experts 4 --topk 2 --iters 1 --warmup 0 --impl fused_w13 "
      "--bench-pass forward_backward --dtype float32 --ceiling off --trace-dir " +
      dir + "/trace --tuning-file " + path);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.out.find("trace_dir="), std::string::npos) << ran.out;
  if (candidates() >= 2) {
    EXPECT_TRUE(std::filesystem::exists(path));
  }
}

}  // namespace
}  // namespace moe
