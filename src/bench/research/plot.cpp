#include "bench/research/plot.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "bench/harness/cli.h"
#include "bench/research/metric.h"
#include "bench/research/store.h"
#include "moe/file_io.h"

namespace moe::bench {
namespace {

std::string extension(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(dot + 1);
}

// gnuplot's string syntax: double quotes, with \ and " escaped.
std::string gp_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  for (std::string_view dirs = path; !dirs.empty();) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    if (access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return false;
}

struct PlotPoint {
  std::string x;
  Spread y;
};

// --ref's lines: each key's mean over the rows, dashed, its value in the legend.
Status add_ref_lines(const PlotOptions& o, const std::vector<ResultRow>& rows,
                     std::vector<std::string>& plots) {
  for (const std::string& key : o.refs) {
    double sum = 0;
    int n = 0;
    for (const ResultRow& r : rows)
      if (const ResultRow v = r.value(key, ResultRow()); v.is_number()) {
        sum += v.get<double>();
        ++n;
      }
    if (n == 0) return Status::error(fmt::format("{}: no row has a number for --ref {}", o.store, key));
    plots.push_back(fmt::format("{:.9g} with lines dashtype 2 linewidth 2 title {}", sum / n,
                                gp_string(fmt::format("{} = {:.4g}", key, sum / n))));
  }
  return Status::ok();
}

}  // namespace

Status plot_script(const PlotOptions& o, std::string& script) {
  const std::string ext = extension(o.output);
  if (ext != "png" && ext != "svg")
    return Status::error(fmt::format("invalid -o '{}': expected a .png or .svg file", o.output));
  Metric metric;
  MOE_RETURN_IF_ERROR(find_metric(o.y, metric));
  std::vector<ResultRow> rows;
  MOE_RETURN_IF_ERROR(load_selection(parse_selection(o.store), rows));
  for (const std::string& key : {o.x, o.series})
    if (!key.empty() && !rows.front().contains(key))
      return Status::error(fmt::format("{}: the rows have no key \"{}\"", o.store, key));

  // One configuration per (series, x) cell.
  std::vector<std::string> series_order, x_order;
  std::map<std::string, std::map<std::string, std::vector<const ResultRow*>>> cells;
  bool numeric_x = true;
  for (const ResultRow& r : rows) {
    // A key some rows lack is null there ("none").
    const ResultRow x_value = r.value(o.x, ResultRow());
    const std::string s = o.series.empty() ? "" : value_text(r.value(o.series, ResultRow())),
                      x = value_text(x_value);
    numeric_x &= x_value.is_number();
    if (!cells.count(s)) series_order.push_back(s);
    if (std::find(x_order.begin(), x_order.end(), x) == x_order.end()) x_order.push_back(x);
    cells[s][x].push_back(&r);
  }
  for (const auto& [s, by_x] : cells)
    for (const auto& [x, cell] : by_x)
      if (const auto differ = varying_keys(cell, run_keys()); !differ.empty())
        return Status::error(fmt::format(
            "{}: the rows at {}={}{} differ in {}: select one (STORE:key=value) or make it the --series",
            o.store, o.x, x, o.series.empty() ? "" : fmt::format(" {}={}", o.series, s),
            fmt::join(differ, ", ")));
  if (numeric_x)
    std::sort(x_order.begin(), x_order.end(),
              [](const std::string& a, const std::string& b) { return std::stod(a) < std::stod(b); });

  const std::string title = !o.title.empty()
                                ? o.title
                                : fmt::format("{} vs {}{} ({})", metric.label, o.x,
                                              o.series.empty() ? "" : " by " + o.series, o.store);
  std::string gp = ext == "png" ? "set terminal pngcairo size 960,600 noenhanced font \"sans,10\"\n"
                                : "set terminal svg size 960,600 dynamic noenhanced font \"sans,10\"\n";
  gp += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\n", gp_string(title),
                    gp_string(key_label(o.x)), gp_string(metric.label));
  gp +=
      "set grid\nset key outside right top\nset bars small\nset offsets graph 0.03, graph 0.03, graph 0.05, "
      "0\n";
  if (o.logx && numeric_x) gp += "set logscale x 2\n";
  if (o.logy) gp += "set logscale y\n";
  std::vector<std::string> plots;
  for (size_t si = 0; si < series_order.size(); ++si) {
    const std::string& s = series_order[si];
    gp += fmt::format("$s{} << EOD\n", si);
    for (size_t xi = 0; xi < x_order.size(); ++xi) {
      auto it = cells[s].find(x_order[xi]);
      if (it == cells[s].end()) continue;
      Spread y;
      MOE_RETURN_IF_ERROR(pooled_metric(it->second, metric, y));
      const double hi = std::isfinite(y.hi) ? y.hi : 2 * y.value - y.lo;
      gp += fmt::format("{} {:.9g} {:.9g} {:.9g} {}\n", numeric_x ? x_order[xi] : std::to_string(xi), y.value,
                        y.lo, hi, gp_string(x_order[xi]));
    }
    gp += "EOD\n";
    const std::string name = o.series.empty() ? metric.label : fmt::format("{}={}", o.series, s);
    plots.push_back(fmt::format("$s{} using 1:2:3:4{} with yerrorlines title {}", si,
                                numeric_x ? "" : ":xtic(5)", gp_string(name)));
  }
  MOE_RETURN_IF_ERROR(add_ref_lines(o, rows, plots));
  gp += "plot " + fmt::format("{}", fmt::join(plots, ", \\\n     ")) + "\n";
  script = gp;
  return Status::ok();
}

Status render_plot(const PlotOptions& o) {
  std::string script;
  MOE_RETURN_IF_ERROR(plot_script(o, script));
  if (!on_path("gnuplot"))
    return Status::error("gnuplot is not on PATH: install gnuplot-nox (scripts/install-deps.sh)");
  std::string tmp = (std::filesystem::temp_directory_path() / "moe-plot-XXXXXX").string();
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return Status::error(fmt::format("cannot create a temporary file for gnuplot in {}", tmp));
  const bool written = write(fd, script.data(), script.size()) == ssize_t(script.size());
  close(fd);
  std::string image;
  int status = -1;
  if (written) {
    if (FILE* p = popen(("gnuplot " + shell_quote({tmp})).c_str(), "r")) {
      char buf[65536];
      for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) image.append(buf, n);
      status = pclose(p);
    }
  }
  std::remove(tmp.c_str());
  if (!written) return Status::error("cannot write the gnuplot script to a temporary file");
  if (status != 0 || image.empty())
    return Status::error(
        fmt::format("gnuplot failed (exit {}); its messages are above; nothing written to {}",
                    WIFEXITED(status) ? WEXITSTATUS(status) : status, o.output));
  return write_file_atomic(o.output, image);
}

int plot_main(int argc, char** argv) {
  PlotOptions o;
  CLI::App app{
      "moe-bench plot: a chart of a result store (jsonl; STORE:key=value,... selects) through gnuplot"};
  app.add_option("STORE", o.store, "the store (STORE or STORE:key=value,...)")->required();
  app.add_option("--x", o.x, "row key on the x axis (e.g. topk, tokens, impl)")->required();
  app.add_option("--y", o.y, "tflops|tokens_per_s|time_s|pct_of_ceiling|gbps|pct_of_bw_peak|pct_of_roofline")
      ->capture_default_str();
  app.add_option("--series", o.series, "row key: one line per value (e.g. impl, dtype)");
  app.add_option("-o,--output", o.output, "chart file: .png or .svg")->required();
  app.add_option("--title", o.title, "chart title (default: metric vs x by series, and the store)");
  app.add_option("--ref", o.refs,
                 "row key drawn as a horizontal line at its mean (e.g. bw_peak_gbps); repeatable");
  app.add_flag("--logx", o.logx, "log2 x axis (numeric x)");
  app.add_flag("--logy", o.logy, "log y axis");
  bool exit_ok = false;
  if (Status s = parse_cli(app, argc, argv, exit_ok); !s) return fail(s);
  if (exit_ok) return 0;
  if (Status s = render_plot(o); !s) return fail(s);
  fmt::print(stderr, "moe-bench: wrote {}\n", o.output);
  return 0;
}

}  // namespace moe::bench
