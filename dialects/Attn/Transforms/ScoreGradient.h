// The derivative of a score region with respect to its score argument, formed symbolically from
// its ops (forward-mode: each op's value and its derivative). attn-derive-backward uses it; the
// backward kernel multiplies dS by it.
#pragma once

#include "mlir/IR/Region.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>

namespace mlir::attn {

// Fills the empty region `gradient` with a block taking the score region's arguments and
// yielding d(score region)/d(score) as f32. An empty score region (the identity) yields 1.
// Fails, naming the op in `error`, when an op's derivative cannot be formed (a remainder by a
// score-dependent divisor, or an op attnc has no rule for).
LogicalResult deriveScoreGradient(Region& score, Region& gradient, Location loc, std::string& error);

// Calls `visit` on each op of `body`, in order, that has an operand computed (through any chain of
// ops) from the block arguments `arguments` (indices past the block's arguments are ignored): the
// per-element ops of a score region, say, with the score, q and k.
void forEachOpDependingOn(Block& body, ArrayRef<unsigned> arguments,
                          llvm::function_ref<void(Operation&)> visit);

}  // namespace mlir::attn
