// Forward-mode symbolic differentiation of score regions. The derivative of every value that
// depends on the score is built next to a clone of the value itself; values that do not depend on
// it (indices, loads of inputs, constants) have derivative 0 and emit nothing.
#include "dialects/Attn/Transforms/ScoreGradient.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include "dialects/Attn/IR/AttnOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <cmath>

using namespace mlir;
using namespace mlir::attn;

namespace {

class Differentiator {
public:
  Differentiator(OpBuilder& b, Location loc) : b(b), loc(loc) {}

  // The derivative of `value` (a clone in the gradient block), or null when it is 0.
  Value derivative(Value value) const { return derivatives.lookup(value); }
  void setDerivative(Value value, Value d) { derivatives[value] = d; }

  // Emits the derivative of the cloned op `op` (operands already cloned, derivatives known).
  LogicalResult differentiate(Operation& op, std::string& error) {
    if (op.getNumResults() != 1) return success();
    Value result = op.getResult(0);
    if (!result.getType().isF32()) return success();  // i1/i32 values are piecewise constant in s
    auto d = [&](unsigned i) { return derivative(op.getOperand(i)); };
    auto any = [&] {
      for (Value operand : op.getOperands())
        if (derivative(operand)) return true;
      return false;
    };
    if (!any()) return success();
    Value x = op.getNumOperands() > 0 ? op.getOperand(0) : Value();
    Value y = op.getNumOperands() > 1 ? op.getOperand(1) : Value();
    StringRef name = op.getName().getStringRef();
    Value out;
    if (name == "arith.addf") {
      out = add(d(0), d(1));
    } else if (name == "arith.subf") {
      out = sub(d(0), d(1));
    } else if (name == "arith.negf") {
      out = neg(d(0));
    } else if (name == "arith.mulf") {  // x' y + x y'
      out = add(mul(d(0), y), mul(x, d(1)));
    } else if (name == "arith.divf") {  // (x' y - x y') / y^2
      out = div(sub(mul(d(0), y), mul(x, d(1))), mul(y, y));
    } else if (name == "arith.remf") {  // x - y trunc(x / y): x' - y' trunc(x / y)
      // trunc(x / y) as (x - result) / y: the emitted hooks have no trunc, and fmod is exact.
      out = d(1) ? sub(d(0), mul(d(1), div(sub(x, result), y))) : d(0);
    } else if (name == "arith.minnumf" || name == "arith.maxnumf") {
      // The derivative of the operand that is chosen: the first on ties, and whichever is not
      // NaN (minnumf/maxnumf, like fminf/fmaxf, return the other operand for a NaN).
      auto pred = name == "arith.minnumf" ? arith::CmpFPredicate::OLE : arith::CmpFPredicate::OGE;
      Value ordered = arith::CmpFOp::create(b, loc, pred, x, y);
      Value secondIsNan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, y, y);
      Value first = arith::OrIOp::create(b, loc, ordered, secondIsNan);
      out = arith::SelectOp::create(b, loc, first, orZero(d(0)), orZero(d(1)));
    } else if (name == "arith.select") {
      out = arith::SelectOp::create(b, loc, op.getOperand(0), orZero(d(1)),
                                    orZero(op.getNumOperands() > 2 ? d(2) : Value()));
    } else if (name == "math.absf") {  // sign(x) x', with sign(0) = 1
      Value nonNegative = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, x, constant(0.0));
      out = arith::SelectOp::create(b, loc, nonNegative, d(0), neg(d(0)));
    } else if (name == "math.tanh") {  // (1 - tanh^2) x'
      out = mul(sub(constant(1.0), mul(result, result)), d(0));
    } else if (name == "math.exp") {
      out = mul(result, d(0));
    } else if (name == "math.exp2") {
      out = mul(mul(result, constant(std::log(2.0))), d(0));
    } else if (name == "math.log") {
      out = div(d(0), x);
    } else if (name == "math.sqrt") {
      out = div(d(0), mul(constant(2.0), result));
    } else {
      return fail(op, "has no derivative rule", error);
    }
    setDerivative(result, out);
    return success();
  }

  Value constant(double value) {
    return arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(float(value)));
  }
  Value orZero(Value v) { return v ? v : constant(0.0); }

private:
  LogicalResult fail(Operation& op, StringRef why, std::string& error) {
    error = (op.getName().getStringRef() + ": " + why).str();
    return failure();
  }
  // Sums and products that skip zero (null) terms.
  Value add(Value x, Value y) { return !x ? y : !y ? x : arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) {
    if (!y) return x;
    return x ? Value(arith::SubFOp::create(b, loc, x, y)) : neg(y);
  }
  Value neg(Value x) { return x ? Value(arith::NegFOp::create(b, loc, x)) : Value(); }
  Value mul(Value x, Value y) { return x && y ? Value(arith::MulFOp::create(b, loc, x, y)) : Value(); }
  Value div(Value x, Value y) { return x ? Value(arith::DivFOp::create(b, loc, x, y)) : Value(); }

  OpBuilder& b;
  Location loc;
  llvm::DenseMap<Value, Value> derivatives;
};

}  // namespace

LogicalResult mlir::attn::deriveScoreGradient(Region& score, Region& gradient, Location loc,
                                              std::string& error) {
  Block& block = createScoreBlock(gradient, loc);
  OpBuilder b = OpBuilder::atBlockEnd(&block);
  Differentiator differentiator(b, loc);
  if (score.empty()) {  // the identity
    YieldOp::create(b, loc, ValueRange{differentiator.constant(1.0)});
    return success();
  }
  IRMapping mapping;
  for (auto [from, to] : llvm::zip(score.front().getArguments(), block.getArguments()))
    mapping.map(from, to);
  differentiator.setDerivative(block.getArgument(0), differentiator.constant(1.0));
  for (Operation& op : score.front()) {
    if (auto yield = dyn_cast<YieldOp>(op)) {
      Value result = mapping.lookup(yield.getValues()[0]);
      YieldOp::create(b, loc, ValueRange{differentiator.orZero(differentiator.derivative(result))});
      continue;
    }
    Operation* clone = b.clone(op, mapping);
    if (failed(differentiator.differentiate(*clone, error))) return failure();
  }
  return success();
}

void mlir::attn::forEachOpDependingOn(Block& body, ArrayRef<unsigned> arguments,
                                      llvm::function_ref<void(Operation&)> visit) {
  llvm::SmallPtrSet<Value, 16> dependent;
  for (unsigned i : arguments)
    if (i < body.getNumArguments()) dependent.insert(body.getArgument(i));
  for (Operation& op : body) {
    if (!llvm::any_of(op.getOperands(), [&](Value v) { return dependent.contains(v); })) continue;
    for (Value result : op.getResults()) dependent.insert(result);
    visit(op);
  }
}
