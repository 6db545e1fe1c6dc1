// The ops of the attn dialect (generated from AttnOps.td) and helpers for their regions.
#pragma once

#include "dialects/Attn/IR/AttnDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/Attn/IR/AttnOps.h.inc"

namespace mlir::attn {

// Block arguments of the mask region, in order.
constexpr unsigned kMaskNumArgs = 6;  // b, h, q, k, q_len, kv_len
// Block arguments of the score region, in order: the scaled score, then the mask's.
constexpr unsigned kScoreNumArgs = 7;  // score, b, h, q, k, q_len, kv_len

// Creates the entry block of an empty mask or score region with its arguments.
Block& createMaskBlock(Region& region, Location loc);
Block& createScoreBlock(Region& region, Location loc);

// The value a single-block region yields, or null for an empty region.
Value yieldedValue(Region& region);

// Whether a region reads declared inputs (its values are only known at launch time).
bool readsInputs(Region& region);

}  // namespace mlir::attn
