// attn-expand-builtins: builtin masks and score modifications become plain regions.
#include "dialects/Attn/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "attn-expand-builtins"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNEXPANDBUILTINS
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

// Builds region bodies with short names for the few ops builtins need. Callers create operands
// in named locals first, so the op order does not depend on argument evaluation order.
struct RegionBuilder {
  OpBuilder b;
  Location loc;

  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32); }
  Value f32(double v) { return arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(float(v))); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) { return arith::CmpIOp::create(b, loc, p, x, y); }
  Value both(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value either(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value toF32(Value x) { return arith::SIToFPOp::create(b, loc, b.getF32Type(), x); }
  Value fadd(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value fmul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value fdiv(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  void yield(Value v) { YieldOp::create(b, loc, ValueRange{v}); }
};

// The region arguments by name (the mask's; the score region has `score` first).
struct Indices {
  Value b, h, q, k, qLen, kvLen;
  explicit Indices(Block& block, unsigned first) {
    auto args = block.getArguments().drop_front(first);
    b = args[0], h = args[1], q = args[2], k = args[3], qLen = args[4], kvLen = args[5];
  }
};

// `q` aligned to the keys: bottom-right (FlashAttention) unless `top_left` is set.
Value alignedQuery(RegionBuilder& rb, const Indices& idx, DictionaryAttr builtin) {
  auto topLeft = builtin.getAs<BoolAttr>("top_left");
  if (topLeft && topLeft.getValue()) return idx.q;
  return rb.add(idx.q, rb.sub(idx.kvLen, idx.qLen));
}

LogicalResult expandMask(AttentionOp op, DictionaryAttr builtin) {
  Block& block = createMaskBlock(op.getMask(), op.getLoc());
  RegionBuilder rb{OpBuilder::atBlockEnd(&block), op.getLoc()};
  Indices idx(block, 0);
  StringRef kind = builtin.getAs<StringAttr>("kind").getValue();
  auto intParam = [&](StringRef name) -> FailureOr<int64_t> {
    auto attr = builtin.getAs<IntegerAttr>(name);
    if (!attr) return op.emitOpError() << "mask_builtin '" << kind << "' needs an integer '" << name << "'";
    return attr.getInt();
  };
  using P = arith::CmpIPredicate;
  Value keep;
  if (kind == "causal") {
    keep = rb.cmp(P::sge, alignedQuery(rb, idx, builtin), idx.k);
  } else if (kind == "window") {
    auto size = intParam("size");
    if (failed(size)) return failure();
    Value q = alignedQuery(rb, idx, builtin);
    Value causal = rb.cmp(P::sge, q, idx.k);
    Value distance = rb.sub(q, idx.k);
    Value near = rb.cmp(P::slt, distance, rb.i32(*size));
    keep = rb.both(causal, near);
  } else if (kind == "prefix") {
    auto length = intParam("length");
    if (failed(length)) return failure();
    Value inPrefix = rb.cmp(P::slt, idx.k, rb.i32(*length));
    Value causal = rb.cmp(P::sge, alignedQuery(rb, idx, builtin), idx.k);
    keep = rb.either(inPrefix, causal);
  } else if (kind == "document") {
    auto input = builtin.getAs<StringAttr>("input");
    auto decl = input ? op.getInputs().getAs<DictionaryAttr>(input.getValue()) : DictionaryAttr();
    if (!decl) return op.emitOpError() << "document mask names an undeclared input";
    auto docAt = [&](Value pos) {
      SmallVector<Value> indices;
      for (Attribute dim : decl.getAs<ArrayAttr>("dims")) {
        StringRef name = cast<StringAttr>(dim).getValue();
        indices.push_back(name == "b" ? idx.b : name == "h" ? idx.h : pos);
      }
      return LoadOp::create(rb.b, rb.loc, rb.b.getI32Type(), input, indices).getResult();
    };
    // Document ids are per key position; a query row sits at key position q'.
    Value docQ = docAt(alignedQuery(rb, idx, builtin));
    Value docK = docAt(idx.k);
    keep = rb.cmp(P::eq, docQ, docK);
    auto causal = builtin.getAs<BoolAttr>("causal");
    if (causal && causal.getValue())
      keep = rb.both(keep, rb.cmp(P::sge, alignedQuery(rb, idx, builtin), idx.k));
  }
  rb.yield(keep);
  op.removeMaskBuiltinAttr();
  return success();
}

// The ALiBi paper's slopes as a function of h: 2^(-8 (h + 1) / n) for the largest power of two
// n <= heads; heads beyond n take every other slope of 2n heads: 2^(-4 (2 (h - n) + 1) / n).
Value standardAlibiSlope(RegionBuilder& rb, Value h, int64_t heads) {
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  Value minusEight = rb.f32(-8.0);
  Value headNumber = rb.toF32(rb.add(h, rb.i32(1)));
  Value scaled = rb.fmul(minusEight, headNumber);
  Value slope = math::Exp2Op::create(rb.b, rb.loc, rb.fdiv(scaled, rb.f32(double(n))));
  if (n == heads) return slope;
  Value minusFour = rb.f32(-4.0);
  Value beyond = rb.sub(h, rb.i32(n));
  Value twice = arith::MulIOp::create(rb.b, rb.loc, rb.i32(2), beyond);
  Value odd = rb.toF32(rb.add(twice, rb.i32(1)));
  Value scaledOdd = rb.fmul(minusFour, odd);
  Value extra = math::Exp2Op::create(rb.b, rb.loc, rb.fdiv(scaledOdd, rb.f32(double(n))));
  Value firstN = rb.cmp(arith::CmpIPredicate::slt, h, rb.i32(n));
  return arith::SelectOp::create(rb.b, rb.loc, firstN, slope, extra);
}

LogicalResult expandScore(AttentionOp op, DictionaryAttr builtin) {
  Block& block = createScoreBlock(op.getScore(), op.getLoc());
  RegionBuilder rb{OpBuilder::atBlockEnd(&block), op.getLoc()};
  Value score = block.getArgument(0);
  Indices idx(block, 1);
  StringRef kind = builtin.getAs<StringAttr>("kind").getValue();
  Value result;
  if (kind == "softcap") {
    auto cap = builtin.getAs<FloatAttr>("cap");
    if (!cap || !(cap.getValueAsDouble() > 0))
      return op.emitOpError() << "softcap needs a positive 'cap'";
    Value c = rb.f32(cap.getValueAsDouble());
    Value tanh = math::TanhOp::create(rb.b, rb.loc, rb.fdiv(score, c));
    result = rb.fmul(c, tanh);
  } else {  // alibi: score - slope_h * |q' - k|
    Value slope;
    if (auto slopes = builtin.getAs<StringAttr>("slopes")) {
      auto decl = op.getInputs().getAs<DictionaryAttr>(slopes.getValue());
      if (!decl) return op.emitOpError() << "alibi names an undeclared input";
      SmallVector<Value> indices;
      for (Attribute dim : decl.getAs<ArrayAttr>("dims")) {
        StringRef name = cast<StringAttr>(dim).getValue();
        indices.push_back(name == "b" ? idx.b : name == "h" ? idx.h : idx.q);
      }
      slope = LoadOp::create(rb.b, rb.loc, rb.b.getF32Type(), slopes, indices);
    } else {
      slope = standardAlibiSlope(rb, idx.h, op.getHeadsQ());
    }
    Value offset = rb.sub(alignedQuery(rb, idx, builtin), idx.k);
    Value distance = rb.toF32(math::AbsIOp::create(rb.b, rb.loc, offset));
    Value bias = rb.fmul(slope, distance);
    result = arith::SubFOp::create(rb.b, rb.loc, score, bias);
  }
  rb.yield(result);
  op.removeScoreBuiltinAttr();
  return success();
}

struct AttnExpandBuiltins final : mlir::attn::impl::AttnExpandBuiltinsBase<AttnExpandBuiltins> {
  void runOnOperation() override {
    auto result = getOperation().walk([](AttentionOp op) {
      if (auto builtin = op.getMaskBuiltinAttr())
        if (failed(expandMask(op, builtin))) return WalkResult::interrupt();
      if (auto builtin = op.getScoreBuiltinAttr())
        if (failed(expandScore(op, builtin))) return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (result.wasInterrupted()) signalPassFailure();
  }
};

}  // namespace
