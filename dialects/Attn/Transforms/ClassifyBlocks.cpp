// attn-classify-blocks: checks that the mask has a sound interval form and records how the
// kernel classifies (q-tile, kv-tile) pairs; optionally counts the classes for given lengths.
#include "dialects/Attn/Transforms/MaskEvaluator.h"
#include "dialects/Attn/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "attn-classify-blocks"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCLASSIFYBLOCKS
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnClassifyBlocks final : mlir::attn::impl::AttnClassifyBlocksBase<AttnClassifyBlocks> {
  using Base::Base;

  void runOnOperation() override {
    auto result = getOperation().walk([&](AttentionOp op) {
      if (op.getMaskBuiltinAttr()) {
        op.emitOpError() << "run attn-expand-builtins before attn-classify-blocks";
        return WalkResult::interrupt();
      }
      std::string error;
      FailureOr<MaskEvaluator> mask = MaskEvaluator::create(op.getMask(), op.getInputs(), error);
      if (failed(mask)) {
        op.emitOpError() << "mask cannot be classified by intervals: " << error;
        return WalkResult::interrupt();
      }
      Builder b(op.getContext());
      StringRef kind = mask->empty() ? "none" : mask->readsInputs() ? "runtime" : "static";
      op.setBlockClassificationAttr(b.getStringAttr(kind));

      DictionaryAttr tiles = op.getTilesAttr();
      if (qLen > 0 && tiles && kind != "runtime") {
        int64_t keys = kvLen > 0 ? kvLen : qLen;
        TileCounts counts = countTiles(*mask, tiles.getAs<IntegerAttr>("block_q").getInt(),
                                       tiles.getAs<IntegerAttr>("block_kv").getInt(), qLen, keys);
        op->setAttr("block_summary",
                    b.getDictionaryAttr({b.getNamedAttr("empty", b.getI64IntegerAttr(counts.empty)),
                                         b.getNamedAttr("full", b.getI64IntegerAttr(counts.full)),
                                         b.getNamedAttr("partial", b.getI64IntegerAttr(counts.partial))}));
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted()) signalPassFailure();
  }
};

}  // namespace
