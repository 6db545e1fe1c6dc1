// The generated `struct Variant` of a unit: the constants that choose the kernels' code paths and
// the hooks the kernels call (mask and its split, score, score_grad), written from the tiled ops.
#pragma once

#include "dialects/Attn/IR/AttnOps.h"

#include "llvm/Support/raw_ostream.h"

#include <utility>
#include <vector>

namespace attnc {

// The slots of the declared inputs that the mask region loads along positions, with their
// element types (true: f32): the ones whose interval loads a block summary speeds up (ascending,
// unique).
std::vector<std::pair<int, bool>> summarizedInputs(mlir::attn::TiledForwardOp op);

// What the Variant's constants chose that the launch must know too (KernelSource, BackwardSource).
struct VariantChoices {
  bool maskIgnoresHead = false;  // kMaskIgnoresHead
  bool orderedGrid = false;      // kOrderedGrid
  bool kvOrderedGrid = false;    // kKvOrderedGrid
};

// Writes `struct Variant { ... };` for the forward op and, with `backward`, the backward's hooks.
// `hopper`, `hopperBackward`: the sm_90a forward and dK/dV kernels serve; `tileClasses`: the launch
// classifies every tile pair first (the mask reads declared inputs along positions). Fails (with
// an error on the op) for an op in a region that has no device form.
mlir::FailureOr<VariantChoices> emitVariant(llvm::raw_ostream& os, mlir::attn::TiledForwardOp op,
                                            mlir::attn::TiledBackwardOp backward, bool hopper,
                                            bool hopperBackward, bool tileClasses);

}  // namespace attnc
