// The spec fuzzer's generator: a valid spec model drawn from docs/spec.md's field rules and the
// expression grammar (typed, so almost every expression type-checks), rendered to YAML in varying
// styles, then at most one mutation: a rule broken on purpose (invalid), YAML damage (verdict
// unknown, or invalid where the YAML rules say so), or a front-end limit exceeded (invalid, only
// when Limits::respect is off).
#include "SpecGen.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace attnc::fuzz {

const char* toString(Verdict verdict) {
  switch (verdict) {
  case Verdict::Valid: return "valid";
  case Verdict::Invalid: return "invalid";
  case Verdict::Unknown: return "unknown";
  }
  return "?";
}

namespace {

// Draws by integer arithmetic on mt19937_64's output only (its sequence is fixed by the standard),
// so a seed gives the same cases with every standard library.
class Rng {
public:
  explicit Rng(uint64_t seed) : engine(seed) {}
  uint64_t next() { return engine(); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : engine() % n; }
  int64_t range(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo) + 1)); }
  bool percent(unsigned p) { return below(100) < p; }
  template <class T> const T& pick(const std::vector<T>& items) {
    return items[below(items.size())];
  }
  // Sizes spread over orders of magnitude: a bit length first, then a value of that length.
  uint64_t logUniform(uint64_t lo, uint64_t hi) {
    auto bits = [](uint64_t v) { return v == 0 ? 0 : 64 - __builtin_clzll(v); };
    const int b = int(range(bits(lo), bits(hi)));
    const uint64_t from = std::max(lo, b == 0 ? 0 : uint64_t(1) << (b - 1));
    const uint64_t to = std::min(hi, b >= 64 ? ~uint64_t(0) : (uint64_t(1) << b) - 1);
    return from + below(to - from + 1);
  }

private:
  std::mt19937_64 engine;
};

// SplitMix64's finalizer: decorrelates the per-case seeds of neighbouring case numbers.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Input {
  std::string name;
  bool isF32 = false;
  std::vector<std::string> dims;  // "b" "h" "pos"
};

enum class Ty { Bool, Int, Float };

// Precedence levels as C's (docs/spec.md): a child binds looser than its parent gets parentheses.
enum Prec { kOr = 1, kAnd, kEquality, kRelational, kAdditive, kMultiplicative, kUnary, kPrimary };

struct Piece {
  std::string text;
  int prec = kPrimary;
};

// Typed random expressions. `leaves` bounds the operands (literals, variables, input reads and
// their indices), `depth` the tree's height (each operator, call, index and parenthesis a level),
// so generated expressions stay inside Limits when asked to.
class ExprGen {
public:
  ExprGen(Rng& rng, const std::vector<Input>& inputs, bool scoreRole, size_t maxDepth)
      : rng(rng), inputs(inputs), scoreRole(scoreRole), maxDepth(maxDepth) {}

  std::string generate(Ty type, size_t leaves) {
    space = rng.pick(std::vector<std::string>{" ", " ", "", "  "});
    return gen(type, std::max<size_t>(leaves, 1), 1).text;
  }
  size_t nodes = 0;  // syntax nodes made (operands, operators, calls)

private:
  Piece leaf(Ty type, size_t leaves, size_t depth) {
    ++nodes;
    switch (type) {
    case Ty::Bool:
      if (leaves >= 2 && depth + 1 < maxDepth) {
        --nodes;
        return binary(rng.pick(comparisons()), kRelational, Ty::Int, Ty::Int, 1, 1, depth);
      }
      return {rng.percent(50) ? "true" : "false"};
    case Ty::Int: {
      if (auto read = inputRead(false, leaves, depth)) return *read;
      if (rng.percent(55))
        return {rng.pick(
            std::vector<std::string>{"q", "k", "q", "k", "b", "h", "q_len", "kv_len"})};
      return {intLiteral()};
    }
    case Ty::Float:
      if (auto read = inputRead(true, leaves, depth)) return *read;
      if (scoreRole && rng.percent(60)) return {"score"};
      return {floatLiteral()};
    }
    return {"0"};
  }

  std::string intLiteral() {
    if (rng.percent(70)) return std::to_string(rng.below(rng.percent(50) ? 10 : 1000));
    return rng.pick(std::vector<std::string>{"0", "1", "2", "7", "8", "16", "64", "127", "128",
                                             "255", "256", "1024", "65535", "2147483647"});
  }

  std::string floatLiteral() {
    return rng.pick(std::vector<std::string>{"0.5", ".5", "1.0", "30.0", "1e-3", "2.5e1", "0.0",
                                             "0.125", "5e+2", "1E3", "1e-30", "3.4e38", "1.2e-38",
                                             "0.0625", "100.0", "1.5"});
  }

  // An input read `name[i, ...]` of the wanted type, when one is declared and the budget allows.
  std::optional<Piece> inputRead(bool f32, size_t leaves, size_t depth) {
    std::vector<const Input*> matching;
    for (const Input& input : inputs)
      if (input.isF32 == f32 && leaves >= 1 + input.dims.size() && depth + 4 < maxDepth)
        matching.push_back(&input);
    if (matching.empty() || rng.percent(65)) return std::nullopt;
    const Input& input = *rng.pick(matching);
    // A computed index costs up to three operands more than a plain one.
    const bool computedIndex = leaves >= 1 + 3 * input.dims.size();
    ++nodes;
    std::string text = input.name + "[";
    for (size_t i = 0; i < input.dims.size(); ++i) {
      ++nodes;
      std::string index;
      if (input.dims[i] == "b") index = "b";
      else if (input.dims[i] == "h") index = "h";
      else if (computedIndex && rng.percent(30))
        index = rng.pick(std::vector<std::string>{"k + 1", "q - 1", "kv_len - 1 - k",
                                                  "max(q - 1, 0)"});
      else
        index = rng.percent(50) ? "q" : "k";
      text += (i ? "," + space : "") + index;
    }
    return Piece{text + "]"};
  }

  static const std::vector<std::string>& comparisons() {
    static const std::vector<std::string> ops = {"<", "<=", ">", ">=", "==", "!="};
    return ops;
  }

  Piece paren(const Piece& piece) { return {"(" + piece.text + ")", kPrimary}; }

  Piece binary(const std::string& op, int prec, Ty left, Ty right, size_t leftLeaves,
               size_t rightLeaves, size_t depth) {
    ++nodes;
    Piece a = gen(left, leftLeaves, depth + 1);
    // The backward cannot differentiate a remainder by a score-dependent divisor and says so
    // (docs/pipeline.md): such a divisor is not generated.
    const bool scoreBefore = scoreRole;
    if (op == "%") scoreRole = false;
    Piece b = gen(right, rightLeaves, depth + 1);
    scoreRole = scoreBefore;
    const int opPrec = (op == "==" || op == "!=") ? kEquality : prec;
    if (a.prec < opPrec) a = paren(a);
    if (b.prec <= opPrec) b = paren(b);
    return {a.text + space + op + space + b.text, opPrec};
  }

  Piece call(const std::string& name, const std::vector<std::pair<Ty, size_t>>& args,
             size_t depth) {
    ++nodes;
    std::string text = name + "(";
    for (size_t i = 0; i < args.size(); ++i)
      text += (i ? "," + space : "") + gen(args[i].first, args[i].second, depth + 1).text;
    return {text + ")"};
  }

  Piece unary(const std::string& op, Ty type, size_t leaves, size_t depth) {
    ++nodes;
    Piece operand = gen(type, leaves, depth + 1);
    if (operand.prec < kUnary) operand = paren(operand);
    // "- -x", never "--x" (one token in C, two here: either way, not what a user writes).
    const bool needsSpace = !operand.text.empty() && (operand.text[0] == '-' ||
                                                      operand.text[0] == '!');
    return {op + (needsSpace ? " " : "") + operand.text, kUnary};
  }

  // Splits `leaves` into `parts` non-empty shares.
  std::vector<size_t> split(size_t leaves, size_t parts) {
    std::vector<size_t> shares(parts, 1);
    for (size_t rest = leaves - parts; rest > 0; --rest) ++shares[rng.below(parts)];
    return shares;
  }

  Piece gen(Ty type, size_t leaves, size_t depth) {
    if (type != Ty::Bool && leaves >= 2)
      if (auto read = inputRead(type == Ty::Float, leaves, depth)) return *read;
    if (leaves <= 1 || depth + 2 >= maxDepth) return leaf(type, leaves, depth);
    Piece piece = genOp(type, leaves, depth);
    if (rng.percent(4) && depth + 3 < maxDepth) piece = paren(piece);
    return piece;
  }

  Piece genOp(Ty type, size_t leaves, size_t depth) {
    const Ty number = rng.percent(50) ? Ty::Int : Ty::Float;
    switch (type) {
    case Ty::Int: {
      const uint64_t choice = rng.below(10);
      if (choice < 6) {
        auto s = split(leaves, 2);
        static const std::vector<std::pair<std::string, int>> ops = {
            {"+", kAdditive}, {"-", kAdditive}, {"*", kMultiplicative}, {"/", kMultiplicative},
            {"%", kMultiplicative}};
        const auto& op = rng.pick(ops);
        return binary(op.first, op.second, Ty::Int, Ty::Int, s[0], s[1], depth);
      }
      if (choice == 6) return unary("-", Ty::Int, leaves, depth);
      if (choice == 7) return call("abs", {{Ty::Int, leaves}}, depth);
      if (choice == 8 || leaves < 3) {
        auto s = split(leaves, 2);
        return call(rng.percent(50) ? "min" : "max", {{Ty::Int, s[0]}, {Ty::Int, s[1]}}, depth);
      }
      auto s = split(leaves, 3);
      return call("where", {{Ty::Bool, s[0]}, {Ty::Int, s[1]}, {Ty::Int, s[2]}}, depth);
    }
    case Ty::Float: {
      const uint64_t choice = rng.below(10);
      if (choice < 5) {
        auto s = split(leaves, 2);
        static const std::vector<std::pair<std::string, int>> ops = {
            {"+", kAdditive}, {"-", kAdditive}, {"*", kMultiplicative}, {"/", kMultiplicative},
            {"%", kMultiplicative}};
        const auto& op = rng.pick(ops);
        const bool floatLeft = rng.percent(50);
        return binary(op.first, op.second, floatLeft ? Ty::Float : number,
                      floatLeft ? number : Ty::Float, s[0], s[1], depth);
      }
      if (choice == 5) return unary("-", Ty::Float, leaves, depth);
      if (choice == 6)
        return call(rng.pick(std::vector<std::string>{"tanh", "exp", "exp2", "log", "sqrt"}),
                    {{number, leaves}}, depth);
      if (choice == 7) return call("abs", {{Ty::Float, leaves}}, depth);
      if (choice == 8 || leaves < 3) {
        auto s = split(leaves, 2);
        return call(rng.percent(50) ? "min" : "max", {{Ty::Float, s[0]}, {number, s[1]}}, depth);
      }
      auto s = split(leaves, 3);
      return call("where", {{Ty::Bool, s[0]}, {Ty::Float, s[1]}, {number, s[2]}}, depth);
    }
    case Ty::Bool: {
      const uint64_t choice = rng.below(10);
      auto s = split(leaves, 2);
      if (choice < 4)
        return binary(rng.pick(comparisons()), kRelational, number,
                      rng.percent(70) ? number : Ty::Int, s[0], s[1], depth);
      if (choice < 7)
        return binary(rng.percent(60) ? "&&" : "||", choice < 6 ? kAnd : kOr, Ty::Bool, Ty::Bool,
                      s[0], s[1], depth);
      if (choice == 7)
        return binary(rng.percent(50) ? "==" : "!=", kEquality, Ty::Bool, Ty::Bool, s[0], s[1],
                      depth);
      if (choice == 8) return unary("!", Ty::Bool, leaves, depth);
      if (leaves < 3) return unary("!", Ty::Bool, leaves, depth);
      auto t = split(leaves, 3);
      return call("where", {{Ty::Bool, t[0]}, {Ty::Bool, t[1]}, {Ty::Bool, t[2]}}, depth);
    }
    }
    return leaf(type, leaves, depth);
  }

  Rng& rng;
  const std::vector<Input>& inputs;
  bool scoreRole;
  size_t maxDepth;
  std::string space = " ";
};

// A top-level field: its key and everything after "key:" (" value" inline, "\n  ..." block).
struct Field {
  std::string key;
  std::string value;
};

std::string render(const std::vector<Field>& fields) {
  std::string text;
  for (const Field& field : fields) text += field.key + ":" + field.value + "\n";
  return text;
}

Field* find(std::vector<Field>& fields, const std::string& key) {
  for (Field& field : fields)
    if (field.key == key) return &field;
  return nullptr;
}

// Identifier characters for random names.
constexpr char kIdentChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";
constexpr size_t kIdentLetters = 53;  // the letters and '_' at the front of kIdentChars

std::string randomIdentifier(Rng& rng, size_t length) {
  std::string name(1, kIdentChars[rng.below(kIdentLetters)]);
  while (name.size() < length) name += kIdentChars[rng.below(sizeof(kIdentChars) - 1)];
  return name;
}

bool isReserved(const std::string& name) {
  static const std::vector<std::string> reserved = {
      "b",   "h",   "q",    "k",   "q_len", "kv_len", "score", "true", "false", "where",
      "tanh", "exp", "exp2", "log", "sqrt",  "abs",    "min",   "max"};
  return std::find(reserved.begin(), reserved.end(), name) != reserved.end();
}

// `0.` followed by the exact decimal digits of steps / 256 (dropout probabilities the kernels
// represent exactly).
std::string exactFraction256(uint64_t steps) {
  std::string digits = std::to_string(steps * 390625);  // 1/256 = 0.00390625
  digits = std::string(8 - std::min<size_t>(8, digits.size()), '0') + digits;
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return "0." + digits;
}

class CaseBuilder {
public:
  CaseBuilder(Rng& rng, const Limits& limits) : rng(rng), limits(limits) {}

  Case build() {
    makeModel();
    Case result;
    result.expected = Verdict::Valid;
    result.recipe = "valid";
    const uint64_t kind = rng.below(100);
    if (!limits.respect && kind < 12) {
      exceedLimit(result);
      return result;
    }
    if (kind < 45) {
      renderFields();
      if (kind >= 40 && kind < 43) wideScore(result);
      result.text = render(fields);
      if (kind >= 43) longComment(result);
      return result;
    }
    if (kind < 80) {
      renderFields();
      // A rule that writes the whole text (a YAML error, a non-mapping) sets textSet.
      breakRule(result);
      if (!textSet) result.text = render(fields);
      return result;
    }
    renderFields();
    damageYaml(result);
    return result;
  }

private:
  // ---- The valid model ----

  void makeModel() {
    name = rng.percent(40) ? rng.pick(std::vector<std::string>{
                                 "attn", "k", "_", "x1", "int", "float", "main", "Variant",
                                 "threadIdx", "kernel", "__global__", "half", "auto", "attnc",
                                 "_0", "fwd", "operator_", "Params"})
                           : randomIdentifier(rng, rng.logUniform(1, limits.maxNameLength));
    headDim = 8 * rng.range(1, 32);
    if (rng.percent(30)) headDimV = 8 * rng.range(1, 32);
    const std::vector<int64_t> headCounts = {1, 2, 3, 4, 6, 8, 12, 16, 32, 40, 64, 128};
    headsQ = rng.percent(2) ? 2147483647 : rng.pick(headCounts);
    std::vector<int64_t> divisors;
    for (int64_t d : headCounts)
      if (headsQ % d == 0) divisors.push_back(d);
    if (headsQ == 2147483647) divisors = {1, 2147483647};
    headsKV = rng.percent(40) ? headsQ : rng.pick(divisors);

    const size_t count = rng.percent(50) ? 0 : rng.range(1, 4);
    for (size_t i = 0; i < count; ++i) {
      Input input;
      do {
        input.name = rng.percent(50)
                         ? rng.pick(std::vector<std::string>{
                               "doc", "slopes", "bias", "x", "int", "float", "this", "Variant",
                               "blockIdx", "exp2f", "scale", "mask", "i", "B", "Q", "O", "lse",
                               "seed", "offset", "dropout", "params", "tile", "p", "s", "m"})
                         : randomIdentifier(rng, rng.logUniform(1, limits.maxNameLength));
      } while (isReserved(input.name) || hasInput(input.name));
      input.isF32 = rng.percent(50);
      std::vector<std::string> dims = {"b", "h", "pos"};
      std::vector<std::string> chosen;
      for (const std::string& dim : dims)
        if (rng.percent(50)) chosen.push_back(dim);
      if (chosen.empty()) chosen.push_back(rng.pick(dims));
      if (rng.percent(30)) std::reverse(chosen.begin(), chosen.end());
      input.dims = chosen;
      inputs.push_back(input);
    }
  }

  bool hasInput(const std::string& inputName) const {
    for (const Input& input : inputs)
      if (input.name == inputName) return true;
    return false;
  }

  const Input* findInput(bool f32, const std::vector<std::vector<std::string>>& dims) const {
    for (const Input& input : inputs)
      if (input.isF32 == f32 && std::find(dims.begin(), dims.end(), input.dims) != dims.end())
        return &input;
    return nullptr;
  }

  // The generator's tree height: half the limit, since the parentheses it adds for precedence
  // may count as levels of their own.
  size_t exprDepth() const { return limits.maxDepth / 2; }

  // An expression's operand budget: mostly small, now and then up to the operand limit.
  size_t expressionLeaves() {
    const uint64_t roll = rng.below(100);
    const size_t cap = std::min<size_t>(limits.maxOperands, nodeBudget / 2);
    if (roll < 70) return std::min<size_t>(cap, rng.range(1, 8));
    if (roll < 95) return std::min<size_t>(cap, rng.range(9, 40));
    return std::min<size_t>(cap, rng.range(41, 256));
  }

  std::string quoteExpression(const std::string& expr) {
    const bool plainSafe = !expr.empty() && (std::isalnum((unsigned char)expr[0]) ||
                                             expr[0] == '_' || expr[0] == '(');
    const uint64_t style = rng.below(10);
    if (style < 3 && plainSafe) return " " + expr;
    if (style < 6) return " \"" + expr + "\"";
    if (style < 8) return " '" + expr + "'";
    return std::string(rng.percent(50) ? " |" : " >-") + "\n  " + expr;
  }

  std::string flowOrBlock(const std::vector<std::pair<std::string, std::string>>& entries,
                          const std::string& indent) {
    if (rng.percent(60)) {
      std::string text = " {";
      for (size_t i = 0; i < entries.size(); ++i)
        text += (i ? ", " : "") + entries[i].first + ": " + entries[i].second;
      return text + "}";
    }
    std::string text;
    for (const auto& [key, value] : entries) text += "\n" + indent + key + ": " + value;
    return text;
  }

  std::string dimsText(const std::vector<std::string>& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + dims[i];
    return text + "]";
  }

  void renderFields() {
    fields.clear();
    fields.push_back({"name", " " + name});
    fields.push_back({"head_dim", " " + std::to_string(headDim)});
    if (headDimV) fields.push_back({"head_dim_v", " " + std::to_string(*headDimV)});
    if (rng.percent(60)) fields.push_back({"dtype", rng.percent(50) ? " bf16" : " fp16"});
    if (headsKV == headsQ && rng.percent(50))
      fields.push_back({"heads", " " + std::to_string(headsQ)});
    else if (headsKV == headsQ && rng.percent(50))
      fields.push_back({"heads", flowOrBlock({{"q", std::to_string(headsQ)}}, "  ")});
    else
      fields.push_back({"heads", flowOrBlock({{"q", std::to_string(headsQ)},
                                              {"kv", std::to_string(headsKV)}}, "  ")});
    if (rng.percent(40))
      fields.push_back({"scale", " " + rng.pick(std::vector<std::string>{
                                          "auto", "0.125", "1", "0.088388", "2", "1e-3",
                                          "1e-30", "1e30", "3e38", ".5", "100", "1E-2"})});
    nodeBudget = 400;  // below the front end's 512 syntax nodes over mask and score together
    addMask();
    addScore();
    if (rng.percent(25)) {
      const std::string p = rng.percent(60) ? exactFraction256(rng.range(1, 255))
                                            : rng.pick(std::vector<std::string>{
                                                  "0", "0.1", "0.5", "0.3", "0.002", "0.99"});
      if (rng.percent(50))
        fields.push_back({"dropout", " " + p});
      else
        fields.push_back({"dropout", flowOrBlock({{"p", p}, {"rounds", std::to_string(
                                                                 rng.range(7, 10))}}, "  ")});
    }
    if (!inputs.empty()) {
      std::string text;
      const bool flow = rng.percent(30);
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Input& input = inputs[i];
        const std::string dtype = input.isF32 ? "f32" : "i32";
        if (flow) {
          text += std::string(i ? ", " : " {") + input.name + ": {dtype: " + dtype +
                  ", dims: " + dimsText(input.dims) + "}";
        } else if (rng.percent(50)) {
          text += "\n  " + input.name + ": {dtype: " + dtype + ", dims: " +
                  dimsText(input.dims) + "}";
        } else {
          text += "\n  " + input.name + ":\n    dtype: " + dtype + "\n    dims:";
          for (const std::string& dim : input.dims) text += "\n      - " + dim;
        }
      }
      if (flow) text += "}";
      fields.push_back({"inputs", text});
    }
    // Field order is free; the parser must not care.
    for (size_t i = fields.size(); i > 1; --i) std::swap(fields[i - 1], fields[rng.below(i)]);
  }

  void addMask() {
    const uint64_t kind = rng.below(12);
    if (kind == 0) return;
    std::string value;
    if (kind == 1) value = " none";
    else if (kind == 2) value = " causal";
    else if (kind == 3)
      value = flowOrBlock({{"causal", rng.percent(50) ? "top_left" : "bottom_right"}}, "  ");
    else if (kind == 4)
      value = flowOrBlock({{"window", std::to_string(rng.logUniform(1, 2147483647))}}, "  ");
    else if (kind == 5)
      value = flowOrBlock({{"prefix", std::to_string(rng.logUniform(0, 2147483647))}}, "  ");
    else if (kind == 6) {
      const Input* doc = findInput(false, {{"pos"}, {"b", "pos"}});
      if (!doc) return addMask();
      if (rng.percent(50)) value = flowOrBlock({{"document", doc->name}}, "  ");
      else value = flowOrBlock({{"document", doc->name}, {"causal", "true"}}, "  ");
    } else {
      ExprGen gen(rng, inputs, /*scoreRole=*/false, exprDepth());
      value = quoteExpression(gen.generate(Ty::Bool, expressionLeaves()));
      nodeBudget -= std::min(nodeBudget, gen.nodes);
    }
    fields.push_back({"mask", value});
  }

  void addScore() {
    const uint64_t kind = rng.below(10);
    if (kind == 0) return;
    std::string value;
    if (kind == 1) value = " none";
    else if (kind == 2)
      value = flowOrBlock({{"softcap", rng.pick(std::vector<std::string>{
                                           "30", "30.0", "1e-3", "50", "1e30", "0.5"})}}, "  ");
    else if (kind == 3) value = " alibi";
    else if (kind == 4) {
      const Input* slopes = findInput(true, {{"h"}});
      if (!slopes) return addScore();
      value = flowOrBlock({{"alibi", slopes->name}}, "  ");
    } else {
      ExprGen gen(rng, inputs, /*scoreRole=*/true, exprDepth());
      value = quoteExpression(gen.generate(rng.percent(85) ? Ty::Float : Ty::Int,
                                           std::max<size_t>(1, expressionLeaves())));
    }
    fields.push_back({"score", value});
  }

  // A score of many terms that each depend on the score: valid, and a register-hungry
  // epilogue for ptxas (47 terms at head_dim 64 exhausted sm_90a's registers).
  void wideScore(Case& result) {
    // Two syntax nodes a term, within what the mask left of the node budget; a chain of n terms
    // nests n levels, its operand among them (the front end's depth limit).
    const size_t cap = std::min<size_t>({100, nodeBudget / 2, limits.maxDepth});
    const size_t terms = rng.range(2, std::max<size_t>(2, cap));
    std::string sum = "score";
    for (size_t i = 1; i < terms; ++i) sum += rng.percent(50) ? "+score" : "-score";
    setValue("score", " \"" + sum + "\"");
    result.recipe = "valid: a score of " + std::to_string(terms) + " terms";
  }

  // A comment line of some length: valid while the whole stays under the size limit.
  void longComment(Case& result) {
    const size_t length = rng.logUniform(1, limits.maxSpecBytes / 2);
    result.text = "# " + std::string(length, 'c') + "\n" + result.text;
    result.recipe = "valid: a comment of " + std::to_string(length) + " bytes";
  }

  // ---- One rule broken on purpose ----

  void setValue(const std::string& key, const std::string& value) {
    if (Field* field = find(fields, key)) field->value = value;
    else fields.push_back({key, value});
  }

  void breakRule(Case& result) {
    result.expected = Verdict::Invalid;
    struct Rule {
      const char* what;
      std::function<void()> apply;
    };
    const std::vector<Rule> rules = {
        {"head_dim out of rule", [&] { setValue("head_dim", " " + rng.pick(std::vector<std::string>{
            "0", "4", "100", "264", "-8", "1099511627776", "257", "12"})); }},
        {"head_dim_v out of rule", [&] { setValue("head_dim_v", " " + rng.pick(
            std::vector<std::string>{"0", "7", "300", "-64", "2147483648"})); }},
        {"head_dim not an integer", [&] { setValue("head_dim", " " + rng.pick(
            std::vector<std::string>{"64.0", "abc", "[64]", "{a: 1}", "\"\"", "0x40", "6e1"})); }},
        {"dtype unknown", [&] { setValue("dtype", " " + rng.pick(std::vector<std::string>{
            "f32", "fp8", "BF16", "\"\"", "16", "[bf16]", "bf16 fp16"})); }},
        {"heads out of rule", [&] { setValue("heads", " " + rng.pick(std::vector<std::string>{
            "0", "-1", "{q: 8, kv: 3}", "{q: 4, kv: 8}", "{q: 8, kv: 0}", "{kv: 2}",
            "2147483648", "{q: 8, kv: 2, x: 1}", "abc", "[8]"})); }},
        {"scale out of range", [&] { setValue("scale", " " + rng.pick(std::vector<std::string>{
            "0", "-1", "inf", "nan", "0x10", "1e39", "1e308", "1e-320", "1e-46", "auto2",
            "-0.0", "1e400"})); }},
        {"dropout out of rule", [&] { setValue("dropout", " " + rng.pick(std::vector<std::string>{
            "1", "1.5", "-0.1", "0.001", "0.999", "{p: 0.1, rounds: 6}", "{p: 0.1, rounds: 11}",
            "{rounds: 7}", "{p: 0.1, rounds: 7.5}", "true"})); }},
        {"mask out of rule", [&] { setValue("mask", " " + rng.pick(std::vector<std::string>{
            "causa", "{window: 0}", "{window: -1}", "{prefix: -1}", "{window: 3, prefix: 2}",
            "{causal: sideways}", "{document: nosuch}", "{window: 1.5}", "[causal]", "{}"})); }},
        {"score out of rule", [&] { setValue("score", " " + rng.pick(std::vector<std::string>{
            "{softcap: 0}", "{softcap: -30}", "{alibi: nosuch}", "softcap",
            "{softcap: 30, alibi: x}", "[alibi]"})); }},
        {"document names a wrong input", [&] {
            setValue("inputs", " {d: {dtype: f32, dims: [pos]}, e: {dtype: i32, dims: [h]}}");
            setValue("mask", rng.percent(50) ? " {document: d}" : " {document: e}"); }},
        {"alibi names a wrong input", [&] {
            setValue("inputs", " {s: {dtype: i32, dims: [h]}, t: {dtype: f32, dims: [pos]}}");
            setValue("score", rng.percent(50) ? " {alibi: s}" : " {alibi: t}"); }},
        {"input out of rule", [&] { setValue("inputs", " " + rng.pick(std::vector<std::string>{
            "{x: {dtype: i1, dims: [pos]}}", "{x: {dtype: f64, dims: [pos]}}",
            "{x: {dtype: i32, dims: []}}", "{x: {dtype: i32, dims: [pos, pos]}}",
            "{q: {dtype: i32, dims: [pos]}}", "{score: {dtype: f32, dims: [h]}}",
            "{tanh: {dtype: f32, dims: [h]}}", "{1x: {dtype: i32, dims: [b]}}",
            "{a-b: {dtype: i32, dims: [b]}}", "{x: {dtype: i32}}", "{x: {dims: [b]}}",
            "{x: {dtype: i32, dims: [t]}}", "{x: {dtype: i32, dims: [b], grad: 1}}",
            "{x: {dtype: i32, dims: [b]}, x: {dtype: f32, dims: [h]}}", "[x]"})); }},
        {"more inputs than the kernels take", [&] {
            std::string text = " {";
            const int64_t count = rng.range(9, 16);
            for (int64_t i = 0; i < count; ++i)
              text += (i ? ", in" : "in") + std::to_string(i) + ": {dtype: f32, dims: [h]}";
            setValue("inputs", text + "}");
            std::string sum = "score";
            for (int64_t i = 0; i < count; ++i) sum += " + in" + std::to_string(i) + "[h]";
            setValue("score", " \"" + sum + "\"");
            setValue("mask", " causal"); }},
        {"name not an identifier", [&] { setValue("name", " " + rng.pick(std::vector<std::string>{
            "1abc", "a-b", "\"\"", "\"a b\"", "\"\xc3\xa9t\xc3\xa9\"", "[x]", "\"a.b\"",
            "\"x\\ty\""})); }},
        {"missing required field", [&] {
            const std::string key = rng.pick(std::vector<std::string>{"name", "head_dim", "heads"});
            fields.erase(std::remove_if(fields.begin(), fields.end(),
                                        [&](const Field& f) { return f.key == key; }),
                         fields.end()); }},
        {"unknown field", [&] { fields.insert(fields.begin() + long(rng.below(fields.size() + 1)),
            Field{rng.pick(std::vector<std::string>{"head_dims", "foo", "Name", "mask_", "dtyp",
                                                    "\"\"", "inputs2"}), " 1"}); }},
        {"duplicate field", [&] {
            const Field copy = fields[rng.below(fields.size())];
            fields.insert(fields.begin() + long(rng.below(fields.size() + 1)), copy); }},
        {"alias", [&] {
            setValue("head_dim", " &d " + std::to_string(headDim));
            setValue("head_dim_v", " *d"); }},
        {"second document", [&] {
            result.text = render(fields) + "---\nname: again\n";
            textSet = true; }},
        {"not a mapping", [&] { textSet = true; result.text = rng.pick(std::vector<std::string>{
            "", "# only a comment\n", "- name: x\n", "just text\n", "[1, 2]\n", "~\n",
            "\"name: x\"\n"}); }},
        {"YAML syntax error", [&] { textSet = true; result.text = render(fields) + rng.pick(
            std::vector<std::string>{"mask: \"q >= k\n", "heads: {q: 8\n", "x: [1, 2\n",
                                     "  bad indent: 1\n", "a: b: c\n", "- x\n", "mask: 'q\n"}); }},
        {"expression error", [&] { breakExpression(); }},
    };
    const Rule& rule = rules[rng.below(rules.size())];
    rule.apply();
    result.recipe = std::string("invalid: ") + rule.what;
  }

  // A type or syntax error inside an otherwise generated expression.
  void breakExpression() {
    const bool inMask = rng.percent(50);
    ExprGen gen(rng, inputs, !inMask, exprDepth());
    const std::string good = gen.generate(inMask ? Ty::Bool : Ty::Float, rng.range(1, 12));
    const std::string number = inMask ? "q" : "score";
    const std::vector<std::string> bad = {
        number + " + (k > 1)",                       // a boolean mixed with a number
        "(" + good + ") && 3",                       // && on a number
        inMask ? "score > 0" : "score + nosuch",     // score in a mask / unknown identifier
        "nosuch[q] > 0",                             // undeclared input
        "frob(q) > 0",                               // unknown function
        "tanh(q, k) > 0",                            // wrong argument count
        "where(q > k, 1) > 0",                       // where's argument count
        "q = k",                                     // '=' for '=='
        "q > k ? 1 : 0",                             // ?:
        "(" + good,                                  // unbalanced
        good + ")",                                  // trailing text
        good + " q",                                 // trailing text
        "q + 2147483648 > 0",                        // i32 literal out of range
        "1e39 > score",                              // f32 literal out of range
        "1.5.2 > q",                                 // malformed number
        "2k > q",                                    // malformed number
        "q @ k",                                     // unknown character
        "",                                          // empty
        "   ",                                       // blank
        inMask ? "q + k" : "q > k",                  // mask not i1 / score not a number
        "where(q, 1, 2) > 0",                        // where's condition not i1
        "!q",                                        // ! on a number
        "abs(q > k) > 0",                            // abs of a boolean
        "min(q > k, 1) > 0",                         // min of a boolean
        "where(q > k, 1, q > 0)",                    // where mixing number and boolean
        "q[0] > 0",                                  // an index variable indexed
        "q(0) > 0",                                  // an index variable called
    };
    std::string expr = rng.pick(bad);
    // In a score, a mask-like boolean text is itself an error ("score must be a number"), as
    // every entry above is in a mask; inMask picks which field the text goes to.
    if (!inputs.empty() && rng.percent(30)) {
      const Input& input = rng.pick(inputs);
      std::string tooMany = "q";
      for (size_t i = 0; i < input.dims.size(); ++i) tooMany += ", q";
      expr = rng.pick(std::vector<std::string>{
          input.name + " > 0",                      // used without indices
          input.name + "(q) > 0",                   // called
          input.name + "[" + tooMany + "] > 0",     // one index too many
          "where(" + input.name + "[1.5" + std::string(input.dims.size() > 1 ? ", q" : "") +
              "] > 0, true, false)"});              // a float index
    }
    setValue(inMask ? "mask" : "score", " \"" + expr + "\"");
  }

  // ---- YAML damage ----

  void damageYaml(Case& result) {
    std::string text = render(fields);
    result.expected = Verdict::Unknown;
    switch (rng.below(12)) {
    case 0: {
      const size_t at = rng.below(text.size());
      result.recipe = "yaml: truncated at byte " + std::to_string(at);
      text.resize(at);
      break;
    }
    case 1: {
      static const std::vector<std::string> odd = {
          std::string(1, '\0'), "\xff", "\xfe\xff", "\t", "\r", "\x01", "\x7f", "\xc3",
          "\xe2\x80\xae", "\xef\xbb\xbf", "\\", "%", "@", "`", "\x1b[0m"};
      const size_t count = rng.range(1, 4);
      for (size_t i = 0; i < count; ++i)
        text.insert(rng.below(text.size() + 1), rng.pick(odd));
      result.recipe = "yaml: odd bytes inserted";
      break;
    }
    case 2: {
      const size_t at = rng.below(text.size());
      text[at] = char(rng.below(256));
      result.recipe = "yaml: byte " + std::to_string(at) + " replaced";
      break;
    }
    case 3:
      text = "\xef\xbb\xbf" + text;
      result.recipe = "yaml: byte order mark";
      break;
    case 4: {
      std::string crlf;
      for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
      text = crlf;
      result.recipe = "yaml: CRLF line ends";
      break;
    }
    case 5: {
      Field& field = fields[rng.below(fields.size())];
      if (!field.value.empty() && field.value[0] == ' ')
        field.value = " " + rng.pick(std::vector<std::string>{"&a", "!!str", "!!int", "!local",
                                                              "&anchor !!str"}) + field.value;
      text = render(fields);
      result.recipe = "yaml: anchor or tag on " + field.key;
      break;
    }
    case 6:
      text += rng.percent(50) ? "...\n" : "---\n";
      result.recipe = "yaml: document marker at the end";
      break;
    case 7:
      nest(text, result);
      break;
    case 8: {
      // A long value where a short one belongs: a wrong value, whatever its length.
      const size_t length = rng.logUniform(1, limits.respect ? limits.maxSpecBytes / 4 : 400000);
      setValue("dtype", " " + std::string(length, 'x'));
      text = render(fields);
      result.expected = text.size() <= limits.maxSpecBytes || !limits.respect
                            ? Verdict::Invalid : Verdict::Unknown;
      result.recipe = "yaml: dtype of " + std::to_string(length) + " characters";
      break;
    }
    case 9: {
      // Tabs where YAML wants spaces, and trailing spaces.
      std::string tabbed;
      for (size_t i = 0; i < text.size(); ++i)
        tabbed += (text[i] == ' ' && (i == 0 || text[i - 1] == '\n')) ? '\t' : text[i];
      text = tabbed;
      result.recipe = "yaml: tabs in indentation";
      break;
    }
    case 10:
      text = "%YAML 1.2\n---\n" + text;
      result.recipe = "yaml: directive";
      break;
    default: {
      // The comment and spacing forms YAML allows: the spec stays valid.
      // A block scalar's content line would take the comment as text: it gets none.
      std::string spaced;
      bool blockContent = false;
      for (llvm::StringRef rest = text; !rest.empty();) {
        auto [line, tail] = rest.split('\n');
        spaced += line.str() + (blockContent ? "\n" : "   # note\n");
        blockContent = line.ends_with("|") || line.ends_with(">-");
        rest = tail;
      }
      text = "# spec\n\n" + spaced + "\n\n";
      result.expected = Verdict::Valid;
      result.recipe = "yaml: comments and blank lines";
      break;
    }
    }
    result.text = text;
  }

  // A field's value replaced by nesting of one YAML kind (a wrong type at any depth).
  void nest(std::string& text, Case& result) {
    // Within limits: the front end's YAML nesting limit counts the top-level mapping too.
    // Past them: half the time as deep as LLVM's recursive YAML parser was seen to overflow its
    // stack (between 200,000 and 400,000 levels of `? - `), the rest spread over every order of
    // magnitude.
    const size_t depth = limits.respect   ? rng.range(1, 12)
                         : rng.percent(50) ? rng.range(100000, 400000)
                                           : rng.logUniform(1, 400000);
    std::string value;
    const uint64_t kind = rng.below(7);
    const char* kinds[] = {"flow lists", "flow mappings", "block lists", "complex keys",
                           "block mappings", "mixed flow", "mixed block"};
    switch (kind) {
    case 0: value = " " + std::string(depth, '[') + "1" + std::string(depth, ']'); break;
    case 1: {
      for (size_t i = 0; i < depth; ++i) value += "{a: ";
      value = " " + value + "1" + std::string(depth, '}');
      break;
    }
    case 2: {
      value = "\n  ";
      for (size_t i = 0; i < depth; ++i) value += "- ";
      value += "1";
      break;
    }
    case 3: {
      value = "\n  ";
      for (size_t i = 0; i < depth; ++i) value += "? ";
      value += "x";
      break;
    }
    case 4: {
      // Each level indents one more space: the text grows with the square of the depth.
      const size_t levels = std::min<size_t>(depth, 1400);
      for (size_t i = 0; i < levels; ++i) value += "\n" + std::string(i + 1, ' ') + "a:";
      value += " 1";
      break;
    }
    case 6: {
      // Complex keys holding lists holding complex keys: `? - ? - x`.
      value = "\n  ";
      for (size_t i = 0; i < depth; ++i) value += i % 2 ? "- " : "? ";
      value += "x";
      break;
    }
    default: {
      for (size_t i = 0; i < depth; ++i) value += i % 2 ? "{a: " : "[";
      value = " " + value + "1";
      for (size_t i = depth; i > 0; --i) value += (i - 1) % 2 ? "}" : "]";
    }
    }
    const std::string key = rng.pick(std::vector<std::string>{"scale", "mask", "heads", "dtype"});
    setValue(key, value);
    text = render(fields);
    result.expected = Verdict::Invalid;
    result.recipe = "yaml: " + key + " holds " + kinds[kind] + " nested " + std::to_string(depth) +
                    " deep";
  }

  // ---- Past the front end's limits (only with Limits::respect off) ----

  void exceedLimit(Case& result) {
    renderFields();
    result.expected = Verdict::Invalid;
    const uint64_t kind = rng.below(9);
    const size_t operands = rng.logUniform(limits.maxOperands + 1, 40000);
    const size_t depth = rng.logUniform(limits.maxDepth + 1, 100000);
    auto chain = [&](const std::string& term, const std::string& op, size_t count) {
      std::string text;
      text.reserve(count * (term.size() + op.size()));
      for (size_t i = 0; i < count; ++i) text += (i ? op : "") + term;
      return text;
    };
    switch (kind) {
    case 0:
      setValue("mask", " \"k <= " + chain("q", "+", operands) + "\"");
      result.recipe = "limit: mask k <= q+q+... of " + std::to_string(operands) + " operands";
      break;
    case 1:
      setValue("mask", " \"" + chain("q >= k", " && ", operands / 2) + "\"");
      result.recipe = "limit: mask a && b && ... of " + std::to_string(operands / 2) + " terms";
      break;
    case 2:
      setValue("score", " \"" + chain("score", "+", operands) + "\"");
      result.recipe = "limit: score+score+... of " + std::to_string(operands) + " operands";
      break;
    case 3:
      setValue("mask", " \"" + std::string(depth, '(') + "q >= k" + std::string(depth, ')') +
                           "\"");
      result.recipe = "limit: mask in " + std::to_string(depth) + " parentheses";
      break;
    case 4:
      setValue("score", " \"" + chain("-", " ", depth) + " score\"");
      result.recipe = "limit: score under " + std::to_string(depth) + " unary minuses";
      break;
    case 5: {
      std::string text;
      for (size_t i = 0; i < depth; ++i) text += "where(q > k, ";
      text += "score";
      for (size_t i = 0; i < depth; ++i) text += ", score)";
      setValue("score", " \"" + text + "\"");
      result.recipe = "limit: where() nested " + std::to_string(depth) + " deep";
      break;
    }
    case 6: {
      const size_t length = rng.logUniform(limits.maxNameLength + 1, 100000);
      setValue("name", " " + randomIdentifier(rng, length));
      result.recipe = "limit: name of " + std::to_string(length) + " characters";
      break;
    }
    case 7: {
      const size_t length = rng.logUniform(limits.maxNameLength + 1, 100000);
      const std::string inputName = randomIdentifier(rng, length);
      setValue("inputs", " {" + inputName + ": {dtype: f32, dims: [h]}}");
      setValue("score", " \"score + " + inputName + "[h]\"");
      result.recipe = "limit: input name of " + std::to_string(length) + " characters";
      break;
    }
    default: {
      const size_t extra = rng.logUniform(1, 4 << 20);
      result.text = "# " + std::string(limits.maxSpecBytes + extra, 'c') + "\n" + render(fields);
      result.recipe = "limit: spec of " + std::to_string(result.text.size()) + " bytes";
      return;
    }
    }
    result.text = render(fields);
  }

  Rng& rng;
  const Limits& limits;
  std::string name;
  int64_t headDim = 64;
  std::optional<int64_t> headDimV;
  int64_t headsQ = 1, headsKV = 1;
  std::vector<Input> inputs;
  std::vector<Field> fields;
  size_t nodeBudget = 400;
  bool textSet = false;
};

}  // namespace

Case SpecGenerator::generate(uint64_t index) {
  Rng rng(mix(seed ^ mix(index)));
  return CaseBuilder(rng, limits).build();
}

}  // namespace attnc::fuzz
