// attn-select-decode-tiles: the decode kernel's tiles (deriveDecodeTiles in TileRuleDecode.cpp)
// for the variant's GQA group, recorded beside the forward's `tiles` as `decode_tiles`.
#include "dialects/Attn/Transforms/Passes.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "attn-select-decode-tiles"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNSELECTDECODETILES
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnSelectDecodeTiles final
    : mlir::attn::impl::AttnSelectDecodeTilesBase<AttnSelectDecodeTiles> {
  using Base::Base;

  void runOnOperation() override {
    TileTarget target{arch, smemPerBlock, smemPerSM, regsPerThread};
    auto result = getOperation().walk([&](AttentionOp op) {
      // Dropout keeps the forward kernel: the decode kernel holds no Philox state.
      if (op.getDropout().convertToDouble() > 0) return WalkResult::advance();
      int64_t loads = 0;
      op->walk([&](LoadOp) { ++loads; });
      const int64_t headsQ = op.getHeadsQ(), headsKV = op.getHeadsKv();
      DecodeProblem problem{int64_t(op.getHeadDim()), int64_t(op.getHeadDimV()),
                            int64_t(op.getElementType().getIntOrFloatBitWidth() / 8),
                            group > 0 ? int64_t(group) : headsQ / std::max<int64_t>(headsKV, 1),
                            qLen, epilogueRegisters(false, loads) + spillReserve};
      FailureOr<DecodeTileChoice> choice = deriveDecodeTiles(problem, target, numSMs);
      if (failed(choice)) {
        op.emitOpError() << "no decode tile configuration fits " << arch << " ("
                         << int64_t(smemPerSM) << " bytes of shared memory per SM, "
                         << int64_t(regsPerThread) << " registers per thread) for head_dim "
                         << op.getHeadDim() << ", head_dim_v " << op.getHeadDimV() << " with "
                         << loads << " input reads";
        return WalkResult::interrupt();
      }
      Builder b(op.getContext());
      SmallVector<NamedAttribute> tiles = {
          b.getNamedAttr("rows", b.getI64IntegerAttr(choice->rows)),
          b.getNamedAttr("q_in_registers", b.getBoolAttr(choice->qInRegisters)),
          b.getNamedAttr("block_kv", b.getI64IntegerAttr(choice->blockKV)),
          b.getNamedAttr("warps", b.getI64IntegerAttr(choice->warps)),
          b.getNamedAttr("stages", b.getI64IntegerAttr(choice->stages)),
          b.getNamedAttr("smem_bytes", b.getI64IntegerAttr(choice->smemBytes)),
          b.getNamedAttr("derivation", b.getStrArrayAttr(SmallVector<StringRef>(
                                           choice->derivation.begin(), choice->derivation.end())))};
      op.setDecodeTilesAttr(b.getDictionaryAttr(tiles));
      return WalkResult::advance();
    });
    if (result.wasInterrupted()) signalPassFailure();
  }
};

}  // namespace
