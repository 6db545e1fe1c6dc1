// What the tile rules of the kernel families share, and the family rules behind TileRule.h's
// entries: TileRuleSm80Forward.cpp, TileRuleSm90Forward.cpp and TileRuleBackward.cpp.
// docs/design/tile-rules.md gives the measurements behind their constants.
#pragma once

#include "dialects/Attn/Transforms/TileRule.h"

namespace mlir::attn::tile_rule {

// The largest power of two at most x (1 for x <= 1).
int64_t pow2Floor(int64_t x);

// FlashAttention's column tile B_c = ceil(M / 4d): the K and V tiles (B_c x d each) and the Q and
// O tiles (B_r = min(B_c, d) rows each) of one step fill M elements of on-chip memory.
int64_t flashAttentionBlockKV(int64_t elements, int64_t headDim);

// Head dims 128 / 128 without dropout keep two stages where a third fits: the sm_90a forward's
// K/V stages (two consumers, no per-element score hook) and the sm_90a dK/dV kernel's Q/dO stages
// (without the head-dim split). Two ran faster than three at hd128 under every mask but dropout.
bool hd128KeepsTwoStages(const TileProblem& problem);

// The sm_80-family forward kernel's rule (templates/attnc/sm80/forward.h), for every target.
FailureOr<TileChoice> deriveSm80Tiles(const TileProblem& problem, const TileTarget& target);

// The sm_90a backward kernels (templates/attnc/sm90/backward.h, bwd_q.h), where they fit: fills
// choice's hopper* fields and their derivation lines; without them the sm80 kernels serve.
void deriveHopperBackwardTiles(const TileProblem& problem, const TileTarget& target,
                               BackwardTileChoice& choice);

}  // namespace mlir::attn::tile_rule
