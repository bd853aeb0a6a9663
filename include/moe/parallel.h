// How a parallel run divides one MoE block among R ranks (docs/design.md, "Parallel runs").
//
//   mode / path          tokens a rank holds          experts it holds   what crosses ranks
//   none                 all T (R = 1)                all E              nothing
//   dp                   its slice of T               all E (replicas)   weight gradients (all-reduce)
//   ep compact_psum      all T (replicated)           its E/R            output and dx (all-reduce)
//   ep all_to_all        its slice of T               its E/R            rows to expert owners and back
//   ep ring_ag_rs        its slice of T (T % R == 0)  its E/R            all-gather x, reduce-scatter out
//   ep masked_psum       all T (replicated)           its E/R            output and dx (all-reduce); its
//                        plan holds every assignment, the other ranks' experts' masked (weight 0)
//
// A mesh (--mesh data=D,expert=X; dp is D = R, ep X = R by default) makes the ranks D data replicas,
// each of X consecutive ranks: replica d holds tokens [d T/D, (d+1) T/D), which its X ranks divide as
// the path does; expert rank x holds experts [x E/X, (x+1) E/X) (E % X == 0), replicated over replicas.
// Token slices are contiguous and balanced. A rank generates only its own slices of x and of the routed
// weights (the counter-based generator, moe/rng.h, makes element i the same whichever rank draws it), and
// routes its tokens with the global routing's rows (made on every rank outside timing: the `runs`
// distribution is sequential).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moe/config.h"
#include "moe/inputs.h"
#include "moe/routing.h"
#include "moe/status.h"

namespace moe {

struct RankLayout {
  int rank = 0, ranks = 1;
  int mesh_data = 1, mesh_expert = 1;               // the ranks as D data replicas x X expert shards
  int data_rank = 0, expert_rank = 0;               // rank = data_rank * X + expert_rank
  int64_t group_token_begin = 0, group_tokens = 0;  // the tokens of its data replica
  int64_t token_begin = 0, tokens = 0;    // x rows [token_begin, token_begin + tokens) of the global T
  int64_t expert_begin = 0, experts = 0;  // routed weights of experts [expert_begin, + experts)
  bool tokens_replicated = false;         // it holds every token of its replica (none, dp, compact_psum)
  bool experts_replicated = true;         // it holds every expert (none, dp)
  bool gathers_tokens = false;            // its plan covers its replica's tokens, gathered (ring_ag_rs)
  bool masks_other_experts = false;  // its plan places every assignment, the others' masked (masked_psum)
};

// Ok, or why cfg's parallel mode cannot run over `ranks` ranks: one line (E % R, T < R, what is not
// built, ...). Asked on every rank before anything is allocated, so every rank refuses alike.
Status parallel_supports(const MoeConfig& cfg, int ranks);
// (D, X): the mesh of cfg over `ranks` ranks (cfg.mesh_data x cfg.mesh_expert, or the mode's own).
std::pair<int, int> mesh_of(const MoeConfig& cfg, int ranks);
// REQUIRES: parallel_supports(cfg, ranks) is ok.
RankLayout rank_layout(const MoeConfig& cfg, int rank, int ranks);
// "tokens=[0,37) experts=[0,5)": a rank's share, for rows and errors.
std::string describe(const RankLayout& l);

// The shapes a rank's inputs, outputs and gradients have: cfg with tokens and experts of its layout.
MoeConfig rank_config(const MoeConfig& cfg, const RankLayout& l);
// The config of a rank's token side (pack, dispatch, combine): the tokens its plan covers (its own, or
// every token where it gathers them: ring_ag_rs), and the experts its plan sorts into: its own where
// its plan covers every token (compact_psum, ring_ag_rs: the others' are null ids), else all E
// (all_to_all sends each row to its expert's owner). Its shared expert runs on the tokens it holds.
MoeConfig token_config(const MoeConfig& cfg, const RankLayout& l);
// The rank's slices of the global inputs (bitwise the rows of make_inputs(cfg)), in host memory.
MoeInputs make_rank_inputs(const MoeConfig& cfg, const RankLayout& l);
// The routing a rank's block packs: its token rows of the global routing (every row where it gathers
// the tokens); where its experts are a slice while its plan covers every token (compact_psum,
// ring_ag_rs), expert ids become local (id - expert_begin) and the
// other experts' assignments null ids (>= l.experts), which the plan never places; where it masks them
// (masked_psum, the seed's dense dispatch buffer), they keep a local id (id % l.experts) and weigh 0, so
// they run through the experts and add nothing.
Routing rank_routing(const Routing& global, const RankLayout& l);

}  // namespace moe

namespace moe {

class Comm;

// The global output (and gradients, where grads is given) on rank 0, gathered from every rank's
// slices (host tensors of the rank's shapes): token slices of out and dx, expert slices of the routed
// weight gradients; replicated tensors are rank 0's own. Other ranks get empty tensors. Every rank of
// `world` calls it.
Status gather_results(Comm& world, const MoeConfig& cfg, const Tensor& out, const MoeGrads* grads,
                      Tensor& global_out, MoeGrads* global_grads);
// Every rank's `mine` on rank 0 (all, in rank order; empty elsewhere): a rank's stage times and trace
// events for rank 0 to print and write. Every rank of `world` calls it.
Status gather_text(Comm& world, const std::string& mine, std::vector<std::string>& all);

}  // namespace moe
