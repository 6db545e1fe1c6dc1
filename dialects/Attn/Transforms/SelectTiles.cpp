// attn-select-tiles: B_c = ceil(M / 4d), B_r = min(B_c, d) from the target's shared memory, then
// fitted to the sm_80-family kernel's instruction shapes, registers and pipeline stages.
#include "dialects/Attn/Transforms/Passes.h"
#include "dialects/Attn/Transforms/ScoreGradient.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "attn-select-tiles"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNSELECTTILES
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnSelectTiles final : mlir::attn::impl::AttnSelectTilesBase<AttnSelectTiles> {
  using Base::Base;

  void runOnOperation() override {
    TileTarget target{arch, smemPerBlock, smemPerSM, regsPerThread};
    auto result = getOperation().walk([&](AttentionOp op) {
      int64_t loads = 0;
      op->walk([&](LoadOp) { ++loads; });
      // The score's per-element operations: those that depend on the score, q or k (block
      // arguments 0, 3, 4). The rest depend on the batch, head and lengths only, and the compiler
      // computes them once per tile (ALiBi's slope, say).
      int64_t scoreOps = 0;
      if (!op.getScore().empty())
        forEachOpDependingOn(op.getScore().front(), {0u, 3u, 4u}, [&](Operation& inner) {
          if (!isa<YieldOp>(inner)) ++scoreOps;
        });
      TileProblem problem{int64_t(op.getHeadDim()), int64_t(op.getHeadDimV()),
                          int64_t(op.getElementType().getIntOrFloatBitWidth() / 8), blockQ,
                          blockKV,
                          epilogueRegisters(op.getDropout().convertToDouble() > 0, loads) +
                              spillReserve,
                          scoreOps};
      if (!op.getMask().empty())
        problem.maskOps = int64_t(op.getMask().front().getOperations().size()) - 1;  // no yield
      problem.dropout = op.getDropout().convertToDouble() > 0;
      FailureOr<TileChoice> choice = deriveTiles(problem, target);
      // A tile that fits without the mask and score's per-element work: then it is their size
      // that does not fit, and the error points into the larger expression.
      TileProblem bare = problem;
      bare.epilogueRegisters = epilogueRegisters(problem.dropout, 0) + spillReserve;
      bare.scoreOps = 0;
      bare.maskOps = 0;
      if (failed(choice) && !blockQ && !blockKV && succeeded(deriveTiles(bare, target))) {
        // Pointed at the expression with more operations (a builtin mask or score has no
        // position of its own: the spec's then).
        const bool maskLarger = problem.maskOps >= problem.scoreOps && !op.getMask().empty();
        Region& region = maskLarger ? op.getMask() : op.getScore();
        Location at = region.empty() ? op.getLoc() : region.front().getTerminator()->getLoc();
        emitError(at) << "the mask and score need more registers than the " << arch
                      << " kernel has at head_dim " << op.getHeadDim() << ", head_dim_v "
                      << op.getHeadDimV() << (problem.dropout ? " with dropout" : "") << " ("
                      << loads << " input reads, " << problem.maskOps << " mask and " << scoreOps
                      << " score operations per element): simplify them, e.g. read fewer input "
                         "elements";
        return WalkResult::interrupt();
      }
      if (failed(choice)) {
        InFlightDiagnostic error = op.emitOpError()
                                   << "no tile configuration fits " << arch << " ("
                                   << int64_t(smemPerBlock)
                                   << " bytes of shared memory per block) for head_dim "
                                   << op.getHeadDim();
        if (blockQ || blockKV)
          error << " with the override block_q = " << int64_t(blockQ) << ", block_kv = "
                << int64_t(blockKV)
                << " (0: derived); the sm_80-family kernel takes multiples of 16, the sm_90a "
                   "kernel block_q = 64, 128 or 192 and block_kv a multiple of 16 up to 256";
        return WalkResult::interrupt();
      }
      if (spillReserve > 0)
        choice->derivation.insert(
            choice->derivation.begin(),
            llvm::formatv("spill fallback: the kernel of a tile derived with {0} fewer registers "
                          "spilled to local memory; {0} more reserved per thread (counted with "
                          "the epilogue below)",
                          int64_t(spillReserve))
                .str());
      Builder b(op.getContext());
      SmallVector<NamedAttribute> tiles = {
          b.getNamedAttr("kernel", b.getStringAttr(choice->kernel)),
          b.getNamedAttr("block_q", b.getI64IntegerAttr(choice->blockQ)),
          b.getNamedAttr("block_kv", b.getI64IntegerAttr(choice->blockKV)),
          b.getNamedAttr("warps", b.getI64IntegerAttr(choice->warps)),
          b.getNamedAttr("stages", b.getI64IntegerAttr(choice->stages)),
          b.getNamedAttr("smem_bytes", b.getI64IntegerAttr(choice->smemBytes)),
          b.getNamedAttr("derivation", b.getStrArrayAttr(SmallVector<StringRef>(
                                           choice->derivation.begin(), choice->derivation.end())))};
      op.setTilesAttr(b.getDictionaryAttr(tiles));
      return WalkResult::advance();
    });
    if (result.wasInterrupted()) signalPassFailure();
  }
};

}  // namespace
