// The kernel table (cpu/gemm/gemm.h): rows in order, the choice per call, auto's measurements.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <optional>
#include <vector>

#include "cpu/gemm/f16_widening.h"
#include "cpu/gemm/gemm.h"
#include "cpu/gemm/gemm_gemv.h"
#include "cpu/gemm/gemm_variants.h"
#include "cpu/gemm/tuning.h"
#include "moe/fatal_signal.h"

namespace moe {
namespace {

int64_t largest_live_group(GroupedShape g) {
  int64_t most = 0;
  for (int64_t e = 0; e < g.experts; ++e)
    most = std::max(most, g.live_rows ? g.live_rows[e] : g.group_offset[e + 1] - g.group_offset[e]);
  return most;
}

GemmCall grouped_call(GemmForm form, Dtype in, Dtype out, GroupedShape groups, int64_t Kd, int64_t N,
                      int parts) {
  GemmCall c;
  c.form = form;
  c.in_dtype = c.b_dtype = in;
  c.out_dtype = out;
  c.rows = largest_live_group(groups);
  c.experts = groups.experts;
  c.Kd = Kd;
  c.N = N;
  c.parts = parts;
  return c;
}

int variant_index(const GemmVariant* v) {
  return int(v - gemm_variants().data());
}

// A grouped nn's or nt's groups of at most the gemv variant's rows (gemv_max_rows(kept), kGemvNtMaxRows) and
// its larger ones, as two calls where it has both: with hot experts (the seed's `runs` routing, real models'
// skew) one large group would take every expert's few rows to the large groups' kernel, which reads few-row
// groups' weights at 0.4-0.6 of a sequential read (dpbf16, avx2; gemv 0.9-1.0). In each part the other
// part's groups have no live rows, and both keep the padding, so neither writes the other's rows. (tn's
// kernels write every expert's gradient, zeros where no row reached it, so its parts would clear each
// other's: ExpertRuns splits its experts instead.)
class GroupSplit {
 public:
  // Whether `groups` has both groups of at most `most_few` live rows and larger ones (then few() and many()
  // are its parts).
  bool split(GroupedShape groups, int64_t most_few) {
    groups_ = groups;
    few_.assign(size_t(groups.experts), 0);
    many_.assign(size_t(groups.experts), 0);
    bool has_few = false, has_many = false;
    for (int64_t e = 0; e < groups.experts; ++e) {
      const int64_t live = gemm_detail::group_rows(groups, e).live;
      (live > most_few ? many_ : few_)[size_t(e)] = live;
      (live > most_few ? has_many : has_few) |= live > 0;
    }
    return has_few && has_many;
  }
  GroupedShape few() const { return part(few_); }
  GroupedShape many() const { return part(many_); }

 private:
  GroupedShape part(const std::vector<int64_t>& live) const {
    GroupedShape g = groups_;
    g.live_rows = live.data();
    g.zero_padding = false;  // the other part's rows are not zeros
    g.padding_kept = true;
    return g;
  }
  GroupedShape groups_{};
  std::vector<int64_t> few_, many_;  // live rows per expert
};

// A grouped tn's experts as runs of consecutive experts whose groups have all at most kGemvTnMaxRows live
// rows or all more (an expert without live rows in the run it falls in), each run a call of its own on its
// slice of the gradient, where it has both kinds and at most kMaxRuns runs (each a call: a parallel region,
// the variant's plan), else one run of every expert: so hot experts do not take every few-row expert's
// gradient to the large-group kernel. A run's calls are classed as the whole call's experts (their count
// varies with the routing; the class's measured choice should not).
class ExpertRuns {
 public:
  static constexpr size_t kMaxRuns = 16;
  ExpertRuns(GroupedShape groups, int64_t most_few) : groups_(groups) {
    int kind = -1;  // the current run's: 0 few rows, 1 more; -1 none yet
    for (int64_t e = 0; e < groups.experts; ++e) {
      const int64_t live = gemm_detail::group_rows(groups, e).live;
      if (live == 0 || int(live > most_few) == kind) continue;
      starts_.push_back(kind < 0 ? 0 : e);
      kind = int(live > most_few);
    }
    if (starts_.size() < 2 || starts_.size() > kMaxRuns) starts_ = {0};
    starts_.push_back(groups.experts);
  }
  size_t runs() const { return starts_.size() - 1; }
  int64_t first(size_t i) const { return starts_[i]; }
  GroupedShape groups(size_t i) const {
    GroupedShape g = groups_;
    g.group_offset += starts_[i];
    g.experts = starts_[i + 1] - starts_[i];
    if (g.live_rows) g.live_rows += starts_[i];
    return g;
  }
  // Run i's call, classed as the whole call's.
  GemmCall call(size_t i, GemmForm form, Dtype in, Dtype out, int64_t Kd, int64_t N) const {
    GemmCall c = grouped_call(form, in, out, groups(i), Kd, N, 1);
    c.experts = groups_.experts;
    return c;
  }

 private:
  GroupedShape groups_;
  std::vector<int64_t> starts_;  // run i: experts [starts_[i], starts_[i + 1])
};

// Seconds of one call of `fn`.
template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* name(GemmForm form) {
  switch (form) {
    case GemmForm::nn:
      return "nn";
    case GemmForm::nn_swiglu:
      return "nn_swiglu";
    case GemmForm::nt:
      return "nt";
    case GemmForm::nt_swiglu_grad:
      return "nt_swiglu_grad";
    case GemmForm::tn:
      return "tn";
    case GemmForm::tn_pair:
      return "tn_pair";
    case GemmForm::dense:
      return "dense";
    case GemmForm::nn_s8:
      return "nn_s8";
    case GemmForm::nn_s8_swiglu:
      return "nn_s8_swiglu";
  }
  return "?";
}

std::string GemmCall::shape_class() const {
  const uint64_t rows_class = std::bit_ceil(uint64_t(std::max<int64_t>(rows, 1)));
  std::string s = fmt::format("{} {}", name(form), dtype_name(in_dtype));
  if (b_dtype != in_dtype) s += fmt::format("x{}", dtype_name(b_dtype));
  s += fmt::format("->{} Kd={} N={}", dtype_name(out_dtype), Kd, N);
  if (form == GemmForm::dense)
    return s + fmt::format(" R<={}{}{}", rows_class, trans_a ? " ta" : "", trans_b ? " tb" : "");
  return s +
         fmt::format(" E={} rows<={} parts={}{}", experts, rows_class, parts, weights_kept ? " kept" : "");
}

std::string GemmRow::dtypes() const {
  if (form == GemmForm::nn_s8) return "int8 -> float32,bfloat16";
  if (form == GemmForm::nn_s8_swiglu) return "int8 -> float32,bfloat16 h and g, int8 g";
  return form == GemmForm::nn_swiglu || form == GemmForm::nt_swiglu_grad
             ? "float32 or bfloat16 throughout"
             : "float32,bfloat16 -> float32,bfloat16";
}

const GemmVariant* gemm_variant(const std::string& name) {
  for (const GemmVariant& v : gemm_variants())
    if (name == v.name) return &v;
  return nullptr;
}

Status check_gemm_variant(const std::string& name) {
  if (name == "auto") return Status::ok();
  std::string known = "auto";
  for (const GemmVariant& v : gemm_variants()) known += std::string(", ") + v.name;
  const GemmVariant* v = gemm_variant(name);
  if (!v) return Status::error(fmt::format("invalid --gemm-variant '{}': expected one of {}", name, known));
  if (const std::string why = v->unavailable(); !why.empty())
    return Status::error(fmt::format("--gemm-variant {} does not run here: {}", name, why));
  return Status::ok();
}

std::string gemm_library_version() {
  std::string s;
  for (const GemmVariant& v : gemm_variants())
    if (v.tunable && v.unavailable().empty())
      s += fmt::format("{}{}: {}", s.empty() ? "" : "; ", v.name, v.version());
  return s;
}

namespace {

std::unique_ptr<GemmTuner> tuner_for(const KernelConfig& kernel) {
  if (kernel.tuning_file == "none") return nullptr;
  return std::make_unique<GemmTuner>(GemmTuner::resolve_path(kernel.tuning_file), kernel.retune,
                                     kernel.wait_policy);
}

}  // namespace

GemmKernels::GemmKernels(const KernelConfig& kernel) : GemmKernels(kernel, nullptr) {
  own_tuner_ = tuner_for(kernel);
  tuner_ = own_tuner_.get();
}

GemmKernels::~GemmKernels() = default;

GemmKernels::GemmKernels(const KernelConfig& kernel, GemmTuner* tuner) : kernel_(kernel), tuner_(tuner) {
  MOE_CHECK(check_gemm_variant(kernel.gemm_variant).is_ok(), "GemmKernels: a variant that runs here");
  // Base order: the named variant, auto's candidates in registry order, the rest (the reference last).
  std::vector<const GemmVariant*> order;
  if (kernel.gemm_variant != "auto") order.push_back(gemm_variant(kernel.gemm_variant));
  for (bool first : {true, false})
    for (const GemmVariant& v : gemm_variants())
      if (v.unavailable().empty() && (v.tunable && v.auto_candidate()) == first &&
          std::find(order.begin(), order.end(), &v) == order.end())
        order.push_back(&v);
  for (const GemmVariant* v : order)
    for (GemmForm f : kGemmForms)
      if (!std::holds_alternative<std::monostate>(v->fns[size_t(f)]))
        rows_.push_back({v, f, v->fns[size_t(f)]});
}

const GemmVariant* GemmKernels::preferred(const GemmCall& call) const {
  if (kernel_.gemm_variant != "auto") return gemm_variant(kernel_.gemm_variant);
  const std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto it = decided_.find(call.shape_class());
  return it == decided_.end() ? nullptr : it->second;
}

const GemmRow& GemmKernels::row_for(const GemmCall& call) const {
  const GemmVariant* first = preferred(call);
  for (int pass = first ? 0 : 1; pass < 2; ++pass)
    for (const GemmRow& r : rows_)
      if (r.form == call.form && (pass == 1 || r.variant == first) &&
          r.variant->supports(call, kernel_.thresholds).empty())
        return r;
  MOE_CHECK(false, "the reference row takes every GEMM: " + call.shape_class());
}

template <typename Run>
const GemmRow& GemmKernels::choose(const GemmCall& call, Run&& run) {
  // Held while a class is measured too: another thread's call of the class waits for the decision.
  const std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (kernel_.gemm_variant == "auto" && tuner_ && !call.accumulate) {
    const std::string cls = call.shape_class();
    if (!decided_.count(cls)) {
      std::vector<const GemmRow*> candidates;
      for (const GemmRow& r : rows_)
        if (r.form == call.form && r.variant->tunable &&
            r.variant->supports(call, kernel_.thresholds).empty())
          candidates.push_back(&r);
      const GemmVariant* pick = candidates.empty() ? nullptr : candidates.front()->variant;
      if (candidates.size() > 1) {
        std::vector<std::string> names;
        for (const GemmRow* r : candidates) names.push_back(r->variant->name);
        const std::optional<std::string> stored = tuner_->lookup(cls, names);
        const GemmVariant* known = nullptr;
        for (const GemmRow* r : candidates)
          if (stored && *stored == r->variant->name) known = r->variant;
        if (known) {
          pick = known;
        } else {
          // On kept weights a variant that keeps a packing of them makes it in its first call (0.6-1.6 s at
          // 64 experts of Qwen3-30B-A3B's or OLMoE's, most of it the VM's first touch of the memory): made
          // here, so that time_candidates' warm call runs as later calls do and never looks hopeless.
          if (call.weights_kept)
            for (const GemmRow* r : candidates)
              if (packs_kept_bf16_weights(r->variant->name)) run(*r);
          const std::optional<CacheEvictor> evictor =
              weights_come_cold(call) ? std::optional<CacheEvictor>(std::in_place) : std::nullopt;
          const std::vector<double> times = time_candidates(candidates.size(), [&](size_t i) {
            if (evictor) evictor->evict();
            return seconds_of([&] { run(*candidates[i]); });
          });
          std::vector<std::pair<std::string, double>> seconds;
          for (size_t i = 0; i < candidates.size(); ++i) seconds.emplace_back(names[i], times[i]);
          pick = candidates[pick_candidate(times, preferred_candidate(call, names, times))]->variant;
          ++measurements_;
          tuner_->record(cls, pick->name, seconds);
        }
      }
      decided_[cls] = pick;
    }
  }
  const GemmRow& row = row_for(call);
  ran_[size_t(call.form)] |= 1u << variant_index(row.variant);
  return row;
}

std::string GemmKernels::take_choices() {
  const std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::string s;
  for (GemmForm f : kGemmForms) {
    if (!ran_[size_t(f)]) continue;
    std::string names;
    for (size_t i = 0; i < gemm_variants().size(); ++i)
      if (ran_[size_t(f)] & (1u << i)) {
        if (!names.empty()) names += '+';
        names += gemm_variants()[i].name;
      }
    s += fmt::format("{}{}:{}", s.empty() ? "" : ",", name(f), names);
  }
  ran_.fill(0);
  return s;
}

bool GemmKernels::bf16_arithmetic() const {
  GemmCall c;
  c.form = GemmForm::dense;
  c.in_dtype = c.b_dtype = c.out_dtype = Dtype::bf16;
  c.rows = c.Kd = c.N = 1024;
  return row_for(c).variant->bf16_arithmetic();
}

bool GemmKernels::same_sums_on_any_thread_count() const {
  const std::lock_guard<std::recursive_mutex> lock(mutex_);
  uint32_t any = 0;
  for (uint32_t bits : ran_) any |= bits;
  for (size_t i = 0; i < gemm_variants().size(); ++i)
    if ((any & (1u << i)) && !gemm_variants()[i].same_sums_on_any_thread_count()) return false;
  return true;
}

const std::string& GemmKernels::row_text(const GemmRow& row, const GemmCall& call) {
  struct RowText {
    const GemmRow* row = nullptr;  // a row belongs to one table: it tells tables apart too
    GemmCall call;
    std::string text;
  };
  thread_local std::array<RowText, kGemmFormCount> texts;
  RowText& last = texts[size_t(call.form)];
  if (last.row != &row || !(last.call == call)) {
    last.row = &row;
    last.call = call;
    last.text = std::string("GEMM row ") + row.variant->name + ": " + call.shape_class();
  }
  return last.text;
}

template <typename Run>
void GemmKernels::run_chosen(const GemmCall& call, Run&& run) {
  // Every row that runs, auto's candidates too, under a fatal-signal context naming it: a kernel that dies
  // on this CPU (a library's at some size) says which it was.
  auto named = [&](const GemmRow& r) {
    const FatalSignalContext context(row_text(r, call));
    run(r);
  };
  named(choose(call, named));
}

// ---- the forms: check what every row relies on, choose, run ------------------------------------------

void GemmKernels::nn(void* out, Dtype out_dtype, const void* lhs, ExpertWeights rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N) {
  MOE_CHECK(N % rhs.parts() == 0, "grouped nn: two weight parts split N in halves");
  if (f16_widening::any_f16({in_dtype, out_dtype}))
    return f16_widening::nn(*this, out, out_dtype, lhs, rhs, in_dtype, groups, Kd, N);
  if (GroupSplit parts; parts.split(groups, gemv_max_rows(rhs.packs != nullptr))) {
    gemm_detail::zero_padding_rows(out, out_dtype, groups, N);
    nn(out, out_dtype, lhs, rhs, in_dtype, parts.few(), Kd, N);
    nn(out, out_dtype, lhs, rhs, in_dtype, parts.many(), Kd, N);
    return;
  }
  GemmCall call = grouped_call(GemmForm::nn, in_dtype, out_dtype, groups, Kd, N, rhs.parts());
  call.weights_kept = rhs.packs != nullptr;
  auto run = [&](const GemmRow& r) {
    std::get<GemmNnFn>(r.fn)(kernel_.thresholds, out, out_dtype, lhs, rhs, in_dtype, groups, Kd, N);
  };
  run_chosen(call, run);
}

void GemmKernels::nn_swiglu(void* h, void* g, Dtype out_dtype, const void* lhs, ExpertWeights rhs,
                            Dtype in_dtype, GroupedShape groups, int64_t Kd, int64_t M,
                            const float* row_weight, bool keep_h) {
  MOE_CHECK(M >= 0 && (2 * M) % rhs.parts() == 0, "grouped nn_swiglu: two weight parts split 2M in halves");
  if (f16_widening::any_f16({in_dtype, out_dtype}))
    return f16_widening::nn_swiglu(*this, h, g, out_dtype, lhs, rhs, in_dtype, groups, Kd, M, row_weight,
                                   keep_h);
  if (GroupSplit parts; parts.split(groups, gemv_max_rows(rhs.packs != nullptr))) {
    gemm_detail::zero_padding_rows(h, out_dtype, groups, 2 * M);
    gemm_detail::zero_padding_rows(g, out_dtype, groups, M);
    nn_swiglu(h, g, out_dtype, lhs, rhs, in_dtype, parts.few(), Kd, M, row_weight, keep_h);
    nn_swiglu(h, g, out_dtype, lhs, rhs, in_dtype, parts.many(), Kd, M, row_weight, keep_h);
    return;
  }
  GemmCall call = grouped_call(GemmForm::nn_swiglu, in_dtype, out_dtype, groups, Kd, M, rhs.parts());
  call.weights_kept = rhs.packs != nullptr;
  auto run = [&](const GemmRow& r) {
    std::get<GemmNnSwigluFn>(r.fn)(kernel_.thresholds, h, g, out_dtype, lhs, rhs, in_dtype, groups, Kd, M,
                                   row_weight, keep_h);
  };
  run_chosen(call, run);
}

void GemmKernels::nt(void* out, Dtype out_dtype, const void* dout, ExpertWeights rhs, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, bool accumulate) {
  MOE_CHECK(N % rhs.parts() == 0, "grouped nt: two weight parts split N in halves");
  MOE_CHECK((!accumulate && rhs.parts() == 1) || out_dtype == Dtype::f32,
            "grouped nt sums weight parts and accumulates in a float32 out only");
  if (f16_widening::any_f16({in_dtype, out_dtype}))
    return f16_widening::nt(*this, out, out_dtype, dout, rhs, in_dtype, groups, Kd, N, accumulate);
  if (GroupSplit parts; parts.split(groups, kGemvNtMaxRows)) {
    gemm_detail::zero_padding_rows(out, out_dtype, groups, Kd);
    nt(out, out_dtype, dout, rhs, in_dtype, parts.few(), Kd, N, accumulate);
    nt(out, out_dtype, dout, rhs, in_dtype, parts.many(), Kd, N, accumulate);
    return;
  }
  GemmCall call = grouped_call(GemmForm::nt, in_dtype, out_dtype, groups, Kd, N, rhs.parts());
  call.accumulate = accumulate;
  auto run = [&](const GemmRow& r) {
    std::get<GemmNtFn>(r.fn)(kernel_.thresholds, out, out_dtype, dout, rhs, in_dtype, groups, Kd, N,
                             accumulate);
  };
  run_chosen(call, run);
}

void GemmKernels::nt_swiglu_grad(void* dh, void* dg, const void* dout, ExpertWeights rhs, const void* h,
                                 Dtype dtype, GroupedShape groups, int64_t M, int64_t N,
                                 const float* row_weight) {
  MOE_CHECK(rhs.parts() == 1, "grouped nt_swiglu_grad: the down projection's weights are one tensor");
  if (dtype == Dtype::f16)
    return f16_widening::nt_swiglu_grad(*this, dh, dg, dout, rhs, h, dtype, groups, M, N, row_weight);
  if (GroupSplit parts; parts.split(groups, kGemvNtMaxRows)) {
    gemm_detail::zero_padding_rows(dh, dtype, groups, 2 * M);  // dg is scratch
    nt_swiglu_grad(dh, dg, dout, rhs, h, dtype, parts.few(), M, N, row_weight);
    nt_swiglu_grad(dh, dg, dout, rhs, h, dtype, parts.many(), M, N, row_weight);
    return;
  }
  const GemmCall call = grouped_call(GemmForm::nt_swiglu_grad, dtype, dtype, groups, M, N, 1);
  auto run = [&](const GemmRow& r) {
    std::get<GemmNtSwigluGradFn>(r.fn)(kernel_.thresholds, dh, dg, dout, rhs, h, dtype, groups, M, N,
                                       row_weight);
  };
  run_chosen(call, run);
}

void GemmKernels::tn(void* drhs, Dtype out_dtype, const void* lhs, const void* dout, Dtype in_dtype,
                     GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  MOE_CHECK(ld_dout >= N, "grouped tn: dout's row stride must cover its N columns");
  if (f16_widening::any_f16({in_dtype, out_dtype}))
    return f16_widening::tn(*this, drhs, out_dtype, lhs, dout, in_dtype, groups, Kd, N, ld_dout);
  const ExpertRuns runs(groups, kGemvTnMaxRows);
  for (size_t i = 0; i < runs.runs(); ++i) {
    const GroupedShape run_groups = runs.groups(i);
    void* run_drhs = gemm_detail::at(drhs, runs.first(i) * Kd * N, out_dtype);  // (run's E, Kd, N)
    run_chosen(runs.call(i, GemmForm::tn, in_dtype, out_dtype, Kd, N), [&](const GemmRow& r) {
      std::get<GemmTnFn>(r.fn)(kernel_.thresholds, run_drhs, out_dtype, lhs, dout, in_dtype, run_groups, Kd,
                               N, ld_dout);
    });
  }
}

void GemmKernels::tn_pair(void* drhs_first, void* drhs_second, Dtype out_dtype, const void* lhs,
                          const void* dout_first, const void* dout_second, Dtype in_dtype,
                          GroupedShape groups, int64_t Kd, int64_t N, int64_t ld_dout) {
  MOE_CHECK(ld_dout >= N, "grouped tn_pair: dout's row stride must cover its N columns");
  if (f16_widening::any_f16({in_dtype, out_dtype}))
    return f16_widening::tn_pair(*this, drhs_first, drhs_second, out_dtype, lhs, dout_first, dout_second,
                                 in_dtype, groups, Kd, N, ld_dout);
  const ExpertRuns runs(groups, kGemvTnMaxRows);
  for (size_t i = 0; i < runs.runs(); ++i) {
    const GroupedShape run_groups = runs.groups(i);
    const int64_t skip = runs.first(i) * Kd * N;
    void* first = gemm_detail::at(drhs_first, skip, out_dtype);    // (run's E, Kd, N)
    void* second = gemm_detail::at(drhs_second, skip, out_dtype);  // (run's E, Kd, N)
    run_chosen(runs.call(i, GemmForm::tn_pair, in_dtype, out_dtype, Kd, N), [&](const GemmRow& r) {
      std::get<GemmTnPairFn>(r.fn)(kernel_.thresholds, first, second, out_dtype, lhs, dout_first, dout_second,
                                   in_dtype, run_groups, Kd, N, ld_dout);
    });
  }
}

void GemmKernels::dense(void* out, Dtype out_dtype, const void* a, Dtype a_dtype, const void* b,
                        Dtype b_dtype, int64_t R, int64_t Kd, int64_t N, bool trans_a, bool trans_b) {
  if (f16_widening::any_f16({a_dtype, b_dtype, out_dtype}))
    return f16_widening::dense(*this, out, out_dtype, a, a_dtype, b, b_dtype, R, Kd, N, trans_a, trans_b);
  const GemmCall call{.form = GemmForm::dense,
                      .in_dtype = a_dtype,
                      .b_dtype = b_dtype,
                      .out_dtype = out_dtype,
                      .rows = R,
                      .Kd = Kd,
                      .N = N,
                      .trans_a = trans_a,
                      .trans_b = trans_b};
  auto run = [&](const GemmRow& r) {
    std::get<GemmDenseFn>(r.fn)(kernel_.thresholds, out, out_dtype, a, a_dtype, b, b_dtype, R, Kd, N, trans_a,
                                trans_b);
  };
  run_chosen(call, run);
}

void GemmKernels::nn_s8(void* out, Dtype out_dtype, Int8Operands in, GroupedShape groups, int64_t Kd,
                        int64_t N, bool accumulate) {
  MOE_CHECK(!accumulate || out_dtype == Dtype::f32, "nn_s8 accumulates in a float32 out only");
  if (out_dtype == Dtype::f16)
    return f16_widening::nn_s8(*this, out, out_dtype, in, groups, Kd, N, accumulate);
  GemmCall call = grouped_call(GemmForm::nn_s8, Dtype::s8, out_dtype, groups, Kd, N, 1);
  call.accumulate = accumulate;
  call.weights_kept = in.rhs_packs != nullptr;
  auto run = [&](const GemmRow& r) {
    std::get<GemmNnS8Fn>(r.fn)(kernel_.thresholds, out, out_dtype, in, groups, Kd, N, accumulate);
  };
  run_chosen(call, run);
}

void GemmKernels::nn_s8_swiglu(S8SwigluOut out, Dtype out_dtype, Int8Operands in, Int8UpPart up,
                               GroupedShape groups, int64_t Kd, int64_t M, const float* row_weight) {
  if (out_dtype == Dtype::f16)
    return f16_widening::nn_s8_swiglu(*this, out, out_dtype, in, up, groups, Kd, M, row_weight);
  MOE_CHECK(out_dtype == Dtype::f32 || out_dtype == Dtype::bf16, "nn_s8_swiglu: float32 or bfloat16 h and g");
  GemmCall call = grouped_call(GemmForm::nn_s8_swiglu, Dtype::s8, out_dtype, groups, Kd, M, up.rhs ? 2 : 1);
  call.weights_kept = in.rhs_packs != nullptr;
  auto run = [&](const GemmRow& r) {
    std::get<GemmNnS8SwigluFn>(r.fn)(kernel_.thresholds, out, out_dtype, in, up, groups, Kd, M, row_weight);
  };
  run_chosen(call, run);
}

}  // namespace moe
