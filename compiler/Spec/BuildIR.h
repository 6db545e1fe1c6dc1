// Turns a checked Spec into attn IR: one attn.attention op whose builtin mask/score are named
// by attributes (attn-expand-builtins writes them out) and whose expressions become regions.
#pragma once

#include "compiler/Spec/Spec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace attnc {

// The spec must have been produced by parseSpec*/SpecBuilder (it is already checked).
mlir::OwningOpRef<mlir::ModuleOp> buildAttentionIR(const Spec& spec, mlir::MLIRContext& context);

}  // namespace attnc
