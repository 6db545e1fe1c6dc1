// Emits the ops of a mask or score region as CUDA C++: one call of the overloaded operations in
// templates/attnc/common/expr.h per op, in the region's order.
#pragma once

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Region.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace attnc {

// Emits the body of a region: one `auto vN = ex::fn(...);` per op, then `return ...`.
class RegionEmitter {
public:
  RegionEmitter(llvm::raw_ostream& os, mlir::DictionaryAttr inputs) : os(os), inputs(inputs) {}

  // `argNames` name the block arguments in order.
  mlir::LogicalResult emit(mlir::Region& region, llvm::ArrayRef<std::string> argNames,
                           bool isMask);

  // Emits `ops` (of one region, in order) as `auto <name> = ...;`, with `valueNames` naming both
  // their results and the values they read (block arguments, or values another function
  // computed).
  mlir::LogicalResult emitOps(llvm::ArrayRef<mlir::Operation*> ops,
                              const llvm::DenseMap<mlir::Value, std::string>& valueNames,
                              bool isMask);

private:
  std::string name(mlir::Value value) { return names.lookup(value); }

  mlir::LogicalResult emitExpression(mlir::Operation& op, bool isMask);

  llvm::raw_ostream& os;
  mlir::DictionaryAttr inputs;
  llvm::DenseMap<mlir::Value, std::string> names;
  unsigned counter = 0;
};

}  // namespace attnc
