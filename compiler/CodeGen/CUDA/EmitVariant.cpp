// Writes a unit's `struct Variant`: the constants that choose the kernels' code paths and the
// hooks. A hook past kOutlinedHookOps operations is a function of its own, called per element.
#include "compiler/CodeGen/CUDA/EmitVariant.h"

#include "compiler/CodeGen/CUDA/MaskSplit.h"
#include "compiler/CodeGen/CUDA/RegionEmitter.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <map>

using namespace mlir;

namespace attnc {
namespace {

// Operations of a mask or score hook past which it is outlined (a __noinline__ function called per
// element): from about 100 operations on, outlining halves the compile, and large hooks inlined
// spill (docs/design/cuda-emitter.md). Every example's hooks are far below it and stay inlined.
constexpr int64_t kOutlinedHookOps = 64;

// A hook of more than kOutlinedHookOps operations becomes a function of its own (the _OUTLINED
// macros of attnc/common/platform.h): inlined, NVVM and ptxas get one copy per element a thread
// holds and take time superlinear in the kernel's size.
const char* hookDecl(Region& region, const char* inlined, const char* outlined) {
  const bool outline =
      !region.empty() && int64_t(region.front().getOperations().size()) > kOutlinedHookOps;
  return outline ? outlined : inlined;
}

// Whether a hook region (arguments score, b, h, q, k, q_len, kv_len) stays finite on the padding
// rows and keys, a tile past the sequences' ends, wherever it is finite inside them: the positions
// reach only sums, differences, products, conversions, comparisons, selections, min, max, abs, the
// dividend of a division and the indices of loads (which clamp them; a loaded value is an
// in-range one). Then the sm_90a backward may hand the hook its positions unclamped.
bool finitePastTheEnds(Region& region) {
  static const llvm::StringSet<> kThrough = {
      "arith.addi",   "arith.addf",    "arith.subi",  "arith.subf",  "arith.muli",
      "arith.mulf",   "arith.negf",    "arith.minsi", "arith.maxsi", "arith.minnumf",
      "arith.maxnumf", "math.absi",    "math.absf",   "arith.sitofp", "arith.select",
      "arith.cmpi",   "arith.cmpf",    "arith.andi",  "arith.ori",   "arith.xori"};
  if (region.empty() || region.getNumArguments() < 5) return true;
  llvm::DenseSet<Value> positional = {region.getArgument(3), region.getArgument(4)};
  bool finite = true;
  region.walk([&](Operation* op) {
    auto reaches = [&](Value v) { return positional.contains(v); };
    if (!llvm::any_of(op->getOperands(), reaches)) return;
    StringRef name = op->getName().getStringRef();
    if (isa<attn::LoadOp, attn::YieldOp>(op)) return;  // clamped indices; the result
    const bool dividendOnly = (name == "arith.divf" || name == "arith.divsi" ||
                               name == "arith.remsi" || name == "arith.remf") &&
                              !reaches(op->getOperand(1));
    if (!kThrough.contains(name) && !dividendOnly) finite = false;
    for (Value result : op->getResults()) positional.insert(result);
  });
  return finite;
}

// The Variant's constants, from `struct Variant {` on.
VariantChoices emitConstants(llvm::raw_ostream& os, attn::TiledForwardOp op,
                             attn::TiledBackwardOp backward, bool hopper, bool hopperBackward,
                             bool tileClasses) {
  VariantChoices choices;
  os << "struct Variant {\n";
  os << "  static constexpr bool kHasMask = " << (op.getMask().empty() ? "false" : "true")
     << ";\n";
  os << "  static constexpr bool kHasScore = " << (op.getScore().empty() ? "false" : "true")
     << ";\n";
  os << "  static constexpr bool kHasDropout = "
     << (op.getDropout().convertToDouble() > 0 ? "true" : "false") << ";\n";
  os << "  static constexpr int kDropoutRounds = " << op.getDropoutRounds() << ";\n";
  // A mask that reads declared inputs: the launch classifies every tile pair first
  // (<name>_tile_classes), and the forward's walk reads those classes (kv_tiles.h).
  os << "  static constexpr bool kTileClasses = " << (tileClasses ? "true" : "false")
     << ";\n";
  // With tile classes, a mask whose region leaves its head argument (b, h, q, k, ...) unused
  // classifies alike for every head: the launch then makes one head's (kv_tiles.h tileClassHeads).
  choices.maskIgnoresHead = tileClasses && op.getMask().front().getArgument(1).use_empty();
  os << "  static constexpr bool kMaskIgnoresHead = "
     << (choices.maskIgnoresHead ? "true" : "false") << ";\n";
  // The sm_90a forward of a masked spec orders its blocks longest first across groups of heads
  // (block_order.h); the launch reads the same choice from KernelSource::orderedGrid.
  choices.orderedGrid = hopper && !op.getMask().empty();
  os << "  static constexpr bool kOrderedGrid = " << (choices.orderedGrid ? "true" : "false")
     << ";\n";
  // Likewise the sm_90a dK/dV kernel of a masked spec: orderedGrid over its kv tiles and (kv head,
  // batch) pairs, rank in blockIdx.y (BackwardSource::kvOrderedGrid).
  choices.kvOrderedGrid = hopperBackward && !op.getMask().empty();
  os << "  static constexpr bool kKvOrderedGrid = " << (choices.kvOrderedGrid ? "true" : "false")
     << ";\n";
  // The sm_90a dK/dV kernel hands the score hook and its derivative unclamped expr::Pos positions
  // where both stay finite past the sequences' ends (a padding element's derivative is multiplied
  // by P = 0, and its P by dO = 0, so either being NaN would poison dK and dV).
  const bool backwardPositions = hopperBackward && !op.getScore().empty() &&
                                 finitePastTheEnds(op.getScore()) &&
                                 finitePastTheEnds(backward.getScoreGrad());
  os << "  static constexpr bool kBackwardPositions = " << (backwardPositions ? "true" : "false")
     << ";\n\n";
  return choices;
}

// The hooks, to the end of the struct.
LogicalResult emitHooks(llvm::raw_ostream& os, attn::TiledForwardOp op,
                        attn::TiledBackwardOp backward) {
  RegionEmitter emitter(os, op.getInputs());
  os << "  // Keep element (q, k)? With I = IntI: is it kept over a whole tile (True / False / "
        "Unknown)?\n  // P is the launch's parameters (forward or backward).\n";
  os << "  template <class P, class I>\n  "
     << hookDecl(op.getMask(), "ATTNC_HD", "ATTNC_HD_OUTLINED")
     << " static auto mask(const P& p, I b, I h, I q, I k) {\n";
  if (op.getMask().empty()) {
    os << "    return ex::mask_result(true, q);\n";
  } else if (failed(emitter.emit(op.getMask(), {"b", "h", "q", "k", "p.q_len", "p.kv_len"},
                                 /*isMask=*/true))) {
    return failure();
  }
  os << "  }\n\n";
  if (!op.getMask().empty()) {
    std::string split;
    llvm::raw_string_ostream splitOs(split);
    const bool splits = succeeded(emitMaskSplit(splitOs, op.getMask(), op.getInputs()));
    os << "  static constexpr bool kMaskSplit = " << (splits ? "true" : "false") << ";\n";
    if (splits) os << split;
    os << "\n";
  }
  os << "  // The score after `scale * q.k`. Q: int, or expr::Pos; S: float, or expr::Scaled "
        "(common/epilogue.h).\n";
  os << "  template <class P, class Q = int, class S = float>\n  "
     << hookDecl(op.getScore(), "ATTNC_DEVICE", "ATTNC_DEVICE_OUTLINED")
     << " static float score(const P& p, S score, int b, int h, Q q, Q k) {\n";
  if (op.getScore().empty()) {
    os << "    return score;\n";
  } else if (failed(emitter.emit(op.getScore(),
                                 {"score", "b", "h", "q", "k", "p.q_len", "p.kv_len"},
                                 /*isMask=*/false))) {
    return failure();
  }
  os << "  }\n";
  if (backward) {
    os << "\n  // d score(s) / d s, derived by attn-derive-backward.\n";
    os << "  template <class P, class Q = int, class S = float>\n  "
       << hookDecl(backward.getScoreGrad(), "ATTNC_DEVICE", "ATTNC_DEVICE_OUTLINED")
       << " static float score_grad(const P& p, S score, int b, int h, Q q, Q k) {\n";
    RegionEmitter gradEmitter(os, backward.getInputs());
    if (failed(gradEmitter.emit(backward.getScoreGrad(),
                                {"score", "b", "h", "q", "k", "p.q_len", "p.kv_len"},
                                /*isMask=*/false)))
      return failure();
    os << "  }\n";
  }
  os << "};\n\n";
  return success();
}

}  // namespace

std::vector<std::pair<int, bool>> summarizedInputs(attn::TiledForwardOp op) {
  std::map<int, bool> slots;  // slot -> is f32
  DictionaryAttr inputs = op.getInputs();
  op.getMask().walk([&](attn::LoadOp load) {
    auto decl = inputs.getAs<DictionaryAttr>(load.getInput());
    for (Attribute dim : decl.getAs<ArrayAttr>("dims"))
      if (cast<StringAttr>(dim).getValue() == "pos")
        slots[int(decl.getAs<IntegerAttr>("slot").getInt())] = load.getType().isF32();
  });
  return {slots.begin(), slots.end()};
}

FailureOr<VariantChoices> emitVariant(llvm::raw_ostream& os, attn::TiledForwardOp op,
                                      attn::TiledBackwardOp backward, bool hopper,
                                      bool hopperBackward, bool tileClasses) {
  const VariantChoices choices =
      emitConstants(os, op, backward, hopper, hopperBackward, tileClasses);
  if (failed(emitHooks(os, op, backward))) return failure();
  return choices;
}

}  // namespace attnc
