// Flag values and comma lists (moe/parse.h) read as the seed's argparse reads them, never clamped,
// with one error style; Python's float repr (moe/python_repr.h); the non-finite guard; the thread
// probe.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "bench/harness/finite.h"
#include "bench/harness/threads.h"
#include "moe/parse.h"
#include "moe/python_repr.h"

namespace moe {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();

TEST(Parse, IntegersAsPythonIntReadsThem) {
  const std::pair<const char*, int64_t> good[] = {
      {"42", 42},
      {" 7 ", 7},
      {"+5", 5},
      {"-1", -1},
      {"1_000", 1000},
      {"007", 7},
      {"\t-0\n", 0},
      {"9223372036854775807", kMax},
      {"-9223372036854775808", kMin},
  };
  for (auto [text, want] : good) {
    int64_t v = 0;
    ASSERT_TRUE(parse_int("--x", text, kMin, kMax, v)) << text;
    EXPECT_EQ(v, want) << text;
  }
  const char* not_int[] = {"", " ", "abc", "1.5", "1e3", "0x10", "_1", "1_", "1__0", "--1", "+", "1 2"};
  for (const char* text : not_int) {
    int64_t v = 0;
    Status s = parse_int("--tokens", text, kMin, kMax, v);
    ASSERT_FALSE(s) << text;
    EXPECT_EQ(s.message(), std::string("invalid --tokens '") + text + "': not an integer");
  }
}

TEST(Parse, IntegersOutOfRangeAreRefusedNeverClamped) {
  const char* too_big[] = {"9223372036854775808", "18446744073709551616", "1180591620717411303424",
                           "-9223372036854775809", "99999999999999999999999999999"};
  for (const char* text : too_big) {
    int64_t v = 123;
    Status s = parse_int("--seed", text, kMin, kMax, v);
    ASSERT_FALSE(s) << text;
    EXPECT_NE(s.message().find("out of range"), std::string::npos) << s.message();
    EXPECT_EQ(v, 123) << "untouched on error";
  }
  int64_t v = 0;
  Status s = parse_int("--null-route-seed", "-1", 0, 0xffffffffll, v);
  EXPECT_EQ(s.message(),
            "invalid --null-route-seed '-1': out of range, expected an integer in [0, 4294967295]");
  EXPECT_TRUE(parse_int("--null-route-seed", "4294967295", 0, 0xffffffffll, v));
  EXPECT_FALSE(parse_int("--null-route-seed", "4294967296", 0, 0xffffffffll, v));
}

TEST(Parse, FloatsAsPythonFloatReadsThem) {
  const std::pair<const char*, double> good[] = {
      {"0.5", 0.5}, {" 1e-3 ", 1e-3}, {"+2", 2.0},         {"-0.25", -0.25},      {"1_0.5", 10.5},
      {".5", 0.5},  {"5.", 5.0},      {"1e400", HUGE_VAL}, {"-1e400", -HUGE_VAL}, {"1e-400", 0.0},
  };
  for (auto [text, want] : good) {
    double v = -7;
    ASSERT_TRUE(parse_double("--x", text, v)) << text;
    EXPECT_EQ(v, want) << text;
  }
  double v = 0;
  ASSERT_TRUE(parse_double("--x", "nan", v));
  EXPECT_TRUE(std::isnan(v));
  ASSERT_TRUE(parse_double("--x", "-inf", v));
  EXPECT_EQ(v, -HUGE_VAL);
  for (const char* text : {"", "abc", "0x1p3", "1.5.2", "1e", "_1.0", "1,5"}) {
    Status s = parse_double("--capacity-factor", text, v);
    ASSERT_FALSE(s) << text;
    EXPECT_EQ(s.message(), std::string("invalid --capacity-factor '") + text + "': not a number");
  }
}

TEST(Parse, ListsSkipBlanksAndNameTheBadEntry) {
  std::vector<int64_t> ints;
  ASSERT_TRUE(parse_int_list("--topk-list", " 1, 2,,8 ,", kMin, kMax, ints));
  EXPECT_EQ(ints, (std::vector<int64_t>{1, 2, 8}));
  ASSERT_TRUE(parse_int_list("--topk-list", "", kMin, kMax, ints));
  EXPECT_TRUE(ints.empty());
  EXPECT_EQ(parse_int_list("--topk-list", "1,x", kMin, kMax, ints).message(),
            "invalid --topk-list entry 'x': not an integer");

  std::vector<double> doubles;
  ASSERT_TRUE(parse_double_list("--null-route-frac-list", "0.1, 0.5", doubles));
  EXPECT_EQ(doubles, (std::vector<double>{0.1, 0.5}));
  EXPECT_EQ(parse_double_list("--null-route-frac-list", "0.1,zz", doubles).message(),
            "invalid --null-route-frac-list entry 'zz': not a number");

  enum class Color { red, blue };
  auto parse_color = [](std::string_view s) -> std::optional<Color> {
    if (s == "red") return Color::red;
    if (s == "blue") return Color::blue;
    return std::nullopt;
  };
  std::vector<Color> colors;
  ASSERT_TRUE(parse_enum_list("--colors", "blue, red", parse_color, "red, blue", colors));
  EXPECT_EQ(colors, (std::vector<Color>{Color::blue, Color::red}));
  EXPECT_EQ(parse_enum_list("--colors", "red,green", parse_color, "red, blue", colors).message(),
            "invalid --colors entry 'green': expected one of red, blue");
  Color one{};
  EXPECT_EQ(parse_enum("--color", "pink", parse_color, "red, blue", one).message(),
            "invalid --color 'pink': expected one of red, blue");
}

TEST(PythonRepr, FloatsPrintAsPythonReprPrintsThem) {
  // Expected strings are Python 3's repr() of the same values.
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},           {-0.0, "-0.0"},
      {1.0, "1.0"},           {1.25, "1.25"},
      {0.98, "0.98"},         {0.1, "0.1"},
      {-2.5, "-2.5"},         {1e-4, "0.0001"},
      {1e-5, "1e-05"},        {1.5e-7, "1.5e-07"},
      {123456.0, "123456.0"}, {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},        {123456789012345678.0, "1.2345678901234568e+17"},
      {1e300, "1e+300"},      {0.30000000000000004, "0.30000000000000004"},
      {HUGE_VAL, "inf"},      {-HUGE_VAL, "-inf"},
  };
  for (auto [v, want] : cases) EXPECT_EQ(python_float(v), want) << want;
  EXPECT_EQ(python_float(std::nan("")), "nan");
}

TEST(Finite, NanOrInfInAnyResultIsNamed) {
  Tensor out(Dtype::bf16, {2, 3});
  out.fill_zero();
  EXPECT_TRUE(bench::check_finite(out, nullptr));
  out.set(4, std::numeric_limits<float>::infinity());
  Status s = bench::check_finite(out, nullptr);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("out (1 of 6 values)"), std::string::npos) << s.message();

  Tensor f(Dtype::f32, {5});
  f.fill_zero();
  f.set(0, std::nanf(""));
  f.set(3, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bench::count_non_finite(f), 2);
  f.set(0, std::numeric_limits<float>::max());
  EXPECT_EQ(bench::count_non_finite(f), 1);

  // float16: a value past 65504 is stored as inf (0x7c00, which bf16's exponent mask 0x7f80 would miss),
  // and it and a NaN are counted; the largest finite value is not.
  Tensor h(Dtype::f16, {6});
  h.fill_zero();
  h.set(0, 65504.0);
  h.set(1, -65504.0);
  EXPECT_EQ(bench::count_non_finite(h), 0);
  h.set(2, 70000.0);
  h.set(3, -std::numeric_limits<double>::infinity());
  h.set(4, std::nan(""));
  EXPECT_EQ(bench::count_non_finite(h), 3);
  s = bench::check_finite(h, nullptr);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("out (3 of 6 values)"), std::string::npos) << s.message();
}

TEST(Threads, StartingThreadsTheSystemRefusesIsAnError) {
  EXPECT_GE(bench::available_cores(), 1);
  EXPECT_TRUE(bench::try_start_threads(2));
  // In a child with almost no address space left, no thread stack can be mapped.
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit limit{64 << 20, 64 << 20};
    setrlimit(RLIMIT_AS, &limit);
    Status s = bench::try_start_threads(64);
    _exit(!s && s.message().find("cannot start 64 threads") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Brackets inside strings (escaped quotes included) are text, not nesting.
TEST(Parse, JsonDepthCountsNestingOutsideStrings) {
  EXPECT_EQ(json_depth("1"), 0);
  EXPECT_EQ(json_depth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(json_depth(R"({"a": "[[[{{{", "b": "\"[[["})"), 1);
  EXPECT_EQ(json_depth(R"(["\\", [[]]])"), 3);
  EXPECT_EQ(json_depth(std::string(100000, '[') + std::string(100000, ']')), 100000);
}

}  // namespace
}  // namespace moe
