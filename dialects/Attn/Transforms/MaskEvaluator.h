// Evaluates a mask region on the host, per element or over index intervals, with the same
// operations (templates/attnc/common/expr.h) the generated device code uses. attn-classify-blocks,
// `attnc explain` and the soundness tests use it; the kernel runs the emitted twin of it.
#pragma once

#include "attnc/common/expr.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Region.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace mlir::attn {

enum class BlockClass { Empty, Full, Partial };

// Declared inputs as the kernel sees them: by slot, with the batch and head counts that bound
// their clamped indices (positions are bounded by max(q_len, kv_len), as on the device).
struct MaskInputs {
  llvm::ArrayRef<attnc::InputRef> refs;
  int batch = 1, heads = 1;
};

class MaskEvaluator {
public:
  // Flattens `mask` (the mask region of an attn op with declared `inputs`; a score region works
  // too, for score()). Fails, naming the op in `error`, when an op has no interval form. An empty
  // mask keeps every element; an empty score region is the identity.
  static FailureOr<MaskEvaluator> create(Region& mask, DictionaryAttr inputs, std::string& error);

  // The mask of one element.
  bool keep(int b, int h, int q, int k, int qLen, int kvLen, const MaskInputs& inputs = {}) const;
  // What the mask is over every element of the given index ranges (inclusive).
  attnc::expr::Tri keep(attnc::expr::IntI b, attnc::expr::IntI h, attnc::expr::IntI q,
                        attnc::expr::IntI k, int qLen, int kvLen, const MaskInputs& inputs = {}) const;

  // A score region's value for the scaled score `score`, in float64 (for tests of gradients).
  double score(double score, int b, int h, int q, int k, int qLen, int kvLen,
               const MaskInputs& inputs = {}) const;

  // The class of the tile [qLo, qHi] x [kLo, kHi] (already clipped to the lengths).
  BlockClass classify(int b, int h, int qLo, int qHi, int kLo, int kHi, int qLen, int kvLen,
                      const MaskInputs& inputs = {}) const;

  bool empty() const { return steps.empty(); }
  bool readsInputs() const;
  // Whether the mask reads the declared input in `slot` (its refs entry must then point at data).
  bool readsInput(int slot) const;

  // One operation of the flattened region.
  struct Step {
    enum Kind {
      Arg, ConstI, ConstF, ConstB,
      AddI, SubI, MulI, DivI, RemI, MinI, MaxI, AbsI,
      AddF, SubF, MulF, DivF, RemF, NegF, MinF, MaxF, AbsF, Tanh, Exp, Exp2, Log, Sqrt, ToF32,
      CmpI, CmpF, And, Or, Xor, SelectI, SelectF, SelectB, LoadI32, LoadF32
    };
    enum Pred { Lt, Le, Gt, Ge, Eq, Ne, Uno };
    Kind kind;
    unsigned a = 0, b = 0, c = 0;      // operand steps
    int64_t intValue = 0;              // constant, argument index or input slot
    double floatValue = 0;
    Pred pred = Eq;
    int dimOperand[3] = {-1, -1, -1};  // load: the steps indexing b, h, pos (-1: absent)
  };

private:
  template <class Int, class Flt, class Bool>
  struct Slot {
    Int i = Int(0);
    Flt f = Flt(0.0f);
    Bool t = Bool();
  };
  template <class Int, class Flt, class Bool>
  Slot<Int, Flt, Bool> run(Flt score, Int b, Int h, Int q, Int k, int qLen, int kvLen,
                            const MaskInputs& inputs) const;

  std::vector<Step> steps;
  unsigned result = 0;
  bool scoreRegion = false;  // the first argument is the f32 score (a score region)
};

struct TileCounts {
  int64_t empty = 0, full = 0, partial = 0;
};

// Counts the classes of every (q-tile, kv-tile) pair of one (b, h) for the given lengths.
TileCounts countTiles(const MaskEvaluator& mask, int blockQ, int blockKV, int qLen, int kvLen,
                      const MaskInputs& inputs = {}, int b = 0, int h = 0);

}  // namespace mlir::attn
