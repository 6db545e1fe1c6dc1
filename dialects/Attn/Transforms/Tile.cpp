// attn-tile: attn.attention (with tiles and block classification) -> attn.tiled_forward.
#include "dialects/Attn/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "attn-tile"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNTILE
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnTile final : mlir::attn::impl::AttnTileBase<AttnTile> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops) {
      DictionaryAttr tiles = op.getTilesAttr();
      StringAttr classification = op.getBlockClassificationAttr();
      if (!tiles || !classification) {
        op.emitOpError() << "run attn-select-tiles and attn-classify-blocks before attn-tile";
        return signalPassFailure();
      }
      OpBuilder b(op);
      OperationState state(op.getLoc(), TiledForwardOp::getOperationName());
      for (StringRef name : {"sym_name", "head_dim", "head_dim_v", "element_type", "heads_q",
                             "heads_kv", "scale", "dropout", "dropout_rounds", "inputs"})
        if (Attribute value = op->getAttr(name))  // dropout_rounds may be left default
          state.addAttribute(name, value);
      for (StringRef name : {"kernel", "block_q", "block_kv", "warps", "stages", "smem_bytes", "derivation"})
        state.addAttribute(name, tiles.get(name));
      state.addAttribute("classification", classification);
      // Without a mask every tile is full: stream them all. Otherwise the mask bounds the loop.
      state.addAttribute("kv_bounds", b.getStringAttr(classification.getValue() == "none"
                                                          ? "all"
                                                          : "interval-search"));
      state.addAttribute("target", b.getStringAttr(target));
      state.addRegion();
      state.addRegion();
      auto tiled = cast<TiledForwardOp>(b.create(state));
      if (Attribute summary = op->getAttr("block_summary")) tiled->setAttr("block_summary", summary);
      tiled.getMask().takeBody(op.getMask());
      tiled.getScore().takeBody(op.getScore());
      op.erase();
    }
  }
};

}  // namespace
