// Flattens a mask region into a list of steps and runs them per element or over intervals.
#include "dialects/Attn/Transforms/MaskEvaluator.h"

#include "dialects/Attn/IR/AttnOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSwitch.h"

#include <type_traits>

using namespace mlir;
using namespace mlir::attn;
namespace ex = attnc::expr;

namespace {

using Step = MaskEvaluator::Step;

FailureOr<Step::Pred> intPredicate(arith::CmpIPredicate pred) {
  switch (pred) {
  case arith::CmpIPredicate::slt: return Step::Lt;
  case arith::CmpIPredicate::sle: return Step::Le;
  case arith::CmpIPredicate::sgt: return Step::Gt;
  case arith::CmpIPredicate::sge: return Step::Ge;
  case arith::CmpIPredicate::eq: return Step::Eq;
  case arith::CmpIPredicate::ne: return Step::Ne;
  default: return failure();  // unsigned comparisons have no meaning for indices here
  }
}

FailureOr<Step::Pred> floatPredicate(arith::CmpFPredicate pred) {
  switch (pred) {
  case arith::CmpFPredicate::OLT: return Step::Lt;
  case arith::CmpFPredicate::OLE: return Step::Le;
  case arith::CmpFPredicate::OGT: return Step::Gt;
  case arith::CmpFPredicate::OGE: return Step::Ge;
  case arith::CmpFPredicate::OEQ: return Step::Eq;
  case arith::CmpFPredicate::UNE: return Step::Ne;
  case arith::CmpFPredicate::UNO: return Step::Uno;
  default: return failure();
  }
}

std::optional<Step::Kind> elementwiseKind(Operation* op) {
  Type type = op->getNumResults() ? op->getResult(0).getType() : Type();
  bool isBool = type && type.isInteger(1);
  return llvm::StringSwitch<std::optional<Step::Kind>>(op->getName().getStringRef())
      .Case("arith.addi", Step::AddI)
      .Case("arith.subi", Step::SubI)
      .Case("arith.muli", Step::MulI)
      .Case("arith.divsi", Step::DivI)
      .Case("arith.remsi", Step::RemI)
      .Case("arith.minsi", Step::MinI)
      .Case("arith.maxsi", Step::MaxI)
      .Case("math.absi", Step::AbsI)
      .Case("arith.addf", Step::AddF)
      .Case("arith.subf", Step::SubF)
      .Case("arith.mulf", Step::MulF)
      .Case("arith.divf", Step::DivF)
      .Case("arith.remf", Step::RemF)
      .Case("arith.negf", Step::NegF)
      .Case("arith.minnumf", Step::MinF)
      .Case("arith.maxnumf", Step::MaxF)
      .Case("math.absf", Step::AbsF)
      .Case("math.tanh", Step::Tanh)
      .Case("math.exp", Step::Exp)
      .Case("math.exp2", Step::Exp2)
      .Case("math.log", Step::Log)
      .Case("math.sqrt", Step::Sqrt)
      .Case("arith.sitofp", Step::ToF32)
      .Case("arith.andi", isBool ? std::optional(Step::And) : std::nullopt)
      .Case("arith.ori", isBool ? std::optional(Step::Or) : std::nullopt)
      .Case("arith.xori", isBool ? std::optional(Step::Xor) : std::nullopt)
      .Default(std::nullopt);
}

template <class Bool>
Bool makeBool(bool value) {
  if constexpr (std::is_same_v<Bool, bool>)
    return value;
  else
    return ex::tri(value);
}

template <class Num, class Bool>
Bool compare(Step::Pred pred, Num x, Num y) {
  switch (pred) {
  case Step::Lt: return ex::cmp_lt(x, y);
  case Step::Le: return ex::cmp_le(x, y);
  case Step::Gt: return ex::cmp_gt(x, y);
  case Step::Ge: return ex::cmp_ge(x, y);
  case Step::Eq: return ex::cmp_eq(x, y);
  case Step::Ne: return ex::cmp_ne(x, y);
  case Step::Uno:
    if constexpr (std::is_same_v<Num, int> || std::is_same_v<Num, ex::IntI>)
      return makeBool<Bool>(false);  // integers are never NaN
    else
      return ex::cmp_uno(x, y);
  }
  return makeBool<Bool>(false);
}

}  // namespace

FailureOr<MaskEvaluator> MaskEvaluator::create(Region& mask, DictionaryAttr inputs,
                                               std::string& error) {
  MaskEvaluator evaluator;
  if (mask.empty()) return evaluator;
  evaluator.scoreRegion = mask.front().getNumArguments() == kScoreNumArgs;
  llvm::DenseMap<Value, unsigned> stepOf;
  for (BlockArgument arg : mask.front().getArguments()) {
    Step step{Step::Arg};
    step.intValue = arg.getArgNumber();
    stepOf[arg] = evaluator.steps.size();
    evaluator.steps.push_back(step);
  }
  for (Operation& op : mask.front()) {
    auto fail = [&](StringRef why) {
      error = (op.getName().getStringRef() + ": " + why).str();
      return failure();
    };
    if (auto yield = dyn_cast<YieldOp>(op)) {
      if (yield.getValues().size() != 1) return fail("must yield one value");
      evaluator.result = stepOf.lookup(yield.getValues()[0]);
      continue;
    }
    if (op.getNumResults() != 1 || op.getNumRegions() != 0)
      return fail("has no interval form in a mask region");
    Step step{Step::Arg};
    auto operand = [&](unsigned i) { return stepOf.lookup(op.getOperand(i)); };
    if (op.getNumOperands() > 0) step.a = operand(0);
    if (op.getNumOperands() > 1) step.b = operand(1);
    if (op.getNumOperands() > 2) step.c = operand(2);
    Type type = op.getResult(0).getType();

    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      if (auto intAttr = dyn_cast<IntegerAttr>(constant.getValue())) {
        step.kind = type.isInteger(1) ? Step::ConstB : Step::ConstI;
        step.intValue = type.isInteger(1) ? (intAttr.getValue().getBoolValue() ? 1 : 0)
                                          : intAttr.getValue().getSExtValue();
      } else if (auto floatAttr = dyn_cast<FloatAttr>(constant.getValue())) {
        step.kind = Step::ConstF;
        step.floatValue = floatAttr.getValueAsDouble();
      } else {
        return fail("constant of unsupported type");
      }
    } else if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
      auto pred = intPredicate(cmp.getPredicate());
      if (failed(pred)) return fail("only signed and equality comparisons are supported");
      step.kind = Step::CmpI;
      step.pred = *pred;
    } else if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
      auto pred = floatPredicate(cmp.getPredicate());
      if (failed(pred)) return fail("only olt, ole, ogt, oge, oeq, une and uno are supported");
      step.kind = Step::CmpF;
      step.pred = *pred;
    } else if (isa<arith::SelectOp>(op)) {
      step.kind = type.isInteger(1) ? Step::SelectB : type.isF32() ? Step::SelectF : Step::SelectI;
    } else if (auto load = dyn_cast<LoadOp>(op)) {
      auto decl = inputs ? inputs.getAs<DictionaryAttr>(load.getInput()) : DictionaryAttr();
      if (!decl) return fail("reads an undeclared input");
      step.kind = type.isF32() ? Step::LoadF32 : Step::LoadI32;
      step.intValue = decl.getAs<IntegerAttr>("slot").getInt();
      for (auto [i, dim] : llvm::enumerate(decl.getAs<ArrayAttr>("dims"))) {
        StringRef name = cast<StringAttr>(dim).getValue();
        int slot = name == "b" ? 0 : name == "h" ? 1 : 2;
        step.dimOperand[slot] = operand(i);
      }
    } else if (auto kind = elementwiseKind(&op)) {
      step.kind = *kind;
    } else {
      return fail("has no interval form in a mask region");
    }
    if (!type.isInteger(1) && !type.isInteger(32) && !type.isF32())
      return fail("values must be i1, i32 or f32");
    stepOf[op.getResult(0)] = evaluator.steps.size();
    evaluator.steps.push_back(step);
  }
  return evaluator;
}

bool MaskEvaluator::readsInputs() const {
  for (const Step& step : steps)
    if (step.kind == Step::LoadI32 || step.kind == Step::LoadF32) return true;
  return false;
}

bool MaskEvaluator::readsInput(int slot) const {
  for (const Step& step : steps)
    if ((step.kind == Step::LoadI32 || step.kind == Step::LoadF32) && step.intValue == slot)
      return true;
  return false;
}

template <class Int, class Flt, class Bool>
MaskEvaluator::Slot<Int, Flt, Bool> MaskEvaluator::run(Flt score, Int b, Int h, Int q, Int k,
                                                        int qLen, int kvLen,
                                                        const MaskInputs& inputs) const {
  const ex::InputExtents extents{inputs.batch, inputs.heads, qLen > kvLen ? qLen : kvLen};
  using Slot = MaskEvaluator::Slot<Int, Flt, Bool>;
  if (steps.empty()) {
    Slot identity;
    identity.t = makeBool<Bool>(true);
    identity.f = score;
    return identity;
  }
  std::vector<Slot> v(steps.size());
  const Int args[kMaskNumArgs] = {b, h, q, k, Int(qLen), Int(kvLen)};
  for (size_t n = 0; n < steps.size(); ++n) {
    const Step& s = steps[n];
    Slot& r = v[n];
    const Slot &x = v[s.a], &y = v[s.b], &z = v[s.c];
    switch (s.kind) {
    case Step::Arg:
      if (scoreRegion && s.intValue == 0)
        r.f = score;
      else
        r.i = args[s.intValue - (scoreRegion ? 1 : 0)];
      break;
    case Step::ConstI: r.i = Int(int(s.intValue)); break;
    case Step::ConstF: r.f = Flt(float(s.floatValue)); break;
    case Step::ConstB: r.t = makeBool<Bool>(s.intValue != 0); break;
    case Step::AddI: r.i = ex::add(x.i, y.i); break;
    case Step::SubI: r.i = ex::sub(x.i, y.i); break;
    case Step::MulI: r.i = ex::mul(x.i, y.i); break;
    case Step::DivI: r.i = ex::div(x.i, y.i); break;
    case Step::RemI: r.i = ex::rem(x.i, y.i); break;
    case Step::MinI: r.i = ex::min(x.i, y.i); break;
    case Step::MaxI: r.i = ex::max(x.i, y.i); break;
    case Step::AbsI: r.i = ex::abs(x.i); break;
    case Step::AddF: r.f = ex::add(x.f, y.f); break;
    case Step::SubF: r.f = ex::sub(x.f, y.f); break;
    case Step::MulF: r.f = ex::mul(x.f, y.f); break;
    case Step::DivF: r.f = ex::div(x.f, y.f); break;
    case Step::RemF: r.f = ex::rem(x.f, y.f); break;
    case Step::NegF: r.f = ex::neg(x.f); break;
    case Step::MinF: r.f = ex::min(x.f, y.f); break;
    case Step::MaxF: r.f = ex::max(x.f, y.f); break;
    case Step::AbsF: r.f = ex::abs(x.f); break;
    case Step::Tanh: r.f = ex::tanh(x.f); break;
    case Step::Exp: r.f = ex::exp(x.f); break;
    case Step::Exp2: r.f = ex::exp2(x.f); break;
    case Step::Log: r.f = ex::log(x.f); break;
    case Step::Sqrt: r.f = ex::sqrt(x.f); break;
    case Step::ToF32: r.f = ex::to_f32(x.i); break;
    case Step::CmpI: r.t = compare<Int, Bool>(s.pred, x.i, y.i); break;
    case Step::CmpF: r.t = compare<Flt, Bool>(s.pred, x.f, y.f); break;
    case Step::And: r.t = ex::land(x.t, y.t); break;
    case Step::Or: r.t = ex::lor(x.t, y.t); break;
    case Step::Xor: r.t = ex::lxor(x.t, y.t); break;
    case Step::SelectI: r.i = ex::select(x.t, y.i, z.i); break;
    case Step::SelectF: r.f = ex::select(x.t, y.f, z.f); break;
    case Step::SelectB: r.t = ex::select(x.t, y.t, z.t); break;
    case Step::LoadI32:
    case Step::LoadF32: {
      Int index[3] = {Int(0), Int(0), Int(0)};
      for (int d = 0; d < 3; ++d)
        if (s.dimOperand[d] >= 0) index[d] = v[s.dimOperand[d]].i;
      const attnc::InputRef& in = inputs.refs[s.intValue];
      if (s.kind == Step::LoadI32)
        r.i = ex::load_i32(in, index[0], index[1], index[2], extents);
      else
        r.f = ex::load_f32(in, index[0], index[1], index[2], extents);
      break;
    }
    }
  }
  return v[result];
}

bool MaskEvaluator::keep(int b, int h, int q, int k, int qLen, int kvLen,
                         const MaskInputs& inputs) const {
  return run<int, float, bool>(0.0f, b, h, q, k, qLen, kvLen, inputs).t;
}

ex::Tri MaskEvaluator::keep(ex::IntI b, ex::IntI h, ex::IntI q, ex::IntI k, int qLen, int kvLen,
                            const MaskInputs& inputs) const {
  return run<ex::IntI, ex::FltI, ex::Tri>(ex::FltI(0.0f), b, h, q, k, qLen, kvLen, inputs).t;
}

double MaskEvaluator::score(double score, int b, int h, int q, int k, int qLen, int kvLen,
                            const MaskInputs& inputs) const {
  return run<int, double, bool>(score, b, h, q, k, qLen, kvLen, inputs).f;
}

BlockClass MaskEvaluator::classify(int b, int h, int qLo, int qHi, int kLo, int kHi, int qLen,
                                   int kvLen, const MaskInputs& inputs) const {
  ex::Tri tri = keep(ex::IntI(b), ex::IntI(h), ex::IntI(qLo, qHi), ex::IntI(kLo, kHi), qLen,
                     kvLen, inputs);
  return tri == ex::Tri::False ? BlockClass::Empty
         : tri == ex::Tri::True ? BlockClass::Full
                                : BlockClass::Partial;
}

TileCounts mlir::attn::countTiles(const MaskEvaluator& mask, int blockQ, int blockKV, int qLen,
                                  int kvLen, const MaskInputs& inputs, int b,
                                  int h) {
  TileCounts counts;
  for (int qLo = 0; qLo < qLen; qLo += blockQ) {
    int qHi = std::min(qLo + blockQ, qLen) - 1;
    for (int kLo = 0; kLo < kvLen; kLo += blockKV) {
      int kHi = std::min(kLo + blockKV, kvLen) - 1;
      switch (mask.classify(b, h, qLo, qHi, kLo, kHi, qLen, kvLen, inputs)) {
      case BlockClass::Empty: ++counts.empty; break;
      case BlockClass::Full: ++counts.full; break;
      case BlockClass::Partial: ++counts.partial; break;
      }
    }
  }
  return counts;
}
