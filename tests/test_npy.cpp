// .npy writer/reader (numpy's exact header, 64-byte data alignment, bf16 widening), --dump directories
// (file set, config.json, errors) and the captured environment.
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "moe/dump.h"
#include "moe/environment.h"
#include "moe/npy.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// Each test writes into its own fresh directory, removed afterwards.
class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("moe_test_npy_{}_{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Data offset = 10-byte prefix + the little-endian uint16 header length stored at bytes 8..9.
size_t data_offset(const std::string& bytes) {
  return 10 + (size_t(uint8_t(bytes[8])) | size_t(uint8_t(bytes[9])) << 8);
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

Tensor random_tensor(Dtype dtype, std::vector<int64_t> shape, std::mt19937_64& gen) {
  Tensor t(dtype, std::move(shape));
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(gen));
  return t;
}

// ------------------------------------------------------------------------------------------------ npy

TEST_F(NpyTest, HeaderIsNumpysByteForByte) {
  std::vector<float> v(12, 1.5f);
  ASSERT_TRUE(write_npy(path("a.npy"), v, {3, 4}));
  std::string bytes = read_bytes(path("a.npy"));
  // np.save(np.ones((3, 4), np.float32) * 1.5) with numpy >= 1.23: dict, 20 growth-axis spaces, padding
  // to 128 bytes, newline.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
  std::string expected = std::string("\x93NUMPY\x01\x00", 8) + std::string("\x76\x00", 2) + dict;
  expected.append(128 - 1 - expected.size(), ' ');
  expected += '\n';
  ASSERT_EQ(bytes.size(), 128u + 12 * 4);
  EXPECT_EQ(bytes.substr(0, 128), expected);
  EXPECT_EQ(data_offset(bytes), 128u);
}

TEST_F(NpyTest, EveryWriterRoundTripsEveryShape) {
  std::mt19937_64 gen(testing::test_seed());
  const std::vector<std::pair<std::vector<int64_t>, std::string>> shapes = {
      {{}, "()"}, {{5}, "(5,)"}, {{3, 4}, "(3, 4)"}, {{2, 3, 4}, "(2, 3, 4)"}, {{0, 4}, "(0, 4)"}};
  for (const auto& [shape, repr] : shapes) {
    SCOPED_TRACE(repr);
    const size_t n = size_t(numel(shape));
    std::vector<int32_t> vi(n);
    std::vector<float> vf(n);
    std::vector<double> vd(n);
    std::normal_distribution<double> normal;
    for (size_t i = 0; i < n; ++i) {
      vi[i] = int32_t(gen());
      vf[i] = float(normal(gen));
      vd[i] = normal(gen);
    }
    ASSERT_TRUE(write_npy(path("i.npy"), vi, shape));
    ASSERT_TRUE(write_npy(path("f.npy"), vf, shape));
    ASSERT_TRUE(write_npy(path("d.npy"), vd, shape));

    for (auto [file, descr] : {std::pair{"i.npy", "<i4"}, {"f.npy", "<f4"}, {"d.npy", "<f8"}}) {
      std::string bytes = read_bytes(path(file));
      EXPECT_EQ(data_offset(bytes) % 64, 0u) << file;
      EXPECT_NE(
          bytes.find(fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, repr)),
          std::string::npos)
          << file;
      std::string got_descr;
      std::vector<int64_t> got_shape;
      ASSERT_TRUE(read_npy_header(path(file), got_descr, got_shape));
      EXPECT_EQ(got_descr, descr);
      EXPECT_EQ(got_shape, shape);
    }

    std::vector<int64_t> s;
    std::vector<int32_t> ri;
    std::vector<float> rf;
    std::vector<double> rd;
    ASSERT_TRUE(read_npy_i32(path("i.npy"), ri, s));
    EXPECT_EQ(s, shape);
    EXPECT_EQ(ri, vi);
    ASSERT_TRUE(read_npy_f32(path("f.npy"), rf, s));
    EXPECT_EQ(rf, vf);
    ASSERT_TRUE(read_npy_f64(path("d.npy"), rd, s));
    EXPECT_EQ(rd, vd);
  }
  // The temporaries were all renamed away.
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"i.npy", "f.npy", "d.npy"}));
}

TEST_F(NpyTest, TensorsWriteAsFloat32AndBf16WidensExactly) {
  std::mt19937_64 gen(testing::test_seed());
  // More elements than one widening block, so the block loop's tail is exercised too.
  for (Dtype dtype : {Dtype::f32, Dtype::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor t = random_tensor(dtype, {3, 30000}, gen);
    ASSERT_TRUE(write_npy(path("t.npy"), t));
    std::vector<float> back;
    std::vector<int64_t> shape;
    ASSERT_TRUE(read_npy_f32(path("t.npy"), back, shape));
    EXPECT_EQ(shape, t.shape());
    ASSERT_EQ(int64_t(back.size()), t.numel());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (dtype == Dtype::bf16)
        mismatches += f32_to_bf16(back[size_t(i)]) != t.data<bf16_t>()[i] || back[size_t(i)] != t.get(i);
      else
        mismatches += back[size_t(i)] != t.data<float>()[i];
    }
    EXPECT_EQ(mismatches, 0);
  }
  Tensor empty(Dtype::bf16, {0, 4});
  ASSERT_TRUE(write_npy(path("e.npy"), empty));
  std::vector<float> back;
  std::vector<int64_t> shape;
  ASSERT_TRUE(read_npy_f32(path("e.npy"), back, shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(back.empty());
}

TEST_F(NpyTest, Float16TensorsWriteAsNumpysFloat16) {
  std::mt19937_64 gen(testing::test_seed());
  Tensor t = random_tensor(Dtype::f16, {3, 30000}, gen);
  EXPECT_STREQ(npy_descr(Dtype::f16), "<f2");
  ASSERT_TRUE(write_npy(path("h.npy"), t));
  std::string descr;
  std::vector<int64_t> shape;
  ASSERT_TRUE(read_npy_header(path("h.npy"), descr, shape));
  EXPECT_EQ(descr, "<f2");
  EXPECT_EQ(shape, t.shape());
  std::vector<f16_t> back;
  ASSERT_TRUE(read_npy_f16(path("h.npy"), back, shape));
  ASSERT_EQ(int64_t(back.size()), t.numel());
  EXPECT_EQ(std::memcmp(back.data(), t.raw(), t.bytes()), 0);
  std::vector<float> as_f32;
  EXPECT_FALSE(read_npy_f32(path("h.npy"), as_f32, shape));  // '<f2', not '<f4'
}

TEST_F(NpyTest, ErrorsNameThePath) {
  std::string missing_dir = path("no/such/dir/a.npy");
  Status s = write_npy(missing_dir, std::vector<float>{1, 2}, {2});
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(missing_dir), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);

  std::vector<float> f;
  std::vector<int32_t> i;
  std::vector<int64_t> shape;
  s = read_npy_f32(path("absent.npy"), f, shape);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(path("absent.npy")), std::string::npos) << s.message();

  std::ofstream(path("text.npy")) << "not numpy at all";
  s = read_npy_f32(path("text.npy"), f, shape);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();

  ASSERT_TRUE(write_npy(path("f.npy"), std::vector<float>{1, 2, 3}, {3}));
  s = read_npy_i32(path("f.npy"), i, shape);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("'<f4'"), std::string::npos) << s.message();

  std::string bytes = read_bytes(path("f.npy"));
  std::ofstream(path("short.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  s = read_npy_f32(path("short.npy"), f, shape);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("data bytes"), std::string::npos) << s.message();
}

// A shape that does not match the data is a caller bug, not a user error.
TEST(NpyDeathTest, MismatchedShapesAbort) {
  EXPECT_DEATH((void)write_npy("/dev/null/unused.npy", Tensor()), "unallocated tensor");
  EXPECT_DEATH((void)write_npy("/dev/null/unused.npy", std::vector<float>(3), {2, 2}),
               "3 values for shape \\(2, 2\\)");
}

// ----------------------------------------------------------------------------------------------- dump

struct Problem {
  MoeConfig cfg;
  MoeInputs in;
  Routing routing;
  Tensor out;
  MoeGrads grads;
};

// Built by hand (not make_inputs/make_routing) so these tests exercise only the dump.
Problem tiny_problem(Dtype dtype, int64_t S, std::mt19937_64& gen) {
  Problem p;
  MoeConfig& c = p.cfg;
  c.tokens = 5, c.hidden = 4, c.mlp_dim = 3, c.experts = 3, c.topk = 2, c.shared_expert_dim = S,
  c.dtype = dtype;
  const int64_t T = c.tokens, H = c.hidden, M = c.mlp_dim, E = c.experts, K = c.topk;
  p.in.x = random_tensor(dtype, {T, H}, gen);
  p.in.w1 = random_tensor(dtype, {E, H, M}, gen);
  p.in.w3 = random_tensor(dtype, {E, H, M}, gen);
  p.in.w2 = random_tensor(dtype, {E, M, H}, gen);
  p.grads.dx = random_tensor(dtype, {T, H}, gen);
  p.grads.dw1 = random_tensor(dtype, {E, H, M}, gen);
  p.grads.dw3 = random_tensor(dtype, {E, H, M}, gen);
  p.grads.dw2 = random_tensor(dtype, {E, M, H}, gen);
  if (S > 0) {
    p.in.sw1 = random_tensor(dtype, {H, S}, gen);
    p.in.sw3 = random_tensor(dtype, {H, S}, gen);
    p.in.sw2 = random_tensor(dtype, {S, H}, gen);
    p.grads.dsw1 = random_tensor(dtype, {H, S}, gen);
    p.grads.dsw3 = random_tensor(dtype, {H, S}, gen);
    p.grads.dsw2 = random_tensor(dtype, {S, H}, gen);
  }
  p.routing.tokens = T, p.routing.topk = K, p.routing.experts = E;
  for (int64_t t = 0; t < T; ++t) {
    int32_t first = int32_t(gen() % uint64_t(E));
    float w = std::uniform_real_distribution<float>(0.5f, 1.0f)(gen);
    p.routing.ids.insert(p.routing.ids.end(), {first, int32_t((first + 1) % E)});
    p.routing.weights.insert(p.routing.weights.end(), {w, 1 - w});
  }
  p.out = random_tensor(dtype, {T, H}, gen);
  return p;
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_bytes(path));
}

TEST_F(NpyTest, DumpForwardWithSharedExpert) {
  std::mt19937_64 gen(testing::test_seed());
  Problem p = tiny_problem(Dtype::bf16, 2, gen);
  fs::path dump = dir_ / "nested" / "fwd";
  Status s = write_dump(dump.string(), p.cfg, R"({"kernel": {"threads": 2}, "note": "test"})", p.in,
                        p.routing, p.out, nullptr);
  ASSERT_TRUE(s) << s.message();

  const std::set<std::string> expected = {
      "x.npy",         "w1.npy",       "w2.npy",           "w3.npy",  "shared_w1.npy", "shared_w2.npy",
      "shared_w3.npy", "topk_ids.npy", "topk_weights.npy", "out.npy", "config.json"};
  EXPECT_EQ(files_in(dump), expected);

  nlohmann::json cfg = read_json((dump / "config.json").string());
  EXPECT_EQ(cfg["tokens"], 5);
  EXPECT_EQ(cfg["dtype"], "bfloat16");
  EXPECT_EQ(cfg["kernel"]["threads"], 2);
  EXPECT_EQ(cfg["note"], "test");
  ASSERT_TRUE(cfg["notes"].is_array());
  EXPECT_NE(cfg["notes"].dump().find("widened to float32 exactly"), std::string::npos);

  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"x.npy", {5, 4}},         {"w1.npy", {3, 4, 3}},     {"w2.npy", {3, 3, 4}},
      {"w3.npy", {3, 4, 3}},     {"shared_w1.npy", {4, 2}}, {"shared_w2.npy", {2, 4}},
      {"shared_w3.npy", {4, 2}}, {"topk_ids.npy", {5, 2}},  {"topk_weights.npy", {5, 2}},
      {"out.npy", {5, 4}}};
  ASSERT_EQ(cfg["files"].size(), shapes.size());
  for (const auto& [name, shape] : shapes) {
    SCOPED_TRACE(name);
    const nlohmann::json& f = cfg["files"][name];
    EXPECT_EQ(f["shape"].get<std::vector<int64_t>>(), shape);
    std::string descr;
    std::vector<int64_t> on_disk;
    ASSERT_TRUE(read_npy_header((dump / name).string(), descr, on_disk));
    EXPECT_EQ(on_disk, shape);
    EXPECT_EQ(f["npy_descr"], descr);
    EXPECT_EQ(f["dtype"], name == "topk_ids.npy"       ? "int32"
                          : name == "topk_weights.npy" ? "float32"
                                                       : "bfloat16");
  }

  std::vector<float> x;
  std::vector<int32_t> ids;
  std::vector<int64_t> shape;
  ASSERT_TRUE(read_npy_f32((dump / "x.npy").string(), x, shape));
  for (int64_t i = 0; i < p.in.x.numel(); ++i) EXPECT_EQ(x[size_t(i)], p.in.x.get(i));
  ASSERT_TRUE(read_npy_i32((dump / "topk_ids.npy").string(), ids, shape));
  EXPECT_EQ(ids, p.routing.ids);
}

TEST_F(NpyTest, DumpOfAFloat16RunKeepsFloat16) {
  std::mt19937_64 gen(testing::test_seed());
  Problem p = tiny_problem(Dtype::f16, 2, gen);
  ASSERT_TRUE(write_dump(dir_.string(), p.cfg, "{}", p.in, p.routing, p.out, &p.grads));
  nlohmann::json cfg = read_json((dir_ / "config.json").string());
  EXPECT_EQ(cfg["dtype"], "float16");
  for (const char* name : {"x.npy", "w2.npy", "shared_w1.npy", "out.npy", "grad_w1.npy"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(cfg["files"][name]["dtype"], "float16");
    EXPECT_EQ(cfg["files"][name]["npy_descr"], "<f2");
  }
  EXPECT_EQ(cfg["files"]["topk_weights.npy"]["npy_descr"], "<f4");
  std::vector<f16_t> x;
  std::vector<int64_t> shape;
  ASSERT_TRUE(read_npy_f16((dir_ / "x.npy").string(), x, shape));
  ASSERT_EQ(int64_t(x.size()), p.in.x.numel());
  EXPECT_EQ(std::memcmp(x.data(), p.in.x.raw(), p.in.x.bytes()), 0);
}

TEST_F(NpyTest, DumpForwardBackwardWithoutSharedExpert) {
  std::mt19937_64 gen(testing::test_seed());
  Problem p = tiny_problem(Dtype::f32, 0, gen);
  // Dumping twice into the same directory replaces the first dump.
  ASSERT_TRUE(write_dump(dir_.string(), p.cfg, "{}", p.in, p.routing, p.out, nullptr));
  Status s = write_dump(dir_.string(), p.cfg, "{}", p.in, p.routing, p.out, &p.grads);
  ASSERT_TRUE(s) << s.message();

  const std::set<std::string> expected = {"x.npy",        "w1.npy",           "w2.npy",      "w3.npy",
                                          "topk_ids.npy", "topk_weights.npy", "out.npy",     "grad_x.npy",
                                          "grad_w1.npy",  "grad_w2.npy",      "grad_w3.npy", "config.json"};
  EXPECT_EQ(files_in(dir_), expected);
  nlohmann::json cfg = read_json(path("config.json"));
  EXPECT_EQ(cfg["files"].size(), expected.size() - 1);
  EXPECT_EQ(cfg["files"]["grad_w2.npy"]["shape"].get<std::vector<int64_t>>(),
            (std::vector<int64_t>{3, 3, 4}));
  EXPECT_EQ(cfg["files"]["grad_x.npy"]["dtype"], "float32");

  std::vector<float> dw1;
  std::vector<int64_t> shape;
  ASSERT_TRUE(read_npy_f32(path("grad_w1.npy"), dw1, shape));
  EXPECT_EQ(0, std::memcmp(dw1.data(), p.grads.dw1.raw(), p.grads.dw1.bytes()));
}

TEST_F(NpyTest, DumpIntoAFileFails) {
  std::mt19937_64 gen(testing::test_seed());
  Problem p = tiny_problem(Dtype::f32, 0, gen);
  std::ofstream(path("taken")) << "x";
  Status s = write_dump(path("taken"), p.cfg, "{}", p.in, p.routing, p.out, nullptr);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(path("taken")), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);

  // A directory below a regular file cannot be created either.
  s = write_dump(path("taken/sub"), p.cfg, "{}", p.in, p.routing, p.out, nullptr);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(path("taken/sub")), std::string::npos) << s.message();
}

// ---------------------------------------------------------------------------------------- environment

TEST(Environment, FieldsAreFilledAndPrintAsFlatJson) {
  Environment env = capture_environment();
  for (const std::string* f : {&env.git_commit, &env.cpu_model, &env.cpu_id, &env.isa, &env.cpu_extensions,
                               &env.gemm_library, &env.compiler, &env.moe_version, &env.date, &env.hostname})
    EXPECT_FALSE(f->empty());
  // cpu_id as Linux names the CPU (/proc/cpuinfo's vendor_id, cpu family and model), where it does.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::map<std::string, std::string> first;
  for (std::string line; std::getline(cpuinfo, line) && !line.empty();)
    if (const size_t colon = line.find(':'); colon != std::string::npos) {
      std::string key = line.substr(0, colon);
      key.erase(key.find_last_not_of(" \t") + 1);
      first[key] = line.substr(std::min(line.size(), colon + 2));
    }
  if (first.count("vendor_id") && first.count("cpu family") && first.count("model")) {
    EXPECT_EQ(env.cpu_id, first["vendor_id"] + " family " + first["cpu family"] + " model " + first["model"]);
  }
  EXPECT_GE(env.threads, 1);
  ASSERT_EQ(env.date.size(), 20u) << env.date;  // 2024-05-01T12:34:56Z
  EXPECT_EQ(env.date[10], 'T');
  EXPECT_EQ(env.date.back(), 'Z');

  nlohmann::json j = nlohmann::json::parse(env.to_json());
  EXPECT_EQ(j.size(), 11u);
  for (const auto& [key, value] : j.items()) EXPECT_TRUE(value.is_primitive()) << key;
  EXPECT_EQ(j["threads"], env.threads);
  EXPECT_EQ(j["isa"], env.isa);
}

}  // namespace
}  // namespace moe
