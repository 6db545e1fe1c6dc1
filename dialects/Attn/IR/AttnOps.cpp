// Verifiers of the attn ops and helpers for their mask and score regions.
#include "dialects/Attn/IR/AttnOps.h"
#include "attnc/common/philox.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::attn;

#define GET_OP_CLASSES
#include "dialects/Attn/IR/AttnOps.cpp.inc"

namespace {

// The checks both forms of a variant share: shapes, dtype, scale, dropout, declared inputs.
template <class OpT>
LogicalResult verifyVariantAttrs(OpT op) {
  auto checkHeadDim = [&](StringRef name, int64_t dim) -> LogicalResult {
    if (dim < 8 || dim > 256 || dim % 8 != 0)
      return op.emitOpError() << name << " must be a multiple of 8 in [8, 256], got " << dim;
    return success();
  };
  if (failed(checkHeadDim("head_dim", op.getHeadDim())) ||
      failed(checkHeadDim("head_dim_v", op.getHeadDimV())))
    return failure();
  Type elementType = op.getElementType();
  if (!elementType.isBF16() && !elementType.isF16())
    return op.emitOpError() << "element_type must be bf16 or f16, got " << elementType;
  if (op.getHeadsQ() < 1 || op.getHeadsKv() < 1)
    return op.emitOpError() << "heads_q and heads_kv must be at least 1, got " << op.getHeadsQ()
                            << " and " << op.getHeadsKv();
  if (op.getHeadsQ() % op.getHeadsKv() != 0)
    return op.emitOpError() << "heads_kv (" << op.getHeadsKv() << ") must divide heads_q ("
                            << op.getHeadsQ() << ")";
  if (!(op.getScale().convertToDouble() > 0.0))
    return op.emitOpError() << "scale must be positive, got " << op.getScale().convertToDouble();
  double dropout = op.getDropout().convertToDouble();
  if (!(dropout >= 0.0 && dropout < 1.0))
    return op.emitOpError() << "dropout must be in [0, 1), got " << dropout;
  if (op.getDropoutRounds() < attnc::kDropoutRoundsMin ||
      op.getDropoutRounds() > attnc::kDropoutRoundsMax)
    return op.emitOpError() << "dropout_rounds must be in [" << attnc::kDropoutRoundsMin << ", "
                            << attnc::kDropoutRoundsMax << "], got " << op.getDropoutRounds();

  llvm::SmallSet<int64_t, 8> slots;
  for (NamedAttribute input : op.getInputs()) {
    auto decl = dyn_cast<DictionaryAttr>(input.getValue());
    auto dtype = decl ? decl.getAs<TypeAttr>("dtype") : TypeAttr();
    auto dims = decl ? decl.getAs<ArrayAttr>("dims") : ArrayAttr();
    auto slot = decl ? decl.getAs<IntegerAttr>("slot") : IntegerAttr();
    if (!dtype || !dims || !slot)
      return op.emitOpError() << "input '" << input.getName().getValue()
                              << "' must be {dtype = i32|f32, dims = [...], slot = N}";
    Type type = dtype.getValue();
    if (!type.isInteger(32) && !type.isF32())
      return op.emitOpError() << "input '" << input.getName().getValue()
                              << "' must have dtype i32 or f32, got " << type;
    llvm::SmallSet<StringRef, 3> seen;
    for (Attribute dim : dims) {
      auto name = dyn_cast<StringAttr>(dim);
      if (!name || !llvm::is_contained({"b", "h", "pos"}, name.getValue()) ||
          !seen.insert(name.getValue()).second)
        return op.emitOpError() << "input '" << input.getName().getValue()
                                << "' dims must be distinct names among \"b\", \"h\", \"pos\"";
    }
    if (dims.empty())
      return op.emitOpError() << "input '" << input.getName().getValue() << "' has no dims";
    int64_t slotIndex = slot.getInt();
    if (slotIndex < 0 || slotIndex >= 8 || !slots.insert(slotIndex).second)
      return op.emitOpError() << "input '" << input.getName().getValue()
                              << "' needs a distinct slot in [0, 8), got " << slotIndex;
  }
  return success();
}

LogicalResult verifyRegion(Operation* op, Region& region, StringRef name,
                           ArrayRef<Type> argTypes, Type yieldType) {
  if (region.empty()) return success();
  if (!region.hasOneBlock())
    return op->emitOpError() << "'" << name << "' region must have a single block";
  Block& block = region.front();
  if (block.getArgumentTypes() != TypeRange(argTypes))
    return op->emitOpError() << "'" << name << "' region must take " << argTypes.size()
                             << " arguments (" << (argTypes.size() == kScoreNumArgs ? "score: f32, " : "")
                             << "b, h, q, k, q_len, kv_len: i32)";
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValues().size() != 1 || yield.getValues()[0].getType() != yieldType)
    return op->emitOpError() << "'" << name << "' region must end in attn.yield of one "
                             << yieldType;
  return success();
}

SmallVector<Type> regionArgTypes(MLIRContext* ctx, bool withScore) {
  SmallVector<Type> types;
  if (withScore) types.push_back(Float32Type::get(ctx));
  types.append(kMaskNumArgs, IntegerType::get(ctx, 32));
  return types;
}

template <class OpT>
LogicalResult verifyVariantRegions(OpT op) {
  MLIRContext* ctx = op.getContext();
  if (failed(verifyRegion(op, op.getMask(), "mask", regionArgTypes(ctx, false),
                          IntegerType::get(ctx, 1))))
    return failure();
  return verifyRegion(op, op.getScore(), "score", regionArgTypes(ctx, true),
                      Float32Type::get(ctx));
}

}  // namespace

Block& mlir::attn::createMaskBlock(Region& region, Location loc) {
  Block* block = new Block();
  region.push_back(block);
  for (Type type : regionArgTypes(loc.getContext(), false)) block->addArgument(type, loc);
  return *block;
}

Block& mlir::attn::createScoreBlock(Region& region, Location loc) {
  Block* block = new Block();
  region.push_back(block);
  for (Type type : regionArgTypes(loc.getContext(), true)) block->addArgument(type, loc);
  return *block;
}

Value mlir::attn::yieldedValue(Region& region) {
  if (region.empty()) return {};
  auto yield = dyn_cast<YieldOp>(region.front().getTerminator());
  return yield && yield.getValues().size() == 1 ? yield.getValues()[0] : Value();
}

bool mlir::attn::readsInputs(Region& region) {
  bool found = false;
  region.walk([&](LoadOp) { found = true; });
  return found;
}

//===- attn.attention ---------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  if (failed(verifyVariantAttrs(*this))) return failure();
  if (auto builtin = getMaskBuiltinAttr()) {
    if (!getMask().empty())
      return emitOpError() << "has both mask_builtin and a mask region";
    auto kind = builtin.getAs<StringAttr>("kind");
    if (!kind || !llvm::is_contained({"causal", "window", "prefix", "document"}, kind.getValue()))
      return emitOpError() << "mask_builtin kind must be causal, window, prefix or document";
  }
  if (auto builtin = getScoreBuiltinAttr()) {
    if (!getScore().empty())
      return emitOpError() << "has both score_builtin and a score region";
    auto kind = builtin.getAs<StringAttr>("kind");
    if (!kind || !llvm::is_contained({"softcap", "alibi"}, kind.getValue()))
      return emitOpError() << "score_builtin kind must be softcap or alibi";
  }
  return success();
}

LogicalResult AttentionOp::verifyRegions() { return verifyVariantRegions(*this); }

//===- attn.tiled_forward -----------------------------------------------------------------===//

LogicalResult TiledForwardOp::verify() {
  if (failed(verifyVariantAttrs(*this))) return failure();
  if (getBlockQ() <= 0 || getBlockKv() <= 0 || getWarps() <= 0 || getStages() <= 0)
    return emitOpError() << "tile sizes, warps and stages must be positive";
  if (getKernel() == "sm80") {
    if (getBlockQ() % (16 * getWarps()) != 0)
      return emitOpError() << "block_q (" << getBlockQ() << ") must be a multiple of 16 x warps ("
                           << getWarps() << ")";
  } else if (getKernel() == "sm90") {
    if (getWarps() % 4 != 0 || getWarps() < 8 || getBlockQ() != 64 * (getWarps() / 4 - 1))
      return emitOpError() << "an sm90 kernel has block_q = 64 x (warps / 4 - 1), got block_q "
                           << getBlockQ() << " with " << getWarps() << " warps";
    if (getBlockKv() % 16 != 0 || getBlockKv() > 256)
      return emitOpError() << "an sm90 kernel needs block_kv a multiple of 16 up to 256, got "
                           << getBlockKv();
  } else {
    return emitOpError() << "kernel must be sm80 or sm90, got '" << getKernel() << "'";
  }
  if (!llvm::is_contained({"none", "static", "runtime"}, getClassification()))
    return emitOpError() << "classification must be none, static or runtime";
  if (!llvm::is_contained({"all", "interval-search"}, getKvBounds()))
    return emitOpError() << "kv_bounds must be all or interval-search";
  return success();
}

LogicalResult TiledForwardOp::verifyRegions() { return verifyVariantRegions(*this); }

//===- attn.tiled_backward ----------------------------------------------------------------===//

LogicalResult TiledBackwardOp::verify() {
  if (failed(verifyVariantAttrs(*this))) return failure();
  if (!llvm::is_contained({"none", "static", "runtime"}, getClassification()))
    return emitOpError() << "classification must be none, static or runtime";
  return success();
}

LogicalResult TiledBackwardOp::verifyRegions() {
  if (failed(verifyVariantRegions(*this))) return failure();
  if (getScoreGrad().empty()) return emitOpError() << "needs a 'score_grad' region";
  return verifyRegion(*this, getScoreGrad(), "score_grad", regionArgTypes(getContext(), true),
                      Float32Type::get(getContext()));
}

//===- attn.load ----------------------------------------------------------------------------===//

LogicalResult LoadOp::verify() {
  Operation* variant = (*this)->getParentOp();
  DictionaryAttr inputs;
  if (auto attention = dyn_cast_or_null<AttentionOp>(variant)) inputs = attention.getInputs();
  if (auto tiled = dyn_cast_or_null<TiledForwardOp>(variant)) inputs = tiled.getInputs();
  if (auto backward = dyn_cast_or_null<TiledBackwardOp>(variant)) inputs = backward.getInputs();
  if (!inputs) return emitOpError() << "must be inside an attn.attention, attn.tiled_forward or attn.tiled_backward";
  auto decl = inputs.getAs<DictionaryAttr>(getInput());
  if (!decl) return emitOpError() << "reads undeclared input '" << getInput() << "'";
  auto dims = decl.getAs<ArrayAttr>("dims");
  auto dtype = decl.getAs<TypeAttr>("dtype");
  if (!dims || !dtype) return failure();  // the parent's verifier reports the malformed decl
  if (dims.size() != getIndices().size())
    return emitOpError() << "input '" << getInput() << "' has " << dims.size()
                         << " dims but is indexed with " << getIndices().size();
  if (dtype.getValue() != getResult().getType())
    return emitOpError() << "input '" << getInput() << "' has dtype " << dtype.getValue()
                         << " but the load yields " << getResult().getType();
  return success();
}
