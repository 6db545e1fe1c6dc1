// Writes the tiled form as CUDA C++. Each region op becomes one call of the overloaded operations
// in templates/attnc/common/expr.h; the mask is emitted once as a template over the index type,
// so the same text is the per-element mask (int) and the tile classifier (IntI intervals).
#include "compiler/CodeGen/CUDA/EmitCUDA.h"

#include "attnc/sm90/bwd_config.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

using namespace mlir;

namespace attnc {
namespace {

// Operations of a mask or score hook past which it is outlined (a __noinline__ function called per
// element): at 750 operations (a mask of 250 `(q - k) != c` terms, sm_80) inlined copies took nvcc
// 24 s and spilled 1.2 KB, outlined 3.8 s without spills; from about 100 operations on, outlining
// halved the compile. Every example's hooks are far below it and stay inlined.
constexpr int64_t kOutlinedHookOps = 64;

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

// Emits the body of a region: one `auto vN = ex::fn(...);` per op, then `return ...`.
class RegionEmitter {
public:
  RegionEmitter(llvm::raw_ostream& os, DictionaryAttr inputs) : os(os), inputs(inputs) {}

  // `argNames` name the block arguments in order.
  LogicalResult emit(Region& region, ArrayRef<std::string> argNames, bool isMask) {
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

  // Emits `ops` (of one region, in order) as `auto <name> = ...;`, with `valueNames` naming both
  // their results and the values they read (block arguments, or values another function
  // computed).
  LogicalResult emitOps(ArrayRef<Operation*> ops, const llvm::DenseMap<Value, std::string>& valueNames,
                        bool isMask) {
    names = valueNames;
    for (Operation* op : ops) {
      os << "    auto " << name(op->getResult(0)) << " = ";
      if (failed(emitExpression(*op, isMask))) return failure();
      os << ";\n";
    }
    return success();
  }

private:
  std::string name(Value value) { return names.lookup(value); }

  LogicalResult emitExpression(Operation& op, bool isMask) {
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

  llvm::raw_ostream& os;
  DictionaryAttr inputs;
  llvm::DenseMap<Value, std::string> names;
  unsigned counter = 0;
};

// The slots of the declared inputs that the mask region loads along positions, with their
// element types: the ones whose interval loads a block summary speeds up (ascending, unique).
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

// The C++ type of a mask value a split function hands on, or "" for one it cannot.
std::string cppType(Type type) {
  if (type.isInteger(1)) return "bool";
  if (type.isInteger(32) || type.isIndex()) return "int";
  if (type.isF32()) return "float";
  return "";
}

// The join of a split mask (emitMaskSplit) as per-row key ranges, where it has that form: a
// conjunction (arith.andi) of at most one equality of a row value and a key value, comparisons of
// the key k itself with values of the row (its position, lengths, constants), and booleans of the
// row alone. Then for each row the kept keys are those of [lo, hi] whose key value equals the
// row's, and a kernel can decide a whole tile of keys a row with bit operations instead of a join
// per element (sm80/epilogue.h keepBitsRanges). Emits kJoinRanges = true, join_eq_row/join_eq_col
// (kJoinEq) and join_k_lo/join_k_hi (64-bit, so that k > INT_MAX - 0 and the like cannot
// overflow); nothing where the join has another form (the kernels then join per element).
template <class Closure>
void emitJoinRanges(llvm::raw_ostream& out, Value result, Value key,
                    const llvm::DenseMap<Value, Operation*>& producer,
                    const llvm::DenseMap<Value, unsigned>& deps,
                    const llvm::DenseSet<Operation*>& joinOps, const llvm::SetVector<Value>& rowOut,
                    const llvm::SetVector<Value>& colOut, const llvm::DenseSet<Value>& given,
                    const llvm::DenseMap<Value, std::string>& names, Closure&& closure,
                    DictionaryAttr inputs) {
  enum : unsigned { Col = 2 };
  SmallVector<Value> terms;
  std::function<void(Value)> flatten = [&](Value v) {
    Operation* op = producer.lookup(v);
    if (op && isa<arith::AndIOp>(op) && joinOps.contains(op)) {
      flatten(op->getOperand(0));
      flatten(op->getOperand(1));
    } else {
      terms.push_back(v);
    }
  };
  flatten(result);
  Value eqRow, eqCol;
  struct Bound {
    Value value;
    bool lower;  // k >= value + offset, else k <= value + offset
    int offset;
  };
  SmallVector<Bound> bounds;
  SmallVector<Value> enables;  // booleans of the row alone
  for (Value term : terms) {
    if (!(deps.lookup(term) & Col)) {  // a boolean of the row (or of nothing): enables the row
      if (!term.getType().isInteger(1)) return;
      enables.push_back(term);
      continue;
    }
    auto cmp = dyn_cast_or_null<arith::CmpIOp>(producer.lookup(term));
    if (!cmp || !joinOps.contains(cmp)) return;
    Value lhs = cmp.getLhs(), rhs = cmp.getRhs();
    arith::CmpIPredicate pred = cmp.getPredicate();
    if (pred == arith::CmpIPredicate::eq) {
      if (eqRow) return;  // one equality at most
      if (rowOut.contains(rhs) && colOut.contains(lhs)) std::swap(lhs, rhs);
      if (!rowOut.contains(lhs) || !colOut.contains(rhs)) return;
      if (!lhs.getType().isInteger(32) || !rhs.getType().isInteger(32)) return;
      eqRow = lhs;
      eqCol = rhs;
      continue;
    }
    // k on the left: k < x, k <= x, k > x, k >= x; the value compared with k reads no key.
    bool keyLeft = lhs == key;
    if (!keyLeft && rhs != key) return;
    Value other = keyLeft ? rhs : lhs;
    if (other == key || (deps.lookup(other) & Col) || cppType(other.getType()) != "int") return;
    if (!keyLeft) {  // x op k  ->  k op' x
      switch (pred) {
        case arith::CmpIPredicate::slt: pred = arith::CmpIPredicate::sgt; break;
        case arith::CmpIPredicate::sle: pred = arith::CmpIPredicate::sge; break;
        case arith::CmpIPredicate::sgt: pred = arith::CmpIPredicate::slt; break;
        case arith::CmpIPredicate::sge: pred = arith::CmpIPredicate::sle; break;
        default: return;
      }
    }
    switch (pred) {
      case arith::CmpIPredicate::slt: bounds.push_back({other, false, -1}); break;
      case arith::CmpIPredicate::sle: bounds.push_back({other, false, 0}); break;
      case arith::CmpIPredicate::sgt: bounds.push_back({other, true, 1}); break;
      case arith::CmpIPredicate::sge: bounds.push_back({other, true, 0}); break;
      default: return;  // ne, unsigned comparisons
    }
  }
  if (!eqRow && bounds.empty()) return;
  // The ops the bounds and enables need beyond the row's values (lengths, constants).
  SmallVector<Value> wanted;
  for (const Bound& bound : bounds) wanted.push_back(bound.value);
  wanted.append(enables.begin(), enables.end());
  std::string body;
  llvm::raw_string_ostream os(body);
  RegionEmitter emitter(os, inputs);
  if (failed(emitter.emitOps(closure(wanted, given), names, true))) return;
  auto name = [&](Value v) { return names.lookup(v); };
  out << "  // The join as key ranges a row (EmitCUDA.cpp emitJoinRanges; sm80/epilogue.h\n"
         "  // keepBitsRanges): keys k of [join_k_lo, join_k_hi]"
      << (eqRow ? " whose join_eq_col equals the row's join_eq_row" : "") << ".\n";
  out << "  static constexpr bool kJoinRanges = true;\n";
  out << "  static constexpr bool kJoinEq = " << (eqRow ? "true" : "false") << ";\n";
  if (eqRow) {
    // (`names` call the row's values r.vN and the key's c.vN, the parameters' names here)
    out << "  ATTNC_HD static int join_eq_row(const MaskRow& r) { return " << name(eqRow) << "; }\n";
    out << "  ATTNC_HD static int join_eq_col(const MaskCol& c) { return " << name(eqCol) << "; }\n";
  }
  for (const bool lo : {true, false}) {
    out << "  template <class P>\n  ATTNC_HD static long long join_k_" << (lo ? "lo" : "hi")
        << "(const P& p, int b, int h, int q, const MaskRow& r) {\n" << body;
    out << "    long long v = " << (lo ? "-2147483648LL" : "2147483647LL") << ";\n";
    for (const Bound& bound : bounds)
      if (bound.lower == lo)
        out << "    { const long long x = (long long)" << name(bound.value) << " + " << bound.offset
            << "; v = v " << (lo ? ">" : "<") << " x ? v : x; }\n";
    for (Value enable : enables)
      out << "    if (!" << name(enable) << ") v = " << (lo ? "2147483647LL" : "-2147483648LL")
          << ";\n";
    out << "    return v;\n  }\n";
  }
}

// The per-element mask split by what its values depend on, for the tiles a kernel masks element
// by element (sm80/epilogue.h forEachKeep): mask_row(p, b, h, q) computes the values that
// depend on the row (and b, h, the lengths and declared inputs) alone, once per row of a lane's
// tile; mask_col(p, b, h, k) those that depend on the key alone, once per key; mask_join(p, b, h,
// q, k, row, col) the rest, once per element, reading the first two's results from `row` and
// `col`. A document mask's doc[q] is then one load per row and doc[k] one per key instead of two
// per element for the compiler to merge (it did, but NVVM's time on document's forward was 1.4x
// causal's). The values that depend on neither (lengths, constants) are recomputed where used.
// Returns failure where no row or key part reads a declared input (the split would gain nothing:
// the compiler shares position arithmetic across elements itself) or a value the functions hand
// on has a type the split cannot name; the caller then emits kMaskSplit = false and the kernels
// evaluate `mask` per element as before.
LogicalResult emitMaskSplit(llvm::raw_ostream& out, Region& mask, DictionaryAttr inputs) {
  enum : unsigned { Row = 1, Col = 2 };
  Block& block = mask.front();
  llvm::DenseMap<Value, unsigned> deps;
  llvm::DenseMap<Value, std::string> argNames;
  const char* args[] = {"b", "h", "q", "k", "p.q_len", "p.kv_len"};
  for (auto [i, arg] : llvm::enumerate(block.getArguments())) {
    deps[arg] = i == 2 ? Row : i == 3 ? Col : 0u;
    argNames[arg] = args[i];
  }
  llvm::DenseMap<Value, Operation*> producer;
  llvm::DenseMap<Value, std::string> valueName;
  SmallVector<Operation*> ops;
  Operation* yield = nullptr;
  unsigned index = 0;
  for (Operation& op : block) {
    if (isa<attn::YieldOp>(op)) {
      yield = &op;
      continue;
    }
    if (op.getNumResults() != 1 || op.getNumRegions() != 0) return failure();
    unsigned d = 0;
    for (Value operand : op.getOperands()) d |= deps.lookup(operand);
    deps[op.getResult(0)] = d;
    producer[op.getResult(0)] = &op;
    valueName[op.getResult(0)] = "v" + std::to_string(index++);
    ops.push_back(&op);
  }
  if (!yield) return failure();
  // What the join reads: operands of the ops that depend on both, and the mask's result.
  llvm::SetVector<Value> rowOut, colOut;
  llvm::DenseSet<Operation*> joinOps;
  auto joinReads = [&](Value v) {
    if (isa<BlockArgument>(v)) return;  // q, k and the rest are the join's own arguments
    const unsigned d = deps.lookup(v);
    if (d == Row) rowOut.insert(v);
    if (d == Col) colOut.insert(v);
  };
  for (Operation* op : ops)
    if (deps[op->getResult(0)] == (Row | Col)) {
      joinOps.insert(op);
      for (Value operand : op->getOperands()) joinReads(operand);
    }
  joinReads(yield->getOperand(0));
  for (const llvm::SetVector<Value>* handed : {&rowOut, &colOut})
    for (Value v : *handed)
      if (cppType(v.getType()).empty()) return failure();
  // The ops a function emits: those that compute `wanted`, reading `given` as already there.
  auto closure = [&](ArrayRef<Value> wanted, const llvm::DenseSet<Value>& given) {
    llvm::DenseSet<Operation*> needed;
    SmallVector<Value> work(wanted.begin(), wanted.end());
    while (!work.empty()) {
      Value v = work.pop_back_val();
      Operation* op = producer.lookup(v);
      if (!op || given.contains(v) || !needed.insert(op).second) continue;
      for (Value operand : op->getOperands()) work.push_back(operand);
    }
    SmallVector<Operation*> ordered;
    for (Operation* op : ops)
      if (needed.contains(op)) ordered.push_back(op);
    return ordered;
  };
  auto names = [&](const char* rowPrefix, const char* colPrefix) {
    llvm::DenseMap<Value, std::string> n = argNames;
    for (auto& [v, s] : valueName) n[v] = s;
    if (rowPrefix)
      for (Value v : rowOut) n[v] = rowPrefix + valueName[v];
    if (colPrefix)
      for (Value v : colOut) n[v] = colPrefix + valueName[v];
    return n;
  };
  auto emitStruct = [&](const char* type, const llvm::SetVector<Value>& fields) {
    out << "  struct " << type << " {";
    for (Value v : fields) out << " " << cppType(v.getType()) << " " << valueName[v] << ";";
    out << (fields.empty() ? "};\n" : " };\n");
  };
  const SmallVector<Operation*> rowOps = closure(rowOut.getArrayRef(), {});
  const SmallVector<Operation*> colOps = closure(colOut.getArrayRef(), {});
  // Only where a row or key part reads a declared input: for masks of positions alone the
  // compiler shares the arithmetic across elements anyway, and their kernels stay as they were.
  if (!llvm::any_of(llvm::concat<Operation* const>(rowOps, colOps),
                    [](Operation* op) { return isa<attn::LoadOp>(op); }))
    return failure();
  std::string body;
  llvm::raw_string_ostream os(body);
  auto emitReturn = [&](const char* type, const llvm::SetVector<Value>& fields) {
    os << "    return " << type << "{";
    llvm::interleaveComma(fields, os, [&](Value v) { os << valueName[v]; });
    os << "};\n  }\n";
  };
  RegionEmitter emitter(os, inputs);
  const llvm::DenseMap<Value, std::string> ownNames = names(nullptr, nullptr);
  os << "  template <class P>\n  ATTNC_HD static MaskRow mask_row(const P& p, int b, int h, int q) {\n";
  if (failed(emitter.emitOps(rowOps, ownNames, true))) return failure();
  emitReturn("MaskRow", rowOut);
  os << "  template <class P>\n  ATTNC_HD static MaskCol mask_col(const P& p, int b, int h, int k) {\n";
  if (failed(emitter.emitOps(colOps, ownNames, true))) return failure();
  emitReturn("MaskCol", colOut);
  os << "  template <class P>\n  ATTNC_HD static bool mask_join(const P& p, int b, int h, int q, int k, "
        "const MaskRow& r, const MaskCol& c) {\n";
  llvm::DenseSet<Value> given(rowOut.begin(), rowOut.end());
  given.insert(colOut.begin(), colOut.end());
  const llvm::DenseMap<Value, std::string> joinNames = names("r.", "c.");
  if (failed(emitter.emitOps(closure({yield->getOperand(0)}, given), joinNames, true)))
    return failure();
  os << "    return " << joinNames.lookup(yield->getOperand(0)) << ";\n  }\n";
  out << "  // The mask split for per-element tiles: the values of one row, of one key, and the join\n"
         "  // (EmitCUDA.cpp emitMaskSplit; sm80/epilogue.h forEachKeep).\n";
  emitStruct("MaskRow", rowOut);
  emitStruct("MaskCol", colOut);
  out << body;
  emitJoinRanges(out, yield->getOperand(0), block.getArgument(3), producer, deps, joinOps, rowOut,
                 colOut, given, joinNames, closure, inputs);
  return success();
}

}  // namespace

FailureOr<KernelSource> emitCUDA(attn::TiledForwardOp op, attn::TiledBackwardOp backward) {
  KernelSource result;
  result.entry = (op.getSymName() + "_fwd").str();
  result.threads = int(op.getWarps() * 32);
  result.smemBytes = op.getSmemBytes();

  std::string code;
  llvm::raw_string_ostream os(code);
  std::string element = op.getElementType().isF16() ? "attnc::half" : "attnc::bf16";
  os << "// Generated by attnc from spec '" << op.getSymName() << "' for " << op.getTarget()
     << ": B_r = " << op.getBlockQ() << ", B_c = " << op.getBlockKv() << ", " << op.getWarps()
     << " warps, " << op.getStages() << " K/V buffers, " << op.getSmemBytes()
     << " B shared memory,\n// blocks classified '" << op.getClassification() << "', kv bounds '"
     << op.getKvBounds() << "'.\n";
  const bool hopper = op.getKernel() == "sm90";
  os << (hopper ? "#include \"attnc/sm90/forward.h\"\n" : "#include \"attnc/sm80/forward.h\"\n");
  StringAttr kvKernel = backward ? backward.getTilesAttr().getAs<StringAttr>("kv_kernel") : nullptr;
  const bool hopperBackward = kvKernel && kvKernel.getValue() == "sm90";
  // The sm_90a backward launches the sm80 preprocess and convert kernels too, and the sm80 dQ
  // kernel where its own does not fit.
  if (backward) os << "#include \"attnc/sm80/backward.h\"\n";
  if (hopperBackward) os << "#include \"attnc/sm90/bwd_q.h\"\n";
  const std::vector<std::pair<int, bool>> summarized = summarizedInputs(op);
  if (!summarized.empty())
    os << "#include \"attnc/common/summary.h\"\n#include \"attnc/common/tile_classes.h\"\n";
  // Everything the unit defines lives in a namespace named after the spec (the entries too:
  // extern "C" keeps their names), so that units of several specs can share a program or a
  // translation unit, and nvcc does not flag the Variant's members that a unit leaves unused as
  // it does in an unnamed namespace.
  const std::string specNamespace = ("attnc_spec_" + op.getSymName()).str();
  os << "\nnamespace " << specNamespace << " {\nnamespace ex = attnc::expr;\n\n";
  os << "struct Variant {\n";
  os << "  static constexpr bool kHasMask = " << (op.getMask().empty() ? "false" : "true") << ";\n";
  os << "  static constexpr bool kHasScore = " << (op.getScore().empty() ? "false" : "true") << ";\n";
  os << "  static constexpr bool kHasDropout = "
     << (op.getDropout().convertToDouble() > 0 ? "true" : "false") << ";\n";
  os << "  static constexpr int kDropoutRounds = " << op.getDropoutRounds() << ";\n";
  // A mask that reads declared inputs: the launch classifies every tile pair first
  // (<name>_tile_classes), and the forward's walk reads those classes (kv_tiles.h).
  os << "  static constexpr bool kTileClasses = " << (summarized.empty() ? "false" : "true")
     << ";\n";
  // With tile classes, a mask whose region leaves its head argument (b, h, q, k, ...) unused
  // classifies alike for every head: the launch then makes one head's (kv_tiles.h tileClassHeads).
  result.maskIgnoresHead =
      !summarized.empty() && op.getMask().front().getArgument(1).use_empty();
  os << "  static constexpr bool kMaskIgnoresHead = " << (result.maskIgnoresHead ? "true" : "false")
     << ";\n";
  // The sm_90a forward of a masked spec orders its blocks longest first across groups of heads
  // (block_order.h); the launch reads the same choice from KernelSource::orderedGrid.
  result.orderedGrid = hopper && !op.getMask().empty();
  os << "  static constexpr bool kOrderedGrid = " << (result.orderedGrid ? "true" : "false")
     << ";\n";
  // Likewise the sm_90a dK/dV kernel of a masked spec: orderedGrid over its kv tiles and (kv head,
  // batch) pairs, rank in blockIdx.y (BackwardSource::kvOrderedGrid).
  const bool kvOrderedGrid = hopperBackward && !op.getMask().empty();
  os << "  static constexpr bool kKvOrderedGrid = " << (kvOrderedGrid ? "true" : "false")
     << ";\n";
  // The sm_90a dK/dV kernel hands the score hook and its derivative unclamped expr::Pos positions
  // where both stay finite past the sequences' ends (a padding element's derivative is multiplied
  // by P = 0, and its P by dO = 0, so either being NaN would poison dK and dV).
  const bool backwardPositions = hopperBackward && !op.getScore().empty() &&
                                 finitePastTheEnds(op.getScore()) &&
                                 finitePastTheEnds(backward.getScoreGrad());
  os << "  static constexpr bool kBackwardPositions = " << (backwardPositions ? "true" : "false")
     << ";\n\n";

  RegionEmitter emitter(os, op.getInputs());
  // A hook of more than kOutlinedHookOps operations becomes a function of its own (the
  // _OUTLINED macros of attnc/common/platform.h): inlined, NVVM and ptxas get one copy per element
  // a thread holds and take time superlinear in the kernel's size.
  const auto hookDecl = [](Region& region, const char* inlined, const char* outlined) {
    const bool outline =
        !region.empty() && int64_t(region.front().getOperations().size()) > kOutlinedHookOps;
    return outline ? outlined : inlined;
  };
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
        "(sm80/epilogue.h).\n";
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
  if (hopper)
    os << llvm::formatv("using Config = attnc::sm90::FwdConfig<{0}, {1}, {2}, {3}, {4}, {5}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), op.getBlockQ() / 64,
                        op.getBlockKv(), op.getStages());
  else
    os << llvm::formatv("using Config = attnc::sm80::FwdConfig<{0}, {1}, {2}, {3}, {4}, {5}, {6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), op.getBlockQ(),
                        op.getBlockKv(), op.getWarps(), op.getStages());
  os << "static_assert(Config::kSmemBytes == " << op.getSmemBytes()
     << ", \"attn-select-tiles and the kernel template disagree on shared memory\");\n";
  if (backward) {
    DictionaryAttr tiles = backward.getTilesAttr();
    auto tile = [&](StringRef name) { return tiles.getAs<IntegerAttr>(name).getInt(); };
    os << llvm::formatv("using BwdKVConfig = attnc::sm80::BwdConfig<{0}, {1}, {2}, {3}, {4}, {5}, {6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), tile("kv_block_q"),
                        tile("kv_block_kv"), tile("kv_warps"), tile("kv_stages"));
    os << llvm::formatv("using BwdQConfig = attnc::sm80::BwdConfig<{0}, {1}, {2}, {3}, {4}, {5}, {6}>;\n",
                        element, op.getHeadDim(), op.getHeadDimV(), tile("q_block_q"),
                        tile("q_block_kv"), tile("q_warps"), tile("q_stages"));
    os << "static_assert(BwdKVConfig::kSmemBytes == " << tile("kv_smem_bytes")
       << " && BwdQConfig::kSmemBytesQ == " << tile("q_smem_bytes")
       << ", \"attn-derive-backward and the backward template disagree on shared memory\");\n";
    BackwardSource info;
    info.entryStem = (op.getSymName() + "_bwd").str();
    info.kvThreads = int(tile("kv_warps") * 32);
    info.qThreads = int(tile("q_warps") * 32);
    info.kvBlockKV = int(tile("kv_block_kv"));
    info.qBlockQ = int(tile("q_block_q"));
    info.kvSmemBytes = tile("kv_smem_bytes");
    info.qSmemBytes = tile("q_smem_bytes");
    info.preprocessThreads = info.kvThreads;
    if (hopperBackward) {
      // hopper_split: absent in tiled IR written before the head-dim split.
      auto splitAttr = tiles.getAs<IntegerAttr>("hopper_split");
      const bool split = splitAttr && splitAttr.getInt() != 0;
      // Without the split, a separate dQ is also the dK/dV kernel's layout (bwd_config.h
      // SeparateDq).
      auto separateAttr = tiles.getAs<IntegerAttr>("hopper_separate_dq");
      const bool plainSeparateDq = !split && separateAttr && separateAttr.getInt() != 0;
      os << llvm::formatv("using BwdHopperConfig = attnc::sm90::BwdConfig<{0}, {1}, {2}, {3}, {4}{5}>;\n",
                          element, op.getHeadDim(), op.getHeadDimV(), attnc::sm90::kBwdConsumers,
                          tile("hopper_stages"),
                          split ? ", true" : plainSeparateDq ? ", false, true" : "");
      os << "static_assert(BwdHopperConfig::kSmemBytes == " << tile("hopper_smem_bytes")
         << ", \"attn-derive-backward and the sm_90a backward template disagree on shared memory\");\n";
      info.kvKernel = "sm90";
      info.kvOrderedGrid = kvOrderedGrid;
      info.kvThreads = 128 * (attnc::sm90::kBwdConsumers + 1);
      info.kvBlockKV = attnc::sm90::bwdKvRows(attnc::sm90::kBwdConsumers, split);
      info.kvSmemBytes = tile("hopper_smem_bytes");
      // hopper_q_smem_bytes: absent in tiled IR written before the sm_90a dQ kernel.
      auto qSmem = tiles.getAs<IntegerAttr>("hopper_q_smem_bytes");
      if (qSmem && qSmem.getInt() > 0) {
        os << llvm::formatv("using DqHopperConfig = attnc::sm90::DqConfig<{0}, {1}, {2}, {3}, {4}>;\n",
                            element, op.getHeadDim(), op.getHeadDimV(), tile("hopper_q_block_kv"),
                            tile("hopper_q_stages"));
        os << "static_assert(DqHopperConfig::kSmemBytes == " << qSmem.getInt()
           << ", \"attn-derive-backward and the sm_90a dQ template disagree on shared memory\");\n";
        info.qKernel = "sm90";
        info.qThreads = 128 * 3;
        info.qBlockQ = 128;
        info.qBlockKV = int(tile("hopper_q_block_kv"));
        info.qSmemBytes = qSmem.getInt();
        info.separateDq = tile("hopper_separate_dq") != 0;
      }
    }
    result.backward = info;
  }
  os << "\n";
  // The entries fall into groups (EntryGroup, EmitCUDA.h), each fenced by `#if` on the bit mask
  // ATTNC_ENTRY_GROUPS, so that the JIT can compile them as separate NVRTC programs at once.
  // Undefined, the macro keeps every entry (the unit compiles whole). A unit of the forward alone
  // has no fences.
  const bool grouped = bool(backward) || !summarized.empty();
  int openGroup = -1;
  auto group = [&](EntryGroup g) {
    if (!grouped || int(g) == openGroup) return;
    if (openGroup >= 0) os << "#endif  // entry group " << openGroup << "\n";
    os << "\n#if !defined(ATTNC_ENTRY_GROUPS) || (ATTNC_ENTRY_GROUPS >> " << int(g) << " & 1)\n";
    openGroup = int(g);
    if (!llvm::is_contained(result.entryGroups, int(g))) result.entryGroups.push_back(int(g));
  };
  group(EntryGroup::Forward);
  // The sm_80 entries name their dynamic shared memory smem128: a unit can hold both kinds of
  // entry, and one extern array redeclared in a namespace with another alignment is an error to
  // nvcc.
  if (hopper)  // minBlocks = 1 caps the registers at entry, which setmaxnreg needs
    os << "extern \"C\" __global__ void __launch_bounds__(Config::kThreads, 1) " << result.entry
       << "(const __grid_constant__ attnc::FwdParamsTma p) {\n"
       << "  extern __shared__ __align__(1024) unsigned char smem[];\n"
       << "  attnc::sm90::forward<Config, Variant>(p, smem);\n}\n";
  else
    os << "extern \"C\" __global__ void __launch_bounds__(Config::kThreads) " << result.entry
       << "(const attnc::FwdParams p) {\n"
       << "  extern __shared__ __align__(128) unsigned char smem128[];\n"
       << "  attnc::sm80::forward<Config, Variant>(p, smem128);\n}\n";
  if (result.backward) {
    // minBlocks = 1: without it ptxas may cap registers for occupancy and spill.
    const std::string& stem = result.backward->entryStem;
    auto entry = [&](StringRef suffix, StringRef config, StringRef call, bool usesSmem) {
      os << "\nextern \"C\" __global__ void __launch_bounds__(" << config << "::kThreads, 1) "
         << stem << suffix << "(const attnc::BwdParams p) {\n";
      if (usesSmem) os << "  extern __shared__ __align__(128) unsigned char smem128[];\n";
      os << "  attnc::sm80::" << call << "(p, " << (usesSmem ? "smem128" : "nullptr") << ");\n}\n";
    };
    // The sm_90a dK/dV kernel keeps dq_accum in its own layout, which zeroing and conversion follow.
    const char* layout = hopperBackward ? ", attnc::sm90::TiledDqLayout<BwdHopperConfig>" : "";
    entry("_preprocess", "BwdKVConfig",
          (llvm::Twine("backwardPreprocess<BwdKVConfig, Variant") + layout + ">").str(), false);
    entry("_convert_dq", "BwdKVConfig",
          (llvm::Twine("backwardConvertDQ<BwdKVConfig, Variant") + layout + ">").str(), false);
    for (auto [suffix, writeDQ] : {std::pair{"_kv", true}, std::pair{"_kv_nodq", false}}) {
      // With a separate dQ (BackwardSource::separateDq) no launch takes the dK/dV kernel's own dQ.
      if (writeDQ && result.backward->separateDq) continue;
      group(writeDQ ? EntryGroup::BackwardKV : EntryGroup::BackwardKVNoDQ);
      if (hopperBackward)
        os << "\nextern \"C\" __global__ void __launch_bounds__(BwdHopperConfig::kThreads, 1) "
           << stem << suffix << "(const __grid_constant__ attnc::BwdParamsTma p) {\n"
           << "  extern __shared__ __align__(1024) unsigned char smem[];\n"
           << "  attnc::sm90::backwardKV<BwdHopperConfig, Variant, " << (writeDQ ? "true" : "false")
           << ">(p, smem);\n}\n";
      else
        entry(suffix, "BwdKVConfig",
              (llvm::Twine("backwardKV<BwdKVConfig, Variant, ") + (writeDQ ? "true" : "false") + ">")
                  .str(),
              true);
    }
    group(EntryGroup::BackwardQ);
    if (result.backward->qKernel == "sm90")
      os << "\nextern \"C\" __global__ void __launch_bounds__(DqHopperConfig::kThreads, 1) " << stem
         << "_q(const __grid_constant__ attnc::BwdParamsTma p) {\n"
         << "  extern __shared__ __align__(1024) unsigned char smem[];\n"
         << "  attnc::sm90::backwardQ<DqHopperConfig, Variant>(p, smem);\n}\n";
    else
      entry("_q", "BwdQConfig", "backwardQ<BwdQConfig, Variant>", true);
  }
  if (!summarized.empty()) {
    group(EntryGroup::TileClasses);
    result.summaryEntry = (op.getSymName() + "_summary").str();
    os << "\n// Block summaries of the inputs the mask reads along positions, launched before the "
          "kernels\n// above in the same stream (docs/templates.md).\n";
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::kSummaryThreads) "
       << result.summaryEntry << "(const attnc::SummaryParams p) {\n";
    for (auto [slot, isF32] : summarized) {
      os << "  attnc::summarizeInput<" << (isF32 ? "float" : "int") << ">(p, " << slot << ");\n";
      result.summarySlots.push_back(slot);
    }
    os << "}\n";
    result.tileClassesEntry = (op.getSymName() + "_tile_classes").str();
    // minBlocks = 1 here too: without it ptxas capped the entry at 48 registers and kept a
    // variable on the stack (document).
    os << "\n// The class of every (q tile, kv tile) pair of the forward, launched after the summaries "
          "and\n// before the forward (docs/templates.md).\n";
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads, 1) "
       << result.tileClassesEntry << "(const attnc::FwdParams p) {\n"
       << "  attnc::writeTileClasses<Variant, Config::kBlockQ, Config::kBlockKV>(p);\n}\n";
    // The q tiles longest kv range first, launched after the classes (found by its name).
    os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads) "
       << result.tileClassesEntry << "_order(const attnc::FwdParams p) {\n"
       << "  attnc::writeTileOrder<Variant, Config::kBlockQ>(p);\n}\n";
    if (result.backward) {
      // The same for the dK/dV kernel's walk (q tiles per kv tile), launched by the backward.
      const char* kvConfig = hopperBackward ? "BwdHopperConfig" : "BwdKVConfig";
      os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads, 1) "
         << result.backward->entryStem << "_tile_classes(const attnc::BwdParams p) {\n"
         << "  attnc::writeTileClasses<Variant, " << kvConfig << "::kBlockQ, " << kvConfig
         << "::kBlockKV>(p);\n}\n";
      // And for the sm_90a dQ kernel's (kv tiles per q tile), launched by a backward that runs it.
      if (result.backward->qKernel == "sm90")
        os << "extern \"C\" __global__ void __launch_bounds__(attnc::kTileClassThreads, 1) "
           << result.backward->entryStem
           << "_q_tile_classes(const attnc::BwdParams p) {\n"
              "  attnc::writeTileClasses<Variant, DqHopperConfig::kBlockQ, "
              "DqHopperConfig::kBlockKV, attnc::BwdParams, true>(p);\n}\n";
    }
  }
  if (openGroup >= 0) os << "#endif  // entry group " << openGroup << "\n";
  os << "\n}  // namespace " << specNamespace << "\n";
  result.code = std::move(code);
  return result;
}

std::vector<unsigned> packEntryGroups(const std::vector<int>& groups, unsigned programs) {
  std::vector<int> order = groups;
  std::stable_sort(order.begin(), order.end(),
                   [](int a, int b) { return kEntryGroupCost[a] > kEntryGroupCost[b]; });
  std::vector<unsigned> masks(std::max(1u, std::min<unsigned>(programs, unsigned(groups.size()))), 0u);
  std::vector<int> load(masks.size(), 0);
  for (int g : order) {
    size_t lightest = std::min_element(load.begin(), load.end()) - load.begin();
    masks[lightest] |= 1u << g;
    load[lightest] += kEntryGroupCost[g];
  }
  std::stable_partition(masks.begin(), masks.end(), [](unsigned m) {
    return (m >> int(EntryGroup::Forward) & 1u) != 0;
  });
  return masks;
}

}  // namespace attnc
