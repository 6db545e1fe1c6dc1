// Spec -> attn.attention. Expression ASTs (already typed, promotions explicit) map one node to one
// arith/math/attn op; source locations travel along as FileLineColLoc.
#include "compiler/Spec/BuildIR.h"

#include "compiler/Spec/Expr.h"
#include "dialects/Attn/IR/AttnOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace attnc {
namespace {

Location locationOf(MLIRContext& context, const SourceLoc& loc) {
  if (loc.file.empty() || loc.line == 0) return UnknownLoc::get(&context);
  return FileLineColLoc::get(&context, loc.file, loc.line, loc.col);
}

// Emits the ops of one typed expression into a region block whose arguments are the indices
// (and, for scores, the score first).
class ExprLowering {
public:
  ExprLowering(OpBuilder& builder, Block& block, bool isScore)
      : b(builder), block(block), firstIndex(isScore ? 1 : 0) {}

  Value lower(const expr::Node& node) {
    Location loc = locationOf(*b.getContext(), node.loc);
    switch (node.kind) {
    case expr::Kind::IntLit: return arith::ConstantIntOp::create(b, loc, node.intValue, 32);
    case expr::Kind::FloatLit:
      return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                            APFloat(float(node.floatValue)));
    case expr::Kind::BoolLit:
      return arith::ConstantIntOp::create(b, loc, node.boolValue ? 1 : 0, 1);
    case expr::Kind::Var: return variable(node.name);
    case expr::Kind::ToFloat:
      return arith::SIToFPOp::create(b, loc, b.getF32Type(), lower(*node.children[0]));
    case expr::Kind::InputIndex: {
      SmallVector<Value> indices;
      for (const ExprPtr& index : node.children) indices.push_back(lower(*index));
      Type type = node.type == ScalarType::F32 ? Type(b.getF32Type()) : Type(b.getI32Type());
      return attn::LoadOp::create(b, loc, type, node.name, indices);
    }
    case expr::Kind::Unary: return unary(node, loc);
    case expr::Kind::Binary: return binary(node, loc);
    case expr::Kind::Call: return call(node, loc);
    }
    llvm_unreachable("unknown expression kind");
  }

private:
  Value variable(StringRef name) {
    static const char* const kIndexNames[] = {"b", "h", "q", "k", "q_len", "kv_len"};
    if (name == "score") return block.getArgument(0);
    for (unsigned i = 0; i < attn::kMaskNumArgs; ++i)
      if (name == kIndexNames[i]) return block.getArgument(firstIndex + i);
    llvm_unreachable("the type checker admits only known variables");
  }

  Value unary(const expr::Node& node, Location loc) {
    Value x = lower(*node.children[0]);
    if (node.op == expr::Op::Not) {
      Value one = arith::ConstantIntOp::create(b, loc, 1, 1);
      return arith::XOrIOp::create(b, loc, x, one);
    }
    if (node.type == ScalarType::F32) return arith::NegFOp::create(b, loc, x);
    Value zero = arith::ConstantIntOp::create(b, loc, 0, 32);
    return arith::SubIOp::create(b, loc, zero, x);
  }

  Value binary(const expr::Node& node, Location loc) {
    Value x = lower(*node.children[0]);
    Value y = lower(*node.children[1]);
    ScalarType operand = node.children[0]->type;
    using expr::Op;
    if (operand == ScalarType::I1) {
      // Booleans: && || and equality, which has no interval form as a comparison of i1 values,
      // is written as xor.
      switch (node.op) {
      case Op::And: return arith::AndIOp::create(b, loc, x, y);
      case Op::Or: return arith::OrIOp::create(b, loc, x, y);
      case Op::Ne: return arith::XOrIOp::create(b, loc, x, y);
      case Op::Eq: {
        Value differ = arith::XOrIOp::create(b, loc, x, y);
        Value one = arith::ConstantIntOp::create(b, loc, 1, 1);
        return arith::XOrIOp::create(b, loc, differ, one);
      }
      default: llvm_unreachable("the type checker admits only logic ops on booleans");
      }
    }
    if (operand == ScalarType::F32) {
      using P = arith::CmpFPredicate;
      switch (node.op) {
      case Op::Add: return arith::AddFOp::create(b, loc, x, y);
      case Op::Sub: return arith::SubFOp::create(b, loc, x, y);
      case Op::Mul: return arith::MulFOp::create(b, loc, x, y);
      case Op::Div: return arith::DivFOp::create(b, loc, x, y);
      case Op::Rem: return arith::RemFOp::create(b, loc, x, y);
      case Op::Lt: return arith::CmpFOp::create(b, loc, P::OLT, x, y);
      case Op::Le: return arith::CmpFOp::create(b, loc, P::OLE, x, y);
      case Op::Gt: return arith::CmpFOp::create(b, loc, P::OGT, x, y);
      case Op::Ge: return arith::CmpFOp::create(b, loc, P::OGE, x, y);
      case Op::Eq: return arith::CmpFOp::create(b, loc, P::OEQ, x, y);
      case Op::Ne: return arith::CmpFOp::create(b, loc, P::UNE, x, y);  // C's != on floats
      default: llvm_unreachable("no such float op");
      }
    }
    using P = arith::CmpIPredicate;
    switch (node.op) {
    case Op::Add: return arith::AddIOp::create(b, loc, x, y);
    case Op::Sub: return arith::SubIOp::create(b, loc, x, y);
    case Op::Mul: return arith::MulIOp::create(b, loc, x, y);
    case Op::Div: return arith::DivSIOp::create(b, loc, x, y);
    case Op::Rem: return arith::RemSIOp::create(b, loc, x, y);
    case Op::Lt: return arith::CmpIOp::create(b, loc, P::slt, x, y);
    case Op::Le: return arith::CmpIOp::create(b, loc, P::sle, x, y);
    case Op::Gt: return arith::CmpIOp::create(b, loc, P::sgt, x, y);
    case Op::Ge: return arith::CmpIOp::create(b, loc, P::sge, x, y);
    case Op::Eq: return arith::CmpIOp::create(b, loc, P::eq, x, y);
    case Op::Ne: return arith::CmpIOp::create(b, loc, P::ne, x, y);
    default: llvm_unreachable("no such integer op");
    }
  }

  Value call(const expr::Node& node, Location loc) {
    SmallVector<Value> args;
    for (const ExprPtr& arg : node.children) args.push_back(lower(*arg));
    bool isFloat = node.type == ScalarType::F32;
    using expr::Func;
    switch (node.func) {
    case Func::Where: return arith::SelectOp::create(b, loc, args[0], args[1], args[2]);
    case Func::Tanh: return math::TanhOp::create(b, loc, args[0]);
    case Func::Exp: return math::ExpOp::create(b, loc, args[0]);
    case Func::Exp2: return math::Exp2Op::create(b, loc, args[0]);
    case Func::Log: return math::LogOp::create(b, loc, args[0]);
    case Func::Sqrt: return math::SqrtOp::create(b, loc, args[0]);
    case Func::Abs:
      return isFloat ? Value(math::AbsFOp::create(b, loc, args[0]))
                     : Value(math::AbsIOp::create(b, loc, args[0]));
    case Func::Min:
      return isFloat ? Value(arith::MinNumFOp::create(b, loc, args[0], args[1]))
                     : Value(arith::MinSIOp::create(b, loc, args[0], args[1]));
    case Func::Max:
      return isFloat ? Value(arith::MaxNumFOp::create(b, loc, args[0], args[1]))
                     : Value(arith::MaxSIOp::create(b, loc, args[0], args[1]));
    }
    llvm_unreachable("unknown function");
  }

  OpBuilder& b;
  Block& block;
  unsigned firstIndex;
};

DictionaryAttr inputDecls(Builder& b, const Spec& spec) {
  SmallVector<NamedAttribute> inputs;
  for (auto [slot, input] : llvm::enumerate(spec.inputs)) {
    SmallVector<Attribute> dims;
    for (InputDim dim : input.dims) dims.push_back(b.getStringAttr(toString(dim)));
    Type type = input.type == ScalarType::F32 ? Type(b.getF32Type()) : Type(b.getI32Type());
    inputs.push_back(b.getNamedAttr(
        input.name, b.getDictionaryAttr({b.getNamedAttr("dims", b.getArrayAttr(dims)),
                                         b.getNamedAttr("dtype", TypeAttr::get(type)),
                                         b.getNamedAttr("slot", b.getI64IntegerAttr(slot))})));
  }
  return b.getDictionaryAttr(inputs);
}

std::optional<DictionaryAttr> maskBuiltin(Builder& b, const MaskSpec& mask) {
  auto dict = [&](std::initializer_list<NamedAttribute> attrs) {
    return b.getDictionaryAttr(SmallVector<NamedAttribute>(attrs));
  };
  auto kind = [&](StringRef name) { return b.getNamedAttr("kind", b.getStringAttr(name)); };
  auto topLeft = b.getNamedAttr("top_left", b.getBoolAttr(mask.topLeft));
  switch (mask.kind) {
  case MaskSpec::Causal: return dict({kind("causal"), topLeft});
  case MaskSpec::Window:
    return dict(
        {kind("window"), b.getNamedAttr("size", b.getI64IntegerAttr(mask.window)), topLeft});
  case MaskSpec::Prefix:
    return dict(
        {kind("prefix"), b.getNamedAttr("length", b.getI64IntegerAttr(mask.prefix)), topLeft});
  case MaskSpec::Document:
    return dict({kind("document"), b.getNamedAttr("input", b.getStringAttr(mask.documentInput)),
                 b.getNamedAttr("causal", b.getBoolAttr(mask.documentCausal)), topLeft});
  case MaskSpec::None:
  case MaskSpec::Expr: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<DictionaryAttr> scoreBuiltin(Builder& b, const ScoreSpec& score) {
  SmallVector<NamedAttribute> attrs;
  switch (score.kind) {
  case ScoreSpec::Softcap:
    attrs = {b.getNamedAttr("kind", b.getStringAttr("softcap")),
             b.getNamedAttr("cap", b.getF64FloatAttr(score.softcap))};
    break;
  case ScoreSpec::Alibi:
    attrs = {b.getNamedAttr("kind", b.getStringAttr("alibi"))};
    if (!score.alibiSlopes.empty())
      attrs.push_back(b.getNamedAttr("slopes", b.getStringAttr(score.alibiSlopes)));
    break;
  case ScoreSpec::None:
  case ScoreSpec::Expr: return std::nullopt;
  }
  return b.getDictionaryAttr(attrs);
}

}  // namespace

OwningOpRef<ModuleOp> buildAttentionIR(const Spec& spec, MLIRContext& context) {
  context.loadDialect<attn::AttnDialect, arith::ArithDialect, math::MathDialect>();
  Location loc = locationOf(context, spec.loc);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b = OpBuilder::atBlockEnd(module->getBody());

  OperationState state(loc, attn::AttentionOp::getOperationName());
  Type element = spec.dtype == DType::FP16 ? Type(b.getF16Type()) : Type(b.getBF16Type());
  state.addAttribute("sym_name", b.getStringAttr(spec.name));
  state.addAttribute("head_dim", b.getI64IntegerAttr(spec.headDim));
  state.addAttribute("head_dim_v", b.getI64IntegerAttr(spec.headDimV));
  state.addAttribute("element_type", TypeAttr::get(element));
  state.addAttribute("heads_q", b.getI64IntegerAttr(spec.headsQ));
  state.addAttribute("heads_kv", b.getI64IntegerAttr(spec.headsKV));
  state.addAttribute("scale", b.getF64FloatAttr(spec.effectiveScale()));
  state.addAttribute("dropout", b.getF64FloatAttr(spec.dropout));
  state.addAttribute("dropout_rounds", b.getI64IntegerAttr(spec.dropoutRounds));
  state.addAttribute("inputs", inputDecls(b, spec));
  if (auto builtin = maskBuiltin(b, spec.mask)) state.addAttribute("mask_builtin", *builtin);
  if (auto builtin = scoreBuiltin(b, spec.score)) state.addAttribute("score_builtin", *builtin);
  state.addRegion();
  state.addRegion();
  // Regions are filled once the op exists: builders take their context from the parent op.
  auto attention = cast<attn::AttentionOp>(b.create(state));
  Region* maskRegion = &attention.getMask();
  Region* scoreRegion = &attention.getScore();

  if (spec.mask.kind == MaskSpec::Expr && spec.mask.expr) {
    Block& block = attn::createMaskBlock(*maskRegion, locationOf(context, spec.mask.loc));
    OpBuilder body = OpBuilder::atBlockEnd(&block);
    Value keep = ExprLowering(body, block, /*isScore=*/false).lower(*spec.mask.expr);
    attn::YieldOp::create(body, keep.getLoc(), ValueRange{keep});
  }
  if (spec.score.kind == ScoreSpec::Expr && spec.score.expr) {
    Block& block = attn::createScoreBlock(*scoreRegion, locationOf(context, spec.score.loc));
    OpBuilder body = OpBuilder::atBlockEnd(&block);
    Value score = ExprLowering(body, block, /*isScore=*/true).lower(*spec.score.expr);
    attn::YieldOp::create(body, score.getLoc(), ValueRange{score});
  }
  return module;
}

}  // namespace attnc
