// Writes region ops as calls of templates/attnc/common/expr.h. The mask is emitted once as a
// template over the index type, so the same text is the per-element mask (int) and the tile
// classifier (IntI intervals).
#include "compiler/CodeGen/CUDA/RegionEmitter.h"

#include "dialects/Attn/IR/AttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/StringSwitch.h"

#include <cmath>
#include <cstdio>

using namespace mlir;

namespace attnc {
namespace {

// The expr.h function for an elementwise op, or empty.
std::string exprFunction(Operation& op) {
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    switch (cmp.getPredicate()) {
    case arith::CmpIPredicate::slt: return "cmp_lt";
    case arith::CmpIPredicate::sle: return "cmp_le";
    case arith::CmpIPredicate::sgt: return "cmp_gt";
    case arith::CmpIPredicate::sge: return "cmp_ge";
    case arith::CmpIPredicate::eq: return "cmp_eq";
    case arith::CmpIPredicate::ne: return "cmp_ne";
    default: return "";
    }
  }
  if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
    switch (cmp.getPredicate()) {
    case arith::CmpFPredicate::OLT: return "cmp_lt";
    case arith::CmpFPredicate::OLE: return "cmp_le";
    case arith::CmpFPredicate::OGT: return "cmp_gt";
    case arith::CmpFPredicate::OGE: return "cmp_ge";
    case arith::CmpFPredicate::OEQ: return "cmp_eq";
    case arith::CmpFPredicate::UNE: return "cmp_ne";
    case arith::CmpFPredicate::UNO: return "cmp_uno";
    default: return "";
    }
  }
  bool isBool = op.getNumResults() == 1 && op.getResult(0).getType().isInteger(1);
  return llvm::StringSwitch<std::string>(op.getName().getStringRef())
      .Cases({"arith.addi", "arith.addf"}, "add")
      .Cases({"arith.subi", "arith.subf"}, "sub")
      .Cases({"arith.muli", "arith.mulf"}, "mul")
      .Cases({"arith.divsi", "arith.divf"}, "div")
      .Cases({"arith.remsi", "arith.remf"}, "rem")
      .Case("arith.negf", "neg")
      .Cases({"arith.minsi", "arith.minnumf"}, "min")
      .Cases({"arith.maxsi", "arith.maxnumf"}, "max")
      .Cases({"math.absi", "math.absf"}, "abs")
      .Case("math.tanh", "tanh")
      .Case("math.exp", "exp")
      .Case("math.exp2", "exp2")
      .Case("math.log", "log")
      .Case("math.sqrt", "sqrt")
      .Case("arith.sitofp", "to_f32")
      .Case("arith.select", "select")
      .Case("arith.andi", isBool ? "land" : "")
      .Case("arith.ori", isBool ? "lor" : "")
      .Case("arith.xori", isBool ? "lxor" : "")
      .Default("");
}

std::string floatLiteral(double value) {
  float f = float(value);
  if (std::isinf(f)) return f > 0 ? "ex::kInf" : "(-ex::kInf)";
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", double(f));
  std::string literal = text;
  if (literal.find_first_of(".e") == std::string::npos) literal += ".0";
  return literal + "f";
}

}  // namespace

LogicalResult RegionEmitter::emit(Region& region, ArrayRef<std::string> argNames, bool isMask) {
  Block& block = region.front();
  for (auto [arg, name] : llvm::zip(block.getArguments(), argNames)) names[arg] = name;
  for (Operation& op : block) {
    if (auto yield = dyn_cast<attn::YieldOp>(op)) {
      std::string value = name(yield.getValues()[0]);
      if (isMask)
        os << "    return ex::mask_result(" << value << ", q);\n";
      else
        os << "    return " << value << ";\n";
      continue;
    }
    std::string result = "v" + std::to_string(counter++);
    names[op.getResult(0)] = result;
    os << "    auto " << result << " = ";
    if (failed(emitExpression(op, isMask))) return failure();
    os << ";\n";
  }
  return success();
}

LogicalResult RegionEmitter::emitOps(ArrayRef<Operation*> ops,
                                     const llvm::DenseMap<Value, std::string>& valueNames,
                                     bool isMask) {
  names = valueNames;
  for (Operation* op : ops) {
    os << "    auto " << name(op->getResult(0)) << " = ";
    if (failed(emitExpression(*op, isMask))) return failure();
    os << ";\n";
  }
  return success();
}

LogicalResult RegionEmitter::emitExpression(Operation& op, bool isMask) {
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    if (auto intAttr = dyn_cast<IntegerAttr>(constant.getValue())) {
      if (intAttr.getType().isInteger(1)) {
        os << (intAttr.getValue().getBoolValue() ? "true" : "false");
      } else {
        int64_t v = intAttr.getValue().getSExtValue();
        if (v == INT32_MIN)
          os << "(-2147483647 - 1)";
        else
          os << "int(" << v << ")";
      }
      return success();
    }
    if (auto floatAttr = dyn_cast<FloatAttr>(constant.getValue())) {
      os << floatLiteral(floatAttr.getValueAsDouble());
      return success();
    }
    return op.emitOpError() << "constant of a type CodeGen cannot emit";
  }
  if (auto load = dyn_cast<attn::LoadOp>(op)) {
    auto decl = inputs.getAs<DictionaryAttr>(load.getInput());
    std::string index[3] = {"0", "0", "0"};  // b, h, pos
    for (auto [dim, value] : llvm::zip(decl.getAs<ArrayAttr>("dims"), load.getIndices())) {
      StringRef dimName = cast<StringAttr>(dim).getValue();
      index[dimName == "b" ? 0 : dimName == "h" ? 1 : 2] = name(value);
    }
    os << (load.getType().isF32() ? "ex::load_f32" : "ex::load_i32") << "(p.inputs["
       << decl.getAs<IntegerAttr>("slot").getInt() << "], " << index[0] << ", " << index[1]
       << ", " << index[2] << ", ex::input_extents(p))";
    return success();
  }
  std::string function = exprFunction(op);
  // Score hooks divide within 2 ulp (ex::fast_div); masks keep IEEE division, so a mask's
  // per-element value never disagrees with its interval classification (expr.h). Score hooks
  // take tanh by the launch's parameters (ex::score_tanh<P>: the forward's is the hardware's,
  // one MUFU instruction instead of two; expr.h says why and its error).
  if (!isMask && isa<arith::DivFOp>(op)) function = "fast_div";
  if (!isMask && op.getName().getStringRef() == "math.tanh") function = "score_tanh<P>";
  if (function.empty())
    return op.emitOpError() << "has no device form in attnc's expression set";
  os << "ex::" << function << "(";
  llvm::interleaveComma(op.getOperands(), os, [&](Value v) { os << name(v); });
  os << ")";
  return success();
}

}  // namespace attnc
