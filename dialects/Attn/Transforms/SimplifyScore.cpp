// attn-simplify-score: simplifies the score region under what the mask guarantees.
//
// The kernels only use the score of a kept element: a masked one is set to -inf right after the
// score hook (forward), or gets P = 0 (backward), and a tile classified full has every element
// kept. So wherever the mask is a conjunction with a conjunct `X >= Y` (sge, sgt, sle or slt
// between two integer expressions), the score may assume it. This pass uses that to drop
// `abs(X - Y)` to `X - Y` (and `abs(Y - X)` to `X - Y`) where the result only feeds sums,
// differences and products (onlyArithmeticUses): ALiBi's `abs(q' - k)` under a causal, window or
// document mask, one integer instruction less per element of S.
//
// Expressions are matched structurally across the two regions: the same operations with the same
// attributes over corresponding region arguments (the score region has `score` first).
#include "dialects/Attn/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "attn-simplify-score"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNSIMPLIFYSCORE
#include "dialects/Attn/Transforms/Passes.h.inc"
}  // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

// `x >= y` for every kept element.
struct Fact {
  Value x, y;
};

// The conjuncts of the mask's result that order two integers.
void collectFacts(Value v, SmallVectorImpl<Fact>& facts) {
  if (auto both = v.getDefiningOp<arith::AndIOp>()) {
    collectFacts(both.getLhs(), facts);
    collectFacts(both.getRhs(), facts);
    return;
  }
  auto cmp = v.getDefiningOp<arith::CmpIOp>();
  if (!cmp) return;
  using P = arith::CmpIPredicate;
  switch (cmp.getPredicate()) {
  case P::sge:
  case P::sgt:
    facts.push_back({cmp.getLhs(), cmp.getRhs()});
    break;
  case P::sle:
  case P::slt:
    facts.push_back({cmp.getRhs(), cmp.getLhs()});
    break;
  default:
    break;
  }
}

// Whether mask value `m` and score value `s` compute the same thing: the same operation with the
// same attributes over equal operands, or corresponding region arguments (score index = mask
// index + `shift`).
bool same(Value m, Value s, unsigned shift) {
  auto ma = dyn_cast<BlockArgument>(m), sa = dyn_cast<BlockArgument>(s);
  if (ma || sa) return ma && sa && ma.getArgNumber() + shift == sa.getArgNumber();
  Operation *mo = m.getDefiningOp(), *so = s.getDefiningOp();
  if (!mo || !so || mo->getName() != so->getName() || mo->getAttrDictionary() != so->getAttrDictionary() ||
      mo->getNumOperands() != so->getNumOperands() || mo->getNumResults() != 1 ||
      so->getNumResults() != 1 || mo->getNumRegions() != 0 || so->getNumRegions() != 0)
    return false;
  for (auto [a, b] : llvm::zip(mo->getOperands(), so->getOperands()))
    if (!same(a, b, shift)) return false;
  return true;
}

// Whether everything computed from `v` in the score is a sum, difference or product of finite
// values (or their conversion), up to the yield. A masked element's score is discarded, but the
// backward multiplies its derivative by P = 0: where X < Y, X - Y must not turn that derivative
// into inf or NaN (sqrt, log or a division by the distance could), so only such uses qualify.
bool onlyArithmeticUses(Value v) {
  for (Operation* user : v.getUsers()) {
    if (isa<YieldOp>(user)) continue;
    if (!isa<arith::SIToFPOp, arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::NegFOp,
             arith::AddIOp, arith::SubIOp, arith::MulIOp>(user))
      return false;
    if (!onlyArithmeticUses(user->getResult(0))) return false;
  }
  return true;
}

// Rewrites the score's `abs(X - Y)` / `abs(Y - X)` to `X - Y` for the mask's facts; returns how
// many it rewrote.
int simplify(AttentionOp op) {
  if (op.getMask().empty() || op.getScore().empty()) return 0;
  Block& mask = op.getMask().front();
  Block& score = op.getScore().front();
  auto yield = dyn_cast<YieldOp>(mask.getTerminator());
  if (!yield || yield->getNumOperands() != 1) return 0;
  SmallVector<Fact> facts;
  collectFacts(yield->getOperand(0), facts);
  if (facts.empty()) return 0;
  // The score region's arguments are the mask's with `score` first.
  if (score.getNumArguments() != mask.getNumArguments() + 1) return 0;
  const unsigned shift = 1;
  int rewritten = 0;
  SmallVector<math::AbsIOp> absOps;
  score.walk([&](math::AbsIOp abs) { absOps.push_back(abs); });
  for (math::AbsIOp abs : absOps) {
    auto diff = abs.getOperand().getDefiningOp<arith::SubIOp>();
    if (!diff || !onlyArithmeticUses(abs.getResult())) continue;
    for (const Fact& fact : facts) {
      const bool direct = same(fact.x, diff.getLhs(), shift) && same(fact.y, diff.getRhs(), shift);
      const bool swapped = same(fact.y, diff.getLhs(), shift) && same(fact.x, diff.getRhs(), shift);
      if (!direct && !swapped) continue;
      Value replacement = diff.getResult();
      if (swapped) {
        OpBuilder b(abs);
        replacement = arith::SubIOp::create(b, abs.getLoc(), diff.getRhs(), diff.getLhs());
      }
      abs.getResult().replaceAllUsesWith(replacement);
      abs.erase();
      ++rewritten;
      break;
    }
  }
  // Operations left without users (a swapped difference) go too.
  bool erased = true;
  while (erased) {
    erased = false;
    for (Operation& inner : llvm::make_early_inc_range(llvm::reverse(score.getOperations())))
      if (!inner.hasTrait<OpTrait::IsTerminator>() && inner.use_empty() && isPure(&inner)) {
        inner.erase();
        erased = true;
      }
  }
  return rewritten;
}

struct AttnSimplifyScore final : mlir::attn::impl::AttnSimplifyScoreBase<AttnSimplifyScore> {
  void runOnOperation() override {
    getOperation().walk([](AttentionOp op) { simplify(op); });
  }
};

}  // namespace
