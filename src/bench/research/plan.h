// moe-bench sweep --plan FILE: the command line's flags as a JSON plan.
//
//   {"fixed": {"tokens": 512, "mlp-dim": 64, "distribution": "random", "check": true},
//    "axes": {"topk": [1, 2, 4], "impl": ["baseline", "fused_w13"]},
//    "repeats": 3,
//    "description": "free text, ignored"}
//
// Keys are moe-bench flag names without the leading dashes. A "fixed" value is one value (an array only
// for the seed's *-list flags); an "axes" value is a non-empty array, and the axes run as a cartesian
// product in the plan's order, the first outermost (axes.h). true and false set a flag on and off. The
// plan becomes command-line arguments that go through the same expansion and parser as typed flags, so
// a plan means exactly what the same flags would mean.
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

// The arguments the plan at `path` stands for. Errors name the file and the key: not JSON, an unknown
// top-level key, a key that is not a flag, a flag that has no place in a plan (--out, --format, ...),
// a value of the wrong kind.
Status plan_args(const std::string& path, std::vector<std::string>& args);

}  // namespace moe::bench
