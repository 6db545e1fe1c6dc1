// The attn dialect class (generated) and the dialects its regions are built from.
#pragma once

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Dialect.h"

#include "dialects/Attn/IR/AttnDialect.h.inc"
