// The tile rules' entries and what the kernel families' rules share: the FlashAttention base rule,
// the epilogue's register count, the head-dim-128 stage rule. The rules themselves, one file per
// kernel family: TileRuleSm80Forward.cpp, TileRuleSm90Forward.cpp, TileRuleBackward.cpp.
#include "dialects/Attn/Transforms/TileRule.h"
#include "dialects/Attn/Transforms/TileRuleShared.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;

int64_t tile_rule::pow2Floor(int64_t x) {
  return x <= 1 ? 1 : int64_t(llvm::bit_floor(uint64_t(x)));
}

int64_t tile_rule::flashAttentionBlockKV(int64_t elements, int64_t headDim) {
  return llvm::divideCeil(elements, 4 * headDim);
}

bool tile_rule::hd128KeepsTwoStages(const TileProblem& problem) {
  return problem.headDim == 128 && problem.headDimV == 128 && !problem.dropout;
}

int64_t mlir::attn::epilogueRegisters(bool dropout, int64_t inputLoads, DropoutPass pass) {
  const int64_t philox = pass == DropoutPass::Forward ? 16 : 40;
  return (dropout ? philox : 0) + 4 * inputLoads;
}

FailureOr<TileChoice> mlir::attn::deriveTiles(const TileProblem& problem,
                                             const TileTarget& target) {
  if (target.arch != "sm_90a") return tile_rule::deriveSm80Tiles(problem, target);
  FailureOr<TileChoice> hopper = deriveHopperTiles(problem, target);
  if (succeeded(hopper)) return hopper;
  FailureOr<TileChoice> choice = tile_rule::deriveSm80Tiles(problem, target);
  if (failed(choice)) return failure();
  // The wgmma kernel keeps S, P and O of 64 rows per warpgroup in registers; an epilogue as
  // large as dropout's at head dim 256 leaves it none. The sm_80-family kernel splits rows finer.
  choice->derivation.insert(
      choice->derivation.begin(),
      "sm90 kernel: O + S + P do not fit a consumer warpgroup's registers; the sm_80-family "
      "kernel instead");
  return choice;
}
