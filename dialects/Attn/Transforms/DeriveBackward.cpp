// attn-derive-backward: attn.tiled_forward -> a sibling attn.tiled_backward whose score_grad
// region is the symbolic derivative of the score region.
#include "dialects/Attn/Transforms/Passes.h"
#include "dialects/Attn/Transforms/ScoreGradient.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "attn-derive-backward"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNDERIVEBACKWARD
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnDeriveBackward final : mlir::attn::impl::AttnDeriveBackwardBase<AttnDeriveBackward> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<TiledForwardOp> forwards;
    getOperation().walk([&](TiledForwardOp op) { forwards.push_back(op); });
    for (TiledForwardOp forward : forwards) {
      OpBuilder b(forward->getContext());
      b.setInsertionPointAfter(forward);
      OperationState state(forward.getLoc(), TiledBackwardOp::getOperationName());
      for (StringRef name : {"head_dim", "head_dim_v", "element_type", "heads_q", "heads_kv",
                             "scale", "dropout", "dropout_rounds", "inputs", "classification",
                             "target"})
        if (Attribute value = forward->getAttr(name))  // dropout_rounds may be left default
          state.addAttribute(name, value);
      state.addAttribute("sym_name", b.getStringAttr(forward.getSymName() + "_bwd"));
      // What the recomputed epilogue keeps live beyond a plain causal mask: dropout's Philox
      // state, input reads, and any mask of more than one comparison.
      int64_t loads = 0, maskOps = 0;
      forward->walk([&](LoadOp) { ++loads; });
      if (!forward.getMask().empty()) maskOps = int64_t(forward.getMask().front().getOperations().size());
      bool dropout = forward.getDropout().convertToDouble() > 0;
      int64_t extra = epilogueRegisters(dropout, loads, DropoutPass::Backward) +
                      (maskOps > 4 ? 4 * (maskOps - 4) : 0);
      TileProblem problem{int64_t(forward.getHeadDim()), int64_t(forward.getHeadDimV()),
                          int64_t(forward.getElementType().getIntOrFloatBitWidth() / 8), 0, 0,
                          extra};
      // The sm_90a dK/dV kernel's epilogue, calibrated with ptxas (CUDA 13.0) on the examples at
      // hd128, whose accumulators leave no register to spare: up to 8 mask operations fit; each
      // further mask operation costs 4 registers. Dropout (its keep bits are made while S^T and
      // dP^T run, before their accumulators are live) and tanh (branch-free, expr.h) fit at no
      // cost: hd128 softcap and dropout compile without spills. A mask reading declared inputs
      // has its tile classes precomputed (tile_classes.h), so the producer warp only reads them,
      // and its operations go to the loads' addresses, which the 4-a-step calibration does not
      // describe: document (10 operations, 2 loads) compiles without spills at no extra cost.
      int64_t maskLoads = 0;
      if (!forward.getMask().empty()) forward.getMask().walk([&](LoadOp) { ++maskLoads; });
      problem.hopperBackwardExtra = maskLoads ? 0 : (maskOps > 8 ? 4 * (maskOps - 8) : 0);
      problem.dropout = dropout;
      problem.maskReadsInputs = maskLoads > 0;
      problem.scoreHook = !forward.getScore().empty();
      problem.backwardSpillReserve = spillReserve;
      TileTarget target{forward.getTarget().str(), smemPerBlock, smemPerBlock, regsPerThread};
      FailureOr<BackwardTileChoice> tiles = deriveBackwardTiles(problem, target);
      if (failed(tiles)) {
        InFlightDiagnostic diag = forward.emitOpError()
                                  << "no backward tile configuration for head_dim "
                                  << problem.headDim << " (v: " << problem.headDimV << ") fits "
                                  << int64_t(smemPerBlock) << " bytes of shared memory per block";
        // (Every head dim pair of the spec's range has a layout on both targets since the sm_80
        // dK/dV columns are padded to whole pairs per warp column: BackwardTileRuleTest.)
        if (forward.getTarget() != "sm_90a")
          diag << " on " << forward.getTarget() << " (the forward compiles)";
        return signalPassFailure();
      }
      if (spillReserve > 0)
        tiles->derivation.insert(
            tiles->derivation.begin(),
            llvm::formatv("backward spill fallback: the sm80 dK/dV kernel or the sm_90a dQ kernel "
                          "of a tile derived with {0} fewer registers spilled to local memory; {0} "
                          "more reserved per thread (counted with the epilogue below, and against "
                          "the dQ kernel's kv tile)",
                          int64_t(spillReserve))
                .str());
      auto i64 = [&](StringRef name, int64_t v) { return b.getNamedAttr(name, b.getI64IntegerAttr(v)); };
      state.addAttribute(
          "tiles", b.getDictionaryAttr(
                       {i64("kv_block_q", tiles->kvBlockQ), i64("kv_block_kv", tiles->kvBlockKV),
                        i64("kv_warps", tiles->kvWarps), i64("kv_stages", tiles->kvStages),
                        i64("kv_smem_bytes", tiles->kvSmemBytes), i64("q_block_q", tiles->qBlockQ),
                        i64("q_block_kv", tiles->qBlockKV), i64("q_warps", tiles->qWarps),
                        i64("q_stages", tiles->qStages), i64("q_smem_bytes", tiles->qSmemBytes),
                        b.getNamedAttr("kv_kernel", b.getStringAttr(tiles->kvKernel)),
                        i64("hopper_stages", tiles->hopperStages),
                        i64("hopper_smem_bytes", tiles->hopperSmemBytes),
                        i64("hopper_split", tiles->hopperSplit ? 1 : 0),
                        i64("hopper_q_block_kv", tiles->hopperQBlockKV),
                        i64("hopper_q_stages", tiles->hopperQStages),
                        i64("hopper_q_smem_bytes", tiles->hopperQSmemBytes),
                        i64("hopper_separate_dq", tiles->hopperSeparateDq ? 1 : 0),
                        b.getNamedAttr("derivation",
                                       b.getStrArrayAttr(SmallVector<StringRef>(
                                           tiles->derivation.begin(), tiles->derivation.end())))}));
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
