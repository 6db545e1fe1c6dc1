// Warnings about a spec that only its compiled form shows: what its mask keeps, found with the
// mask's interval form (MaskEvaluator, as attn-classify-blocks uses it), and which kernel family
// the target's tile rule chose. The reader's own warnings are in checkSpec (Spec.cpp).
#pragma once

#include "compiler/Spec/Spec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace mlir::attn {
class MaskEvaluator;
}

namespace attnc {

// A mask that keeps no element, one that keeps every element while written as a mask, and one
// under which every tile of blockQ x blockKV is partial (no tile skipped, the mask evaluated on
// every element). Masks that read declared inputs are classified at launch and get none.
void warnAboutMask(const Spec& spec, const mlir::attn::MaskEvaluator& mask, int64_t blockQ,
                   int64_t blockKV, Diagnostics& warnings);

// A spec that the sm_90a tile rules put on the slower sm_80-family kernels (`forwardKernel` and,
// when derived, `backwardKernel` are "sm80"), naming the spec's features that cost the registers.
// The derivations are the tile rules' lines (`attnc explain`); the warning quotes the one that
// says why.
void warnAboutKernel(const Spec& spec, llvm::StringRef targetName, llvm::StringRef forwardKernel,
                     llvm::StringRef backwardKernel, llvm::ArrayRef<std::string> derivation,
                     llvm::ArrayRef<std::string> backwardDerivation, Diagnostics& warnings);

}  // namespace attnc
