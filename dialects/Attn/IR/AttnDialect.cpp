// Registration of the attn dialect and its ops.
#include "dialects/Attn/IR/AttnDialect.h"

#include "dialects/Attn/IR/AttnOps.h"

using namespace mlir;
using namespace mlir::attn;

#include "dialects/Attn/IR/AttnDialect.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Attn/IR/AttnOps.cpp.inc"
      >();
}
