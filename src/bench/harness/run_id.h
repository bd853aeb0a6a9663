// What identifies a result row across processes: its run_id, and the row schema a reader checks.
//
// run_id is 16 hex digits of FNV-1a 64 over the canonical JSON of the run's MoeConfig, KernelConfig
// (as given: --threads 0 stays 0), queue mode and timing protocol (iters, warmup, repeats); not the
// build, the machine or the date. A resumed sweep skips a point whose run_id a store already holds,
// so a sweep interrupted under one build finishes under the next. MoeConfig/KernelConfig::to_json are
// part of the identity: a change to them (a new flag) changes every run_id, and must bump kRowSchema so
// that old stores are refused instead of silently re-run (tests/test_research.cpp pins one run_id);
// a knob added later may instead join the identity only away from its default (run_id.cpp).
#pragma once

#include <string>
#include <string_view>

#include "moe/config.h"

namespace moe::bench {

// Every row carries "row_schema": kRowSchema; readers (sweep resume, compare, plot, log) accept only
// this schema. 1: first schema with run_id, repeats and samples_s.
constexpr int kRowSchema = 1;

// How a run was timed (part of its identity), and the command line that asked for it (not part of it).
struct Protocol {
  int iters = 5;
  int warmup = 2;
  int repeats = 1;
  std::string command;
  int world_size = 1;  // ranks of the run: part of the identity where it is not 1 (old run_ids stay)
  std::string model;   // the --model or --hf-config the shape came from, "" where none did: not identity
};

std::string run_id(const MoeConfig& c, const KernelConfig& k, const Protocol& p, std::string_view mode);

// FNV-1a 64 of `text` as 16 lower-case hex digits.
std::string fnv1a_hex(std::string_view text);

}  // namespace moe::bench
