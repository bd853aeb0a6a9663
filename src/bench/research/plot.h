// moe-bench plot STORE --x KEY [--y METRIC] [--series KEY] [--ref KEY ...] -o chart.png|chart.svg [--title T]
//   [--logx] [--logy]
//
// A chart of a store (or a selection, store.h) through gnuplot (scripts/install-deps.sh installs
// gnuplot-nox): one line per value of --series, the metric against --x, error bars from the spread of
// the timed calls (metric.h), axes labelled with their units. A numeric --x is a numeric axis; any other
// is categorical, in the order of the rows. The rows at one (series, x) must be one configuration
// (pooled), otherwise the keys that differ there are named. --ref KEY draws a horizontal line at the mean of
// that numeric row key over the rows (a peak or a ceiling: peak_tflops, bw_peak_gbps, ceiling_tflops).
// gnuplot renders to its stdout; the file is written only when it succeeded, atomically (file_io.h).
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

struct PlotOptions {
  std::string store, x, y = "tflops", series, output, title;
  bool logx = false, logy = false;
  std::vector<std::string> refs;  // --ref keys: a horizontal line each
};

// The gnuplot script, data inline. Checks everything about the input (but not gnuplot itself).
Status plot_script(const PlotOptions& o, std::string& script);
Status render_plot(const PlotOptions& o);

int plot_main(int argc, char** argv);

}  // namespace moe::bench
