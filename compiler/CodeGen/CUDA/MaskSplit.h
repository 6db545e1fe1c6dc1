// The per-element mask of a generated Variant split by what its values depend on, for the tiles
// a kernel masks element by element (templates/attnc/common/mask.h forEachKeep).
#pragma once

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Region.h"
#include "llvm/Support/raw_ostream.h"

namespace attnc {

// The per-element mask split by what its values depend on, for the tiles a kernel masks element
// by element (common/mask.h forEachKeep): mask_row(p, b, h, q) computes the values that
// depend on the row (and b, h, the lengths and declared inputs) alone, once per row of a lane's
// tile; mask_col(p, b, h, k) those that depend on the key alone, once per key; mask_join(p, b, h,
// q, k, row, col) the rest, once per element, reading the first two's results from `row` and
// `col`. A document mask's doc[q] is then one load per row and doc[k] one per key instead of two
// per element for the compiler to merge, which slowed NVVM. The values that depend on neither
// (lengths, constants) are recomputed where used.
// Returns failure where no row or key part reads a declared input (the split would gain nothing:
// the compiler shares position arithmetic across elements itself) or a value the functions hand
// on has a type the split cannot name; the caller then emits kMaskSplit = false and the kernels
// evaluate `mask` per element.
mlir::LogicalResult emitMaskSplit(llvm::raw_ostream& out, mlir::Region& mask,
                                  mlir::DictionaryAttr inputs);

}  // namespace attnc
