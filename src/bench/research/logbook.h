// moe-bench log --id PREFIX-NNN --hypothesis TEXT --store STORE [--logbook FILE] [--title T]
//   [--confidence C] [--base STORE --metric M]
//
// One experiment entry in the seed logbooks' format (../shared/seeds: "### date time - ID title
// (confidence: ...)" then Hypothesis, Command, Config, Result, Interpretation, Next action), built from
// the store's rows: the exact command lines the rows carry, the configuration (the keys fixed over the
// rows, the ones varied with their values, the machine and build), and the result table (table.h), or
// with --base the A/B table against it (compare.h). Interpretation and next action are placeholders
// for the researcher. With --logbook the entry is appended under the file lock (file_io.h; a new file
// gets a title and an "## Experiment Log" heading first); earlier entries are never rewritten, and an
// ID the logbook already holds is refused. Without --logbook the entry goes to stdout.
#pragma once

#include <string>

#include "moe/status.h"

namespace moe::bench {

struct LogOptions {
  std::string id, hypothesis, title, confidence = "exploratory";
  std::string store, base, metric = "tflops";
  std::string logbook;
  std::string date;  // "YYYY-MM-DD HH:MM"; empty: now, local time
};

Status log_entry(const LogOptions& o, std::string& entry);
// Appends the entry to o.logbook (checks the ID first).
Status append_log_entry(const LogOptions& o, const std::string& entry);

int log_main(int argc, char** argv);

}  // namespace moe::bench
