// Spec semantics shared by the YAML reader and the C++ builder: value ranges, cross-field rules,
// the builtin masks and scores written out as expressions, and the builder itself.
#include "compiler/Spec/Spec.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "compiler/Spec/Expr.h"
#include "compiler/Spec/Limits.h"
#include "compiler/Spec/SpecCheck.h"

#include "llvm/ADT/StringExtras.h"

#include <cfloat>
#include <climits>
#include <algorithm>
#include <cmath>
#include <optional>

namespace attnc {

llvm::StringRef toString(DType type) { return type == DType::BF16 ? "bf16" : "fp16"; }

llvm::StringRef toString(ScalarType type) {
  switch (type) {
  case ScalarType::I1: return "i1";
  case ScalarType::I32: return "i32";
  case ScalarType::F32: return "f32";
  }
  return "?";
}

llvm::StringRef toString(InputDim dim) {
  switch (dim) {
  case InputDim::B: return "b";
  case InputDim::H: return "h";
  case InputDim::Pos: return "pos";
  }
  return "?";
}

const InputDecl* Spec::findInput(std::string_view inputName) const {
  for (const InputDecl& input : inputs)
    if (input.name == inputName) return &input;
  return nullptr;
}

double Spec::effectiveScale() const { return scale ? *scale : 1.0 / std::sqrt(double(headDim)); }

// ---- Builtins as expressions ----

// The query row aligned to the key sequence's end (bottom-right), as FlashAttention 2 does.
static constexpr const char* kAlignedQuery = "q + kv_len - q_len";

std::string builtinExpressionText(const MaskSpec& mask, const std::vector<InputDecl>& inputs) {
  std::string aligned = kAlignedQuery;
  switch (mask.kind) {
  case MaskSpec::None:
  case MaskSpec::Expr: return "";
  case MaskSpec::Causal: return mask.topLeft ? "k <= q" : "k <= " + aligned;
  case MaskSpec::Window:
    return "k <= " + aligned + " && k > " + aligned + " - " + std::to_string(mask.window);
  case MaskSpec::Prefix: return "k < " + std::to_string(mask.prefix) + " || k <= " + aligned;
  case MaskSpec::Document: {
    // Document ids are per key position; a query row sits at key position q' (bottom-right).
    bool perBatch = false;
    for (const InputDecl& input : inputs)
      if (input.name == mask.documentInput) perBatch = input.dims.size() == 2;
    const std::string& doc = mask.documentInput;
    std::string text = perBatch ? doc + "[b, " + aligned + "] == " + doc + "[b, k]"
                                : doc + "[" + aligned + "] == " + doc + "[k]";
    if (mask.documentCausal) text += " && k <= " + aligned;
    return text;
  }
  }
  return "";
}

std::string builtinExpressionText(const ScoreSpec& score, int64_t headsQ) {
  switch (score.kind) {
  case ScoreSpec::None:
  case ScoreSpec::Expr: return "";
  case ScoreSpec::Softcap: {
    std::string cap = expr::formatFloatLiteral(score.softcap);
    return cap + " * tanh(score / " + cap + ")";
  }
  case ScoreSpec::Alibi: {
    std::string distance = std::string("abs(") + kAlignedQuery + " - k)";
    if (!score.alibiSlopes.empty()) return "score - " + score.alibiSlopes + "[h] * " + distance;
    // standardAlibiSlopes() as a function of h, so no table needs passing at launch.
    int64_t pow2 = 1;
    while (pow2 * 2 <= headsQ) pow2 *= 2;
    std::string n = std::to_string(pow2);
    std::string slope = "exp2(-8.0 * (h + 1) / " + n + ")";
    if (pow2 != headsQ)
      slope =
          "where(h < " + n + ", " + slope + ", exp2(-4.0 * (2 * (h - " + n + ") + 1) / " + n + "))";
    return "score - " + slope + " * " + distance;
  }
  }
  return "";
}

std::vector<double> standardAlibiSlopes(int64_t heads) {
  std::vector<double> slopes;
  if (heads <= 0) return slopes;
  int64_t pow2 = 1;
  while (pow2 * 2 <= heads) pow2 *= 2;
  for (int64_t i = 0; i < pow2; ++i)
    slopes.push_back(std::exp2(-8.0 * double(i + 1) / double(pow2)));
  // The rest are every other slope of 2 * pow2 heads, starting with the first.
  for (int64_t j = 0; pow2 + j < heads; ++j)
    slopes.push_back(std::exp2(-8.0 * double(2 * j + 1) / double(2 * pow2)));
  return slopes;
}

// ---- Checks ----

std::string formatNumber(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

namespace detail {

std::string nearestName(llvm::StringRef name, llvm::ArrayRef<llvm::StringRef> candidates) {
  llvm::StringRef best;
  unsigned bestDistance = ~0u;
  for (llvm::StringRef candidate : candidates) {
    unsigned distance = name.edit_distance(candidate);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  // Close means a typo: a third of the name's letters at most, at least one.
  if (bestDistance <= std::max<size_t>(1, name.size() / 3)) return best.str();
  return "";
}

static bool isIdentifier(llvm::StringRef text) {
  if (text.empty() || !(llvm::isAlpha(text[0]) || text[0] == '_')) return false;
  return llvm::all_of(text, [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

namespace {

static_assert(kDefaultDropoutRounds == attnc::kDropoutRoundsDefault,
              "the spec's default dropout rounds are philox.h's");

class Checker {
public:
  Checker(Spec& spec, const SpecSites* sites, Diagnostics& diags)
      : spec(spec), sites(sites), diags(diags) {}

  bool run() {
    size_t before = diags.size();
    checkName();
    checkHeadDim("head_dim", spec.headDim);
    if (spec.headDimV != spec.headDim) checkHeadDim("head_dim_v", spec.headDimV);
    checkHeads();
    if (spec.scale && !skip("scale") && !isNormalPositiveFloat(*spec.scale))
      report("scale", std::string("scale: must be 'auto' or a positive number representable "
                                  "as a normal float32 (") +
                          kNormalFloatRange + "), got " + formatNumber(*spec.scale));
    if (!skip("dropout") && !(spec.dropout >= 0 && spec.dropout < 1))
      report("dropout", "dropout: must be in [0, 1), got " + formatNumber(spec.dropout));
    else if (!skip("dropout") && spec.dropout > 0)
      checkDropoutResolution();
    if (!skip("dropout.rounds") && (spec.dropoutRounds < attnc::kDropoutRoundsMin ||
                                    spec.dropoutRounds > attnc::kDropoutRoundsMax))
      report("dropout.rounds",
             "dropout.rounds: must be an integer in [" + std::to_string(attnc::kDropoutRoundsMin) +
                 ", " + std::to_string(attnc::kDropoutRoundsMax) +
                 "] (Philox4x32 passes BigCrush from 7 rounds; 10 is Random123's default), got " +
                 std::to_string(spec.dropoutRounds));
    bool inputsOk = checkInputs();
    checkMask(inputsOk);
    checkScore(inputsOk);
    bool ok = std::none_of(diags.begin() + before, diags.end(),
                           [](const Diagnostic& diag) { return diag.isError(); });
    // Warnings about a spec with errors would be noise beside them.
    if (ok) warnAboutExpressions();
    return ok;
  }

private:
  bool skip(const std::string& field) const { return sites && sites->reported.count(field); }

  // The kernels take scale and softcap as float32: past FLT_MAX they become inf, below FLT_MIN a
  // subnormal that loses precision or 0.
  static constexpr const char* kNormalFloatRange = "1.17549435e-38 to 3.40282347e+38";
  static bool isNormalPositiveFloat(double value) {
    return std::isfinite(value) && value >= FLT_MIN && value <= FLT_MAX;
  }

  // The kernels drop with probability round(256 p) / 256 (the float p, templates/attnc/common/
  // philox.h dropoutSteps): a p that rounds to 0 or to 1 there cannot be what was meant.
  void checkDropoutResolution() {
    const double steps = attnc::dropoutSteps(float(spec.dropout));
    if (steps < 1.0)
      report("dropout", "dropout: " + formatNumber(spec.dropout) +
                            " rounds to 0 at the kernels' resolution of 1/256 (the smallest "
                            "dropout is 0.001953125 = 1/512); use 0 for none");
    else if (steps >= 256.0)
      report("dropout", "dropout: " + formatNumber(spec.dropout) +
                            " rounds to 1 at the kernels' resolution of 1/256 (it must be below "
                            "0.998046875 = 511/512)");
  }

  const FieldSite* site(const std::string& field) const {
    if (!sites) return nullptr;
    auto it = sites->fields.find(field);
    return it == sites->fields.end() ? nullptr : &it->second;
  }

  Diagnostic at(const std::string& field, std::string message) const {
    Diagnostic diag;
    diag.message = std::move(message);
    if (const FieldSite* fieldSite = site(field)) {
      diag.loc = fieldSite->place.loc;
      diag.sourceLine = fieldSite->place.sourceLine;
    } else if (sites) {
      diag.loc = sites->top.loc;
      diag.sourceLine = sites->top.sourceLine;
    } else {
      diag.specName = spec.name;
    }
    return diag;
  }

  void report(const std::string& field, std::string message) {
    diags.push_back(at(field, std::move(message)));
  }

  // A warning at an expression's node: its own line and column where the reader knows them, the
  // expression text with a caret for a builder-made spec.
  void warnAt(const std::string& field, const expr::Node& node, const std::string& text,
              std::string message) {
    Diagnostic diag = at(field, std::move(message));
    diag.severity = Severity::Warning;
    if (!sites) {
      diag.sourceLine = text;
      diag.loc.col = node.loc.col;
    } else if (node.loc.line != 0) {
      // The field's line is the only line the checker has the text of.
      if (node.loc.line != diag.loc.line) diag.sourceLine.clear();
      diag.loc = node.loc;
    }
    diags.push_back(std::move(diag));
  }

  // ---- Warnings: the spec compiles, but likely does not say what was meant ----

  // The value of an expression made of literals and arithmetic only (`0`, `1 - 1`, `0.0 * 2`).
  static std::optional<double> constantValue(const expr::Node& node) {
    using expr::Kind;
    using expr::Op;
    switch (node.kind) {
    case Kind::IntLit: return double(node.intValue);
    case Kind::FloatLit: return node.floatValue;
    case Kind::ToFloat: return constantValue(*node.children[0]);
    case Kind::Unary:
      if (node.op != Op::Neg) return std::nullopt;
      if (auto value = constantValue(*node.children[0])) return -*value;
      return std::nullopt;
    case Kind::Binary: {
      if (node.op != Op::Add && node.op != Op::Sub && node.op != Op::Mul) return std::nullopt;
      auto lhs = constantValue(*node.children[0]), rhs = constantValue(*node.children[1]);
      if (!lhs || !rhs) return std::nullopt;
      return node.op == Op::Add ? *lhs + *rhs : node.op == Op::Sub ? *lhs - *rhs : *lhs * *rhs;
    }
    default: return std::nullopt;
    }
  }

  // Division or remainder by a constant zero: the expression kernels make every operation total
  // (templates/attnc/common/expr_scalar.h), so it compiles, but never to what was meant.
  void warnDivisionByZero(const std::string& field, const std::string& text,
                          const expr::Node& node) {
    for (const ExprPtr& child : node.children) warnDivisionByZero(field, text, *child);
    if (node.kind != expr::Kind::Binary ||
        (node.op != expr::Op::Div && node.op != expr::Op::Rem))
      return;
    std::optional<double> divisor = constantValue(*node.children[1]);
    if (!divisor || *divisor != 0.0) return;
    const bool isInt = node.type == ScalarType::I32;
    warnAt(field, node, text,
           field + ": " + (node.op == expr::Op::Div ? "division" : "remainder") +
               " by the constant 0 (" +
               (isInt ? "an integer division or remainder by zero gives 0 in attnc"
                      : "a float division by zero gives inf or nan") +
               ")");
  }

  // The first `q` outside an input's index, and whether q_len or kv_len appears anywhere.
  static void findAlignment(const expr::Node& node, bool inIndex, const expr::Node*& rawQ,
                            bool& saysLengths) {
    if (node.kind == expr::Kind::Var) {
      if (node.name == "q" && !inIndex && !rawQ) rawQ = &node;
      if (node.name == "q_len" || node.name == "kv_len") saysLengths = true;
    }
    for (const ExprPtr& child : node.children)
      findAlignment(*child, inIndex || node.kind == expr::Kind::InputIndex, rawQ, saysLengths);
  }

  // A custom mask that compares the raw query row with keys aligns the first query with the first
  // key (top-left), where every builtin aligns the last query with the last key (bottom-right):
  // the two differ whenever q_len != kv_len, as in decoding with a KV cache.
  void warnQueryAlignment() {
    const MaskSpec& mask = spec.mask;
    if (mask.kind != MaskSpec::Expr || !mask.expr) return;
    const expr::Node* rawQ = nullptr;
    bool saysLengths = false;
    findAlignment(*mask.expr, false, rawQ, saysLengths);
    if (!rawQ || saysLengths) return;
    std::string message =
        "mask: raw 'q' aligns the first query row with the first key (top-left); the builtin "
        "masks align the last query row with the last key (q + kv_len - q_len), so this mask "
        "differs from them when q_len != kv_len";
    if (expr::print(*mask.expr) == "(k <= q)")
      message += "; `mask: causal` is bottom-right: write \"k <= q + kv_len - q_len\" for it, or "
                 "`mask: {causal: top_left}` for this one";
    else
      message += "; write q + kv_len - q_len for the bottom-right row, or mention q_len or "
                 "kv_len to show the alignment is meant";
    warnAt("mask", *rawQ, mask.exprText, message);
  }

  void warnAboutExpressions() {
    if (spec.mask.kind == MaskSpec::Expr && spec.mask.expr)
      warnDivisionByZero("mask", spec.mask.exprText, *spec.mask.expr);
    if (spec.score.kind == ScoreSpec::Expr && spec.score.expr)
      warnDivisionByZero("score", spec.score.exprText, *spec.score.expr);
    warnQueryAlignment();
  }

  void checkName() {
    if (skip("name")) return;
    if (spec.name.size() > limits::kMaxNameLength)
      report("name", "name: must be at most " + std::to_string(limits::kMaxNameLength) +
                         " characters (it stems the kernels' C symbols), got " +
                         std::to_string(spec.name.size()));
    else if (!isIdentifier(spec.name))
      report("name", std::string("name: must be an identifier ([A-Za-z_][A-Za-z0-9_]*; it names ") +
                         "the kernel symbols), got '" + spec.name + "'");
  }

  void checkHeadDim(const std::string& field, int64_t value) {
    if (skip(field)) return;
    if (value >= 8 && value <= 256 && value % 8 == 0) return;
    std::string message =
        field + ": must be a multiple of 8 in [8, 256], got " + std::to_string(value);
    if (value > 8 && value < 256)
      message += "; did you mean " + std::to_string(value / 8 * 8) + " or " +
                 std::to_string(value / 8 * 8 + 8) + "?";
    else if (value > 0 && value < 8)
      message += "; did you mean 8?";
    report(field, message);
  }

  void checkHeads() {
    if (skip("heads") || skip("heads.q")) return;
    bool ok = true;
    // Positions and head indices are i32 in expressions and kernels.
    if (spec.headsQ < 1 || spec.headsQ > INT32_MAX) {
      report("heads.q", "heads.q: must be in [1, 2147483647], got " + std::to_string(spec.headsQ));
      ok = false;
    }
    if (skip("heads.kv")) return;
    // A kv that defaulted to q repeats q's error; only a kv of its own has one.
    if ((spec.headsKV < 1 || spec.headsKV > INT32_MAX) && spec.headsKV != spec.headsQ) {
      report("heads.kv",
             "heads.kv: must be in [1, 2147483647], got " + std::to_string(spec.headsKV));
      ok = false;
    }
    if (ok && spec.headsKV >= 1 && spec.headsQ % spec.headsKV != 0)
      report("heads.kv", "heads.kv: must divide heads.q (" + std::to_string(spec.headsQ) +
                             ") so query heads share key/value heads evenly, got " +
                             std::to_string(spec.headsKV));
  }

  // Returns false when some input is broken, so checks that read inputs do not report errors that
  // are only echoes of it.
  bool checkInputs() {
    bool ok = true;
    std::set<std::string> seen;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const InputDecl& input = spec.inputs[i];
      std::string field = "inputs." + input.name;
      if (skip(field) || skip(field + ".dtype") || skip(field + ".dims")) {
        ok = false;
        continue;
      }
      size_t before = diags.size();
      if (i == size_t(attnc::kMaxInputs))
        report(field, "inputs: at most " + std::to_string(attnc::kMaxInputs) +
                          " inputs (the kernels' parameter block holds that many), got " +
                          std::to_string(spec.inputs.size()));
      if (input.name.size() > limits::kMaxInputNameLength)
        report(field, "inputs: an input name must be at most " +
                          std::to_string(limits::kMaxInputNameLength) + " characters, got " +
                          std::to_string(input.name.size()));
      else if (!isIdentifier(input.name))
        report(field, "inputs: input name must be an identifier, got '" + input.name + "'");
      else if (expr::isReservedName(input.name))
        report(field, "inputs: '" + input.name +
                          "' is a reserved name (b, h, q, k, q_len, kv_len, score, true, false and "
                          "function names); choose another");
      else if (!seen.insert(input.name).second)
        report(field, "inputs: '" + input.name + "' is declared twice");
      if (input.type == ScalarType::I1)
        report(field + ".dtype", field + ".dtype: must be i32 or f32, got i1");
      if (input.dims.empty())
        report(field + ".dims", field + ".dims: needs at least one of b, h, pos");
      std::set<InputDim> dims;
      for (InputDim dim : input.dims)
        if (!dims.insert(dim).second) {
          report(field + ".dims",
                 field + ".dims: '" + toString(dim).str() + "' appears more than once");
          break;
        }
      ok &= diags.size() == before;
    }
    return ok;
  }

  static std::string dimsText(const InputDecl& input) {
    std::string text = "[";
    for (size_t i = 0; i < input.dims.size(); ++i)
      text += (i ? ", " : "") + toString(input.dims[i]).str();
    return text + "]";
  }

  // Type-checks an expression, pointing errors into the field's string (file or builder text).
  ExprPtr typeCheck(const std::string& field, const std::string& text, expr::Role role,
                    bool isBuiltin) {
    const FieldSite* fieldSite = site(field);
    auto placeAt = [&](size_t offset) -> Place {
      if (isBuiltin || !sites)  // builtin text is ours; point at the field, not into our text
        return fieldSite ? fieldSite->place : Place{};
      if (fieldSite && fieldSite->offsetPlace) return fieldSite->offsetPlace(offset);
      return fieldSite ? fieldSite->place : sites->top;
    };
    auto locate = [&](size_t offset) {
      if (!sites && !isBuiltin) return SourceLoc{"", 0, unsigned(offset + 1)};
      return placeAt(offset).loc;
    };
    expr::ParseResult result = expr::parse(text, role, spec.inputs, locate);
    exprNodes += result.nodes;
    if (result.errors.empty() && exprNodes > limits::kMaxSpecExprNodes) {
      result.errors.push_back({0, "the mask and score expressions have more than " +
                                      std::to_string(limits::kMaxSpecExprNodes) +
                                      " operands and operators together (" +
                                      std::to_string(exprNodes) + ")"});
      result.root = nullptr;
    }
    for (const expr::ParseError& error : result.errors) {
      Diagnostic diag = at(field, field + ": " + error.message);
      if (!sites && !isBuiltin) {
        // Builder: show the expression itself with a caret under the offending token.
        diag.sourceLine = text;
        diag.loc.col = unsigned(error.offset + 1);
      } else if (sites) {
        Place place = placeAt(error.offset);
        diag.loc = place.loc;
        diag.sourceLine = place.sourceLine;
      }
      if (isBuiltin) diag.message += " (in the builtin's definition '" + text + "')";
      diags.push_back(std::move(diag));
    }
    return result.root;
  }

  void checkMask(bool inputsOk) {
    MaskSpec& mask = spec.mask;
    if (skip("mask")) return;
    switch (mask.kind) {
    case MaskSpec::None: return;
    case MaskSpec::Causal: break;
    case MaskSpec::Window:
      if (mask.window < 1 || mask.window > INT32_MAX)
        return report(
            "mask", "mask: window must be in [1, 2147483647], got " + std::to_string(mask.window));
      break;
    case MaskSpec::Prefix:
      if (mask.prefix < 0 || mask.prefix > INT32_MAX)
        return report(
            "mask", "mask: prefix must be in [0, 2147483647], got " + std::to_string(mask.prefix));
      break;
    case MaskSpec::Document: {
      if (!inputsOk) return;
      const InputDecl* input = spec.findInput(mask.documentInput);
      if (!input)
        return report("mask", "mask: document ids input '" + mask.documentInput +
                                  "' is not declared under 'inputs:' (declare it as "
                                  "{dtype: i32, dims: [pos]} or [b, pos])");
      bool dimsOk = input->dims == std::vector<InputDim>{InputDim::Pos} ||
                    input->dims == std::vector<InputDim>{InputDim::B, InputDim::Pos};
      if (input->type != ScalarType::I32 || !dimsOk)
        return report("mask", "mask: document ids input '" + mask.documentInput +
                                  "' must be i32 with dims [pos] or [b, pos], got " +
                                  toString(input->type).str() + " " + dimsText(*input));
      break;
    }
    case MaskSpec::Expr:
      if (!inputsOk) return;
      mask.expr = typeCheck("mask", mask.exprText, expr::Role::Mask, /*isBuiltin=*/false);
      return;
    }
    mask.exprText = builtinExpressionText(mask, spec.inputs);
    mask.expr = typeCheck("mask", mask.exprText, expr::Role::Mask, /*isBuiltin=*/true);
  }

  void checkScore(bool inputsOk) {
    ScoreSpec& score = spec.score;
    if (skip("score")) return;
    switch (score.kind) {
    case ScoreSpec::None: return;
    case ScoreSpec::Softcap:
      if (!isNormalPositiveFloat(score.softcap))
        return report("score", std::string("score: softcap must be a positive number "
                                           "representable as a normal float32 (") +
                                   kNormalFloatRange + "), got " + formatNumber(score.softcap));
      break;
    case ScoreSpec::Alibi:
      if (!score.alibiSlopes.empty()) {
        if (!inputsOk) return;
        const InputDecl* input = spec.findInput(score.alibiSlopes);
        if (!input)
          return report("score", "score: alibi slopes input '" + score.alibiSlopes +
                                     "' is not declared under 'inputs:' (declare it as "
                                     "{dtype: f32, dims: [h]})");
        if (input->type != ScalarType::F32 || input->dims != std::vector<InputDim>{InputDim::H})
          return report("score", "score: alibi slopes input '" + score.alibiSlopes +
                                     "' must be f32 with dims [h], got " +
                                     toString(input->type).str() + " " + dimsText(*input));
      } else if (spec.headsQ < 1) {
        return;  // heads.q already reported; the standard slopes depend on it
      }
      break;
    case ScoreSpec::Expr:
      if (!inputsOk) return;
      score.expr = typeCheck("score", score.exprText, expr::Role::Score, /*isBuiltin=*/false);
      return;
    }
    score.exprText = builtinExpressionText(score, spec.headsQ);
    score.expr = typeCheck("score", score.exprText, expr::Role::Score, /*isBuiltin=*/true);
  }

  Spec& spec;
  const SpecSites* sites;
  Diagnostics& diags;
  unsigned exprNodes = 0;  // syntax nodes of the expressions checked so far (mask, then score)
};

}  // namespace

bool checkSpec(Spec& spec, const SpecSites* sites, Diagnostics& diags) {
  return Checker(spec, sites, diags).run();
}

}  // namespace detail

// ---- Builder ----

SpecBuilder::SpecBuilder(std::string name) { spec.name = std::move(name); }

SpecBuilder& SpecBuilder::headDim(int64_t d) {
  spec.headDim = d;
  return *this;
}
SpecBuilder& SpecBuilder::headDimV(int64_t d) {
  spec.headDimV = d;
  headDimVSet = true;
  return *this;
}
SpecBuilder& SpecBuilder::dtype(DType t) {
  spec.dtype = t;
  return *this;
}
SpecBuilder& SpecBuilder::heads(int64_t q, int64_t kv) {
  spec.headsQ = q;
  spec.headsKV = kv;
  headsKVSet = true;
  return *this;
}
SpecBuilder& SpecBuilder::scale(double s) {
  spec.scale = s;
  return *this;
}
SpecBuilder& SpecBuilder::causal(bool topLeft) {
  spec.mask = MaskSpec();
  spec.mask.kind = MaskSpec::Causal;
  spec.mask.topLeft = topLeft;
  return *this;
}
SpecBuilder& SpecBuilder::window(int64_t w) {
  spec.mask = MaskSpec();
  spec.mask.kind = MaskSpec::Window;
  spec.mask.window = w;
  return *this;
}
SpecBuilder& SpecBuilder::prefix(int64_t p) {
  spec.mask = MaskSpec();
  spec.mask.kind = MaskSpec::Prefix;
  spec.mask.prefix = p;
  return *this;
}
SpecBuilder& SpecBuilder::document(std::string input, bool causal) {
  spec.mask = MaskSpec();
  spec.mask.kind = MaskSpec::Document;
  spec.mask.documentInput = std::move(input);
  spec.mask.documentCausal = causal;
  return *this;
}
SpecBuilder& SpecBuilder::mask(std::string expression) {
  spec.mask = MaskSpec();
  spec.mask.kind = MaskSpec::Expr;
  spec.mask.exprText = std::move(expression);
  return *this;
}
SpecBuilder& SpecBuilder::softcap(double c) {
  spec.score = ScoreSpec();
  spec.score.kind = ScoreSpec::Softcap;
  spec.score.softcap = c;
  return *this;
}
SpecBuilder& SpecBuilder::alibi(std::string slopesInput) {
  spec.score = ScoreSpec();
  spec.score.kind = ScoreSpec::Alibi;
  spec.score.alibiSlopes = std::move(slopesInput);
  return *this;
}
SpecBuilder& SpecBuilder::score(std::string expression) {
  spec.score = ScoreSpec();
  spec.score.kind = ScoreSpec::Expr;
  spec.score.exprText = std::move(expression);
  return *this;
}
SpecBuilder& SpecBuilder::dropout(double p, int64_t rounds) {
  spec.dropout = p;
  spec.dropoutRounds = rounds;
  return *this;
}
SpecBuilder& SpecBuilder::input(std::string inputName, ScalarType type,
                                std::vector<InputDim> dims) {
  InputDecl decl;
  decl.name = std::move(inputName);
  decl.type = type;
  decl.dims = std::move(dims);
  spec.inputs.push_back(std::move(decl));
  return *this;
}

std::optional<Spec> SpecBuilder::build(Diagnostics& diags) const {
  Spec result = spec;
  if (!headDimVSet) result.headDimV = result.headDim;
  if (!headsKVSet) result.headsKV = result.headsQ;
  if (!detail::checkSpec(result, nullptr, diags)) return std::nullopt;
  return result;
}

}  // namespace attnc
