// parallel_mode none: the all-to-all EP/DP step on a data=1 x expert=1 mesh. Every hook issues the
// collective that step would issue, over the world's one rank and in place, so nothing moves and
// nothing is copied, but the calls, counts and buffers are those a multi-rank path fills in.
#pragma once

#include <memory>

#include "moe/exchange.h"

namespace moe {

std::unique_ptr<Exchange> make_single_rank_exchange(Comm& world);

}  // namespace moe
