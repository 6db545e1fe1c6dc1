// The attn passes (declarations and registration generated from Passes.td).
#pragma once

#include "dialects/Attn/IR/AttnOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::attn {

#define GEN_PASS_DECL
#include "dialects/Attn/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/Attn/Transforms/Passes.h.inc"

}  // namespace mlir::attn
