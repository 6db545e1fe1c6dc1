// attn-derive-backward: attn.tiled_forward -> a sibling attn.tiled_backward whose score_grad
// region is the symbolic derivative of the score region.
#include "dialects/Attn/Transforms/Passes.h"
#include "dialects/Attn/Transforms/ScoreGradient.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#define DEBUG_TYPE "attn-derive-backward"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNDERIVEBACKWARD
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnDeriveBackward final : mlir::attn::impl::AttnDeriveBackwardBase<AttnDeriveBackward> {
  void runOnOperation() override {
    SmallVector<TiledForwardOp> forwards;
    getOperation().walk([&](TiledForwardOp op) { forwards.push_back(op); });
    for (TiledForwardOp forward : forwards) {
      OpBuilder b(forward->getContext());
      b.setInsertionPointAfter(forward);
      OperationState state(forward.getLoc(), TiledBackwardOp::getOperationName());
      for (StringRef name : {"head_dim", "head_dim_v", "element_type", "heads_q", "heads_kv",
                             "scale", "dropout", "inputs", "classification", "target"})
        state.addAttribute(name, forward->getAttr(name));
      state.addAttribute("sym_name", b.getStringAttr(forward.getSymName() + "_bwd"));
      state.addRegion();
      state.addRegion();
      state.addRegion();
      auto backward = cast<TiledBackwardOp>(b.create(state));
      IRMapping mapping;
      forward.getMask().cloneInto(&backward.getMask(), mapping);
      forward.getScore().cloneInto(&backward.getScore(), mapping);
      std::string error;
      if (failed(deriveScoreGradient(forward.getScore(), backward.getScoreGrad(), forward.getLoc(),
                                     error))) {
        forward.emitOpError() << "the score's derivative cannot be formed: " << error;
        return signalPassFailure();
      }
    }
  }
};

}  // namespace
