// The per-element mask split into the parts of one row, of one key and their join
// (emitMaskSplit), and the join as key ranges a row where it has that form (emitJoinRanges).
#include "compiler/CodeGen/CUDA/MaskSplit.h"

#include "compiler/CodeGen/CUDA/RegionEmitter.h"
#include "dialects/Attn/IR/AttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

using namespace mlir;

namespace attnc {
namespace {

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
// per element (common/mask_warp.h keepBitsRanges). Emits kJoinRanges = true,
// join_eq_row/join_eq_col (kJoinEq) and join_k_lo/join_k_hi (64-bit, so that k > INT_MAX - 0 and the like cannot
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
  out << "  // The join as key ranges a row (MaskSplit.cpp emitJoinRanges; common/mask_warp.h\n"
         "  // keepBitsRanges): keys k of [join_k_lo, join_k_hi]"
      << (eqRow ? " whose join_eq_col equals the row's join_eq_row" : "") << ".\n";
  out << "  static constexpr bool kJoinRanges = true;\n";
  out << "  static constexpr bool kJoinEq = " << (eqRow ? "true" : "false") << ";\n";
  if (eqRow) {
    // (`names` call the row's values r.vN and the key's c.vN, the parameters' names here)
    out << "  ATTNC_HD static int join_eq_row(const MaskRow& r) { return " << name(eqRow)
        << "; }\n";
    out << "  ATTNC_HD static int join_eq_col(const MaskCol& c) { return " << name(eqCol)
        << "; }\n";
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

}  // namespace

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
  // compiler shares the arithmetic across elements anyway, and their kernels evaluate it whole.
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
  os << "  template <class P>\n"
        "  ATTNC_HD static MaskRow mask_row(const P& p, int b, int h, int q) {\n";
  if (failed(emitter.emitOps(rowOps, ownNames, true))) return failure();
  emitReturn("MaskRow", rowOut);
  os << "  template <class P>\n"
        "  ATTNC_HD static MaskCol mask_col(const P& p, int b, int h, int k) {\n";
  if (failed(emitter.emitOps(colOps, ownNames, true))) return failure();
  emitReturn("MaskCol", colOut);
  os << "  template <class P>\n"
        "  ATTNC_HD static bool mask_join(const P& p, int b, int h, int q, int k, "
        "const MaskRow& r, const MaskCol& c) {\n";
  llvm::DenseSet<Value> given(rowOut.begin(), rowOut.end());
  given.insert(colOut.begin(), colOut.end());
  const llvm::DenseMap<Value, std::string> joinNames = names("r.", "c.");
  if (failed(emitter.emitOps(closure({yield->getOperand(0)}, given), joinNames, true)))
    return failure();
  os << "    return " << joinNames.lookup(yield->getOperand(0)) << ";\n  }\n";
  out << "  // The mask split for per-element tiles: the values of one row, of one key, and the "
         "join\n"
         "  // (MaskSplit.cpp emitMaskSplit; common/mask.h forEachKeep).\n";
  emitStruct("MaskRow", rowOut);
  emitStruct("MaskCol", colOut);
  out << body;
  emitJoinRanges(out, yield->getOperand(0), block.getArgument(3), producer, deps, joinOps, rowOut,
                 colOut, given, joinNames, closure, inputs);
  return success();
}

}  // namespace attnc
