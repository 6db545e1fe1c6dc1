// Lexer, recursive-descent parser (C precedence) and type checker for mask and score expressions.
// Parsing builds an untyped syntax tree; checking turns it into the typed expr::Node tree, so type
// errors can all be collected while a syntax error stops at the first one (recovering from it would
// mostly invent follow-on errors).
#include "compiler/Spec/Expr.h"
#include "compiler/Spec/Limits.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace attnc::expr {

namespace {

constexpr llvm::StringLiteral kIndexVars[] = {"b", "h", "q", "k", "q_len", "kv_len"};

struct FuncInfo {
  llvm::StringLiteral name;
  Func func;
  unsigned arity;
};
constexpr FuncInfo kFuncs[] = {
    {"where", Func::Where, 3}, {"tanh", Func::Tanh, 1}, {"exp", Func::Exp, 1},
    {"exp2", Func::Exp2, 1},   {"log", Func::Log, 1},   {"sqrt", Func::Sqrt, 1},
    {"abs", Func::Abs, 1},     {"min", Func::Min, 2},   {"max", Func::Max, 2},
};

const FuncInfo* findFunc(llvm::StringRef name) {
  for (const FuncInfo& info : kFuncs)
    if (info.name == name) return &info;
  return nullptr;
}

bool isIndexVar(llvm::StringRef name) {
  for (llvm::StringRef var : kIndexVars)
    if (var == name) return true;
  return false;
}

// ---- Lexer ----

enum class Tok { Int, Float, Ident, Punct, End, Error };

struct Token {
  Tok kind = Tok::End;
  llvm::StringRef text;
  size_t offset = 0;
};

class Lexer {
public:
  explicit Lexer(llvm::StringRef text) : text(text) {}

  Token next() {
    while (pos < text.size() && llvm::isSpace(text[pos])) ++pos;
    Token tok;
    tok.offset = pos;
    if (pos >= text.size()) {
      tok.kind = Tok::End;
      return tok;
    }
    char c = text[pos];
    if (llvm::isAlpha(c) || c == '_') {
      size_t end = pos;
      while (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_')) ++end;
      return take(Tok::Ident, end);
    }
    if (llvm::isDigit(c) || (c == '.' && pos + 1 < text.size() && llvm::isDigit(text[pos + 1])))
      return lexNumber();
    static constexpr llvm::StringLiteral twoChar[] = {"<=", ">=", "==", "!=", "&&", "||"};
    for (llvm::StringRef op : twoChar)
      if (text.substr(pos).starts_with(op)) return take(Tok::Punct, pos + 2);
    if (llvm::StringRef("+-*/%<>!()[],").contains(c)) return take(Tok::Punct, pos + 1);
    return take(Tok::Error, pos + 1);
  }

private:
  Token take(Tok kind, size_t end) {
    Token tok{kind, text.slice(pos, end), pos};
    pos = end;
    return tok;
  }

  Token lexNumber() {
    size_t end = pos;
    bool isFloat = false;
    while (end < text.size() && llvm::isDigit(text[end])) ++end;
    if (end < text.size() && text[end] == '.') {
      isFloat = true;
      ++end;
      while (end < text.size() && llvm::isDigit(text[end])) ++end;
    }
    if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
      isFloat = true;
      ++end;
      if (end < text.size() && (text[end] == '+' || text[end] == '-')) ++end;
      if (end >= text.size() || !llvm::isDigit(text[end])) return malformed(end);
      while (end < text.size() && llvm::isDigit(text[end])) ++end;
    }
    // "2k" or "1.5.2" is a typo, not a number followed by a name.
    if (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_' || text[end] == '.'))
      return malformed(end);
    return take(isFloat ? Tok::Float : Tok::Int, end);
  }

  Token malformed(size_t end) {
    while (end < text.size() && (llvm::isAlnum(text[end]) || text[end] == '_' || text[end] == '.'))
      ++end;
    return take(Tok::Error, end);
  }

  llvm::StringRef text;
  size_t pos = 0;
};

// ---- Untyped syntax tree ----

struct Syntax {
  enum SKind { Int, Float, Bool, Ident, Index, Call, Unary, Binary } kind;
  size_t offset = 0;
  std::string name;
  int64_t intValue = 0;
  double floatValue = 0;
  bool boolValue = false;
  Op op = Op::Add;
  // Levels of the subtree rooted here (a leaf is 1): what a recursive walk of it descends.
  unsigned height = 1;
  std::vector<std::unique_ptr<Syntax>> args;
};
using SyntaxPtr = std::unique_ptr<Syntax>;

// Reported once; the parser unwinds by returning null from every level.
struct SyntaxError {
  size_t offset;
  std::string message;
};

std::string describe(const Token& tok) {
  if (tok.kind == Tok::End) return "the end of the expression";
  return "'" + tok.text.str() + "'";
}

class Parser {
public:
  explicit Parser(llvm::StringRef text) : lexer(text) { advance(); }

  SyntaxPtr parseAll() {
    if (current.kind == Tok::End) return fail(current.offset, "empty expression");
    SyntaxPtr root = parseOr();
    if (!root) return nullptr;
    if (current.kind == Tok::Punct && current.text == ")")
      return fail(current.offset, "unbalanced parenthesis: ')' has no matching '('");
    if (current.kind == Tok::Error) return fail(current.offset, lexErrorMessage(current.text));
    if (current.kind != Tok::End)
      return fail(current.offset, "unexpected " + describe(current) +
                                      " after a complete expression (missing operator?)");
    return root;
  }

  std::optional<SyntaxError> error;
  // Syntax nodes built (operands, operators, calls): the expression's size.
  unsigned nodes = 0;

private:
  void advance() { current = lexer.next(); }

  bool isPunct(llvm::StringRef p) const { return current.kind == Tok::Punct && current.text == p; }

  SyntaxPtr fail(size_t offset, std::string message) {
    if (!error) error = SyntaxError{offset, std::move(message)};
    return nullptr;
  }

  SyntaxPtr tooDeep(size_t offset) {
    return fail(offset, "expression nested too deeply (more than " +
                            std::to_string(limits::kMaxExprDepth) +
                            " levels; each operator of a chain like a + b + c is a level: group "
                            "the chain with parentheses)");
  }

  // Counts a new node of the tree and checks the limits on its size; `offset` is its token.
  bool admit(Syntax& node, size_t offset, bool isOperand) {
    ++nodes;
    if (isOperand && ++operands > limits::kMaxExprOperands) {
      fail(offset,
           "expression has more than " + std::to_string(limits::kMaxExprOperands) + " operands");
      return false;
    }
    for (const SyntaxPtr& arg : node.args) node.height = std::max(node.height, arg->height + 1);
    if (node.height > limits::kMaxExprDepth) {
      tooDeep(offset);
      return false;
    }
    return true;
  }

  SyntaxPtr makeBinary(Op op, size_t offset, SyntaxPtr lhs, SyntaxPtr rhs) {
    auto node = std::make_unique<Syntax>();
    node->kind = Syntax::Binary;
    node->op = op;
    node->offset = offset;
    node->args.push_back(std::move(lhs));
    node->args.push_back(std::move(rhs));
    if (!admit(*node, offset, /*isOperand=*/false)) return nullptr;
    return node;
  }

  // One precedence level of left-associative binary operators.
  template <typename Next>
  SyntaxPtr parseLevel(std::initializer_list<std::pair<llvm::StringLiteral, Op>> ops, Next next) {
    SyntaxPtr lhs = (this->*next)();
    while (lhs) {
      const std::pair<llvm::StringLiteral, Op>* match = nullptr;
      for (const auto& entry : ops)
        if (isPunct(entry.first)) match = &entry;
      if (!match) break;
      size_t offset = current.offset;
      advance();
      SyntaxPtr rhs = (this->*next)();
      if (!rhs) return nullptr;
      // The chain's tree leans left: its depth grows by one per operator, checked here.
      lhs = makeBinary(match->second, offset, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }

  SyntaxPtr parseOr() { return parseLevel({{"||", Op::Or}}, &Parser::parseAnd); }
  SyntaxPtr parseAnd() { return parseLevel({{"&&", Op::And}}, &Parser::parseEquality); }
  SyntaxPtr parseEquality() {
    return parseLevel({{"==", Op::Eq}, {"!=", Op::Ne}}, &Parser::parseRelational);
  }
  SyntaxPtr parseRelational() {
    return parseLevel({{"<", Op::Lt}, {"<=", Op::Le}, {">", Op::Gt}, {">=", Op::Ge}},
                      &Parser::parseAdditive);
  }
  SyntaxPtr parseAdditive() {
    return parseLevel({{"+", Op::Add}, {"-", Op::Sub}}, &Parser::parseMultiplicative);
  }
  SyntaxPtr parseMultiplicative() {
    return parseLevel({{"*", Op::Mul}, {"/", Op::Div}, {"%", Op::Rem}}, &Parser::parseUnary);
  }

  SyntaxPtr parseUnary() {
    // Parentheses recurse without adding a node: the parser's own depth is bounded apart.
    if (++depth > limits::kMaxExprDepth) return tooDeep(current.offset);
    SyntaxPtr result;
    if (isPunct("-") || isPunct("!")) {
      auto node = std::make_unique<Syntax>();
      node->kind = Syntax::Unary;
      node->op = isPunct("-") ? Op::Neg : Op::Not;
      node->offset = current.offset;
      advance();
      SyntaxPtr operand = parseUnary();
      if (operand) {
        node->args.push_back(std::move(operand));
        if (admit(*node, node->offset, /*isOperand=*/false)) result = std::move(node);
      }
    } else {
      result = parsePrimary();
    }
    --depth;
    return result;
  }

  // Arguments of f(...) or indices of x[...], up to the closing bracket.
  bool parseList(llvm::StringRef open, llvm::StringRef close, Syntax& node) {
    size_t openOffset = current.offset;
    advance();
    if (isPunct(close)) {
      advance();
      return true;
    }
    while (true) {
      SyntaxPtr arg = parseOr();
      if (!arg) return false;
      node.args.push_back(std::move(arg));
      if (isPunct(",")) {
        advance();
        continue;
      }
      if (isPunct(close)) {
        advance();
        return true;
      }
      if (current.kind == Tok::End) {
        fail(openOffset, "unbalanced " + std::string(open == "(" ? "parenthesis" : "bracket") +
                             ": '" + open.str() + "' is never closed");
        return false;
      }
      fail(current.offset, "expected ',' or '" + close.str() + "', got " + describe(current));
      return false;
    }
  }

  SyntaxPtr parsePrimary() {
    auto node = std::make_unique<Syntax>();
    node->offset = current.offset;
    switch (current.kind) {
    case Tok::Int: {
      node->kind = Syntax::Int;
      if (!admit(*node, current.offset, /*isOperand=*/true)) return nullptr;
      uint64_t value = 0;
      if (current.text.getAsInteger(10, value) || value > uint64_t(INT32_MAX))
        return fail(current.offset, "integer literal " + current.text.str() +
                                        " does not fit in i32 (at most 2147483647)");
      node->intValue = int64_t(value);
      advance();
      return node;
    }
    case Tok::Float: {
      node->kind = Syntax::Float;
      if (!admit(*node, current.offset, /*isOperand=*/true)) return nullptr;
      double value = std::strtod(current.text.str().c_str(), nullptr);
      // Below FLT_MIN a literal is a subnormal f32 or 0, not the value written (and the device's
      // .ftz instructions flush it to 0).
      if (!std::isfinite(value) || std::fabs(value) > FLT_MAX ||
          (value != 0 && std::fabs(value) < FLT_MIN))
        return fail(current.offset, "float literal " + current.text.str() +
                                        " is out of range: expected 0 or a magnitude in "
                                        "[1.17549435e-38, 3.40282347e+38] (a normal f32)");
      node->floatValue = value;
      advance();
      return node;
    }
    case Tok::Ident: {
      node->name = current.text.str();
      advance();
      if (node->name == "true" || node->name == "false") {
        node->kind = Syntax::Bool;
        node->boolValue = node->name == "true";
        return admit(*node, node->offset, /*isOperand=*/true) ? std::move(node) : nullptr;
      }
      if (isPunct("(") || isPunct("[")) {
        bool isCall = isPunct("(");
        node->kind = isCall ? Syntax::Call : Syntax::Index;
        if (!parseList(isCall ? "(" : "[", isCall ? ")" : "]", *node)) return nullptr;
        // An input read is an operand; a call is an operator over its arguments.
        return admit(*node, node->offset, /*isOperand=*/!isCall) ? std::move(node) : nullptr;
      }
      node->kind = Syntax::Ident;
      return admit(*node, node->offset, /*isOperand=*/true) ? std::move(node) : nullptr;
    }
    case Tok::Punct:
      if (isPunct("(")) {
        size_t openOffset = current.offset;
        advance();
        SyntaxPtr inner = parseOr();
        if (!inner) return nullptr;
        if (!isPunct(")")) {
          if (current.kind == Tok::End)
            return fail(openOffset, "unbalanced parenthesis: '(' is never closed");
          return fail(current.offset, "expected ')', got " + describe(current));
        }
        advance();
        return inner;
      }
      if (isPunct(")"))
        return fail(current.offset, "unbalanced parenthesis: ')' has no matching '('");
      return fail(current.offset, "expected a value, got " + describe(current));
    case Tok::End: return fail(current.offset, "expected a value, got the end of the expression");
    case Tok::Error: return fail(current.offset, lexErrorMessage(current.text));
    }
    return nullptr;
  }

  static std::string lexErrorMessage(llvm::StringRef text) {
    if (!text.empty() && (llvm::isDigit(text[0]) || text[0] == '.'))
      return "malformed number '" + text.str() + "'";
    if (text == "?") return "unexpected '?': write a conditional as where(condition, then, else)";
    if (text == "=") return "unexpected '=': did you mean '=='?";
    if (text == "&") return "unexpected '&': did you mean '&&'?";
    if (text == "|") return "unexpected '|': did you mean '||'?";
    return "unexpected character '" + text.str() + "'";
  }

  Lexer lexer;
  Token current;
  unsigned depth = 0;
  unsigned operands = 0;
};

// ---- Type checker ----

std::string suggestion(llvm::StringRef name, const std::vector<std::string>& candidates) {
  if (name.size() < 3) return "";
  std::string best;
  unsigned bestDistance = ~0u;
  for (const std::string& candidate : candidates) {
    unsigned distance = name.edit_distance(candidate, /*AllowReplacements=*/true);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  if (bestDistance <= std::max<size_t>(1, name.size() / 3))
    return " (did you mean '" + best + "'?)";
  return "";
}

bool isNumber(ScalarType type) { return type != ScalarType::I1; }

class Checker {
public:
  Checker(Role role, const std::vector<InputDecl>& inputs, LocateFn locate)
      : role(role), inputs(inputs), locate(locate) {}

  std::vector<ParseError> errors;

  ExprPtr check(const Syntax& syntax) {
    switch (syntax.kind) {
    case Syntax::Int: {
      auto node = make(Kind::IntLit, ScalarType::I32, syntax.offset);
      node->intValue = syntax.intValue;
      return node;
    }
    case Syntax::Float: {
      auto node = make(Kind::FloatLit, ScalarType::F32, syntax.offset);
      node->floatValue = syntax.floatValue;
      return node;
    }
    case Syntax::Bool: {
      auto node = make(Kind::BoolLit, ScalarType::I1, syntax.offset);
      node->boolValue = syntax.boolValue;
      return node;
    }
    case Syntax::Ident: return checkIdent(syntax);
    case Syntax::Index: return checkIndex(syntax);
    case Syntax::Call: return checkCall(syntax);
    case Syntax::Unary: return checkUnary(syntax);
    case Syntax::Binary: return checkBinary(syntax);
    }
    return nullptr;
  }

private:
  std::shared_ptr<Node> make(Kind kind, ScalarType type, size_t offset) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->type = type;
    node->loc = locate ? locate(offset) : SourceLoc{"", 0, unsigned(offset + 1)};
    return node;
  }

  // The same mistake repeated (doc[q] == doc[k] with doc undeclared) is reported once.
  ExprPtr error(size_t offset, std::string message) {
    for (const ParseError& earlier : errors)
      if (earlier.message == message) return nullptr;
    errors.push_back({offset, std::move(message)});
    return nullptr;
  }

  const InputDecl* findInput(llvm::StringRef name) const {
    for (const InputDecl& input : inputs)
      if (input.name == name) return &input;
    return nullptr;
  }

  std::vector<std::string> knownNames() const {
    std::vector<std::string> names(std::begin(kIndexVars), std::end(kIndexVars));
    if (role == Role::Score) names.push_back("score");
    for (const InputDecl& input : inputs) names.push_back(input.name);
    return names;
  }

  ExprPtr promote(ExprPtr operand, ScalarType to) {
    if (to != ScalarType::F32 || operand->type != ScalarType::I32) return operand;
    auto node = std::make_shared<Node>();
    node->kind = Kind::ToFloat;
    node->type = ScalarType::F32;
    node->loc = operand->loc;
    node->children.push_back(std::move(operand));
    return node;
  }

  static std::string dimsText(const InputDecl& input) {
    std::string text = "[";
    for (size_t i = 0; i < input.dims.size(); ++i)
      text += (i ? ", " : "") + toString(input.dims[i]).str();
    return text + "]";
  }

  ExprPtr checkIdent(const Syntax& syntax) {
    llvm::StringRef name = syntax.name;
    if (isIndexVar(name)) {
      auto node = make(Kind::Var, ScalarType::I32, syntax.offset);
      node->name = name.str();
      return node;
    }
    if (name == "score") {
      if (role != Role::Score)
        return error(syntax.offset,
                     "'score' is only available in score expressions, not in a mask");
      auto node = make(Kind::Var, ScalarType::F32, syntax.offset);
      node->name = "score";
      return node;
    }
    if (const InputDecl* input = findInput(name))
      return error(syntax.offset, "input '" + name.str() + "' must be indexed, one index per dim " +
                                      dimsText(*input) + ", e.g. " + name.str() + "[...]");
    if (findFunc(name))
      return error(syntax.offset,
                   "'" + name.str() + "' is a function: call it as " + name.str() + "(...)");
    return error(syntax.offset,
                 "unknown identifier '" + name.str() + "'" + suggestion(name, knownNames()));
  }

  // Checks every argument even after one fails, so all their errors are reported.
  bool checkArgs(const Syntax& syntax, std::vector<ExprPtr>& out) {
    bool ok = true;
    for (const SyntaxPtr& arg : syntax.args) {
      out.push_back(check(*arg));
      ok &= out.back() != nullptr;
    }
    return ok;
  }

  ExprPtr checkIndex(const Syntax& syntax) {
    llvm::StringRef name = syntax.name;
    const InputDecl* input = findInput(name);
    if (!input) {
      if (isIndexVar(name) || name == "score")
        return error(syntax.offset, "'" + name.str() + "' is not an input and cannot be indexed");
      std::vector<std::string> inputNames;
      for (const InputDecl& decl : inputs) inputNames.push_back(decl.name);
      return error(syntax.offset, "undeclared input '" + name.str() + "'" +
                                      suggestion(name, inputNames) +
                                      "; declare it under 'inputs:'");
    }
    std::vector<ExprPtr> indices;
    bool ok = checkArgs(syntax, indices);
    if (indices.size() != input->dims.size())
      return error(syntax.offset, "input '" + name.str() + "' has " +
                                      std::to_string(input->dims.size()) + " dim" +
                                      (input->dims.size() == 1 ? " " : "s ") + dimsText(*input) +
                                      " but is indexed with " + std::to_string(indices.size()) +
                                      " ind" + (indices.size() == 1 ? "ex" : "ices"));
    for (size_t i = 0; i < indices.size(); ++i)
      if (indices[i] && indices[i]->type != ScalarType::I32) {
        error(syntax.args[i]->offset, "index " + std::to_string(i + 1) + " of '" + name.str() +
                                          "' must be an integer (i32), got " +
                                          toString(indices[i]->type).str());
        ok = false;
      }
    if (!ok) return nullptr;
    auto node = make(Kind::InputIndex, input->type, syntax.offset);
    node->name = name.str();
    node->children = std::move(indices);
    return node;
  }

  ExprPtr checkCall(const Syntax& syntax) {
    llvm::StringRef name = syntax.name;
    const FuncInfo* info = findFunc(name);
    if (!info) {
      if (findInput(name))
        return error(syntax.offset, "'" + name.str() + "' is an input: index it with [], not ()");
      if (isIndexVar(name) || name == "score")
        return error(syntax.offset, "'" + name.str() + "' is not a function");
      std::string known;
      for (const FuncInfo& func : kFuncs) known += (known.empty() ? "" : ", ") + func.name.str();
      return error(syntax.offset, "unknown function '" + name.str() + "' (known: " + known + ")");
    }
    std::vector<ExprPtr> args;
    bool ok = checkArgs(syntax, args);
    if (args.size() != info->arity) {
      std::string expected =
          std::to_string(info->arity) + " argument" + (info->arity == 1 ? "" : "s");
      if (info->func == Func::Where) expected += " (condition, value if true, value if false)";
      return error(syntax.offset,
                   name.str() + "() takes " + expected + ", got " + std::to_string(args.size()));
    }
    if (!ok) return nullptr;

    auto node = make(Kind::Call, ScalarType::F32, syntax.offset);
    node->func = info->func;
    node->name = name.str();
    switch (info->func) {
    case Func::Where: {
      if (args[0]->type != ScalarType::I1)
        return error(syntax.args[0]->offset, "where(): the condition must be a boolean (i1), got " +
                                                 toString(args[0]->type).str());
      auto joined = joinBranches(syntax, "where()", args[1], args[2], /*allowBool=*/true);
      if (!joined) return nullptr;
      node->type = *joined;
      node->children = {args[0], promote(args[1], *joined), promote(args[2], *joined)};
      return node;
    }
    case Func::Min:
    case Func::Max: {
      auto joined = joinBranches(syntax, name.str() + "()", args[0], args[1], /*allowBool=*/false);
      if (!joined) return nullptr;
      node->type = *joined;
      node->children = {promote(args[0], *joined), promote(args[1], *joined)};
      return node;
    }
    case Func::Abs:
      if (!isNumber(args[0]->type))
        return error(syntax.args[0]->offset, "abs() needs a number, got i1");
      node->type = args[0]->type;
      node->children = {args[0]};
      return node;
    default:  // tanh exp exp2 log sqrt: f32 -> f32
      if (!isNumber(args[0]->type))
        return error(syntax.args[0]->offset, name.str() + "() needs a number, got i1");
      node->children = {promote(args[0], ScalarType::F32)};
      return node;
    }
  }

  // The common type of two values that meet (where's branches, min/max operands): numbers promote
  // to f32 if either is f32; booleans only meet booleans.
  std::optional<ScalarType> joinBranches(const Syntax& syntax, const std::string& what,
                                         const ExprPtr& a, const ExprPtr& b, bool allowBool) {
    if (isNumber(a->type) && isNumber(b->type))
      return (a->type == ScalarType::F32 || b->type == ScalarType::F32) ? ScalarType::F32
                                                                        : ScalarType::I32;
    if (allowBool && a->type == ScalarType::I1 && b->type == ScalarType::I1) return ScalarType::I1;
    if (!allowBool)
      error(syntax.offset, what + " needs numbers, got " + toString(a->type).str() + " and " +
                               toString(b->type).str());
    else
      error(syntax.offset, what + ": cannot mix a boolean with a number, got " +
                               toString(a->type).str() + " and " + toString(b->type).str());
    return std::nullopt;
  }

  ExprPtr checkUnary(const Syntax& syntax) {
    ExprPtr operand = check(*syntax.args[0]);
    if (!operand) return nullptr;
    if (syntax.op == Op::Neg && !isNumber(operand->type))
      return error(syntax.offset, "unary '-' needs a number, got i1");
    if (syntax.op == Op::Not && operand->type != ScalarType::I1)
      return error(syntax.offset, "'!' needs a boolean (i1), got " + toString(operand->type).str());
    auto node = make(Kind::Unary, operand->type, syntax.offset);
    node->op = syntax.op;
    node->children = {operand};
    return node;
  }

  ExprPtr checkBinary(const Syntax& syntax) {
    ExprPtr lhs = check(*syntax.args[0]);
    ExprPtr rhs = check(*syntax.args[1]);
    if (!lhs || !rhs) return nullptr;
    Op op = syntax.op;
    std::string opText = "'" + spelling(op).str() + "'";
    std::string types = toString(lhs->type).str() + " and " + toString(rhs->type).str();
    auto node = make(Kind::Binary, lhs->type, syntax.offset);
    node->op = op;

    if (op == Op::And || op == Op::Or) {
      if (lhs->type != ScalarType::I1 || rhs->type != ScalarType::I1)
        return error(syntax.offset, opText + " needs booleans (i1), got " + types);
      node->children = {lhs, rhs};
      return node;
    }
    bool bothBool = lhs->type == ScalarType::I1 && rhs->type == ScalarType::I1;
    if ((op == Op::Eq || op == Op::Ne) && bothBool) {
      node->children = {lhs, rhs};
      return node;
    }
    if (!isNumber(lhs->type) || !isNumber(rhs->type)) {
      if (bothBool) return error(syntax.offset, opText + " needs numbers, got " + types);
      return error(syntax.offset,
                   "cannot mix a boolean with a number: " + opText + " got " + types);
    }
    ScalarType common = (lhs->type == ScalarType::F32 || rhs->type == ScalarType::F32)
                            ? ScalarType::F32
                            : ScalarType::I32;
    bool isComparison = op == Op::Lt || op == Op::Le || op == Op::Gt || op == Op::Ge ||
                        op == Op::Eq || op == Op::Ne;
    node->type = isComparison ? ScalarType::I1 : common;
    node->children = {promote(lhs, common), promote(rhs, common)};
    return node;
  }

  Role role;
  const std::vector<InputDecl>& inputs;
  LocateFn locate;
};

size_t firstNonSpace(llvm::StringRef text) {
  size_t offset = text.find_first_not_of(" \t\r\n");
  return offset == llvm::StringRef::npos ? 0 : offset;
}

}  // namespace

ParseResult parse(llvm::StringRef text, Role role, const std::vector<InputDecl>& inputs,
                  LocateFn locate) {
  ParseResult result;
  Parser parser(text);
  SyntaxPtr syntax = parser.parseAll();
  result.nodes = parser.nodes;
  if (!syntax) {
    assert(parser.error && "the parser fails only with an error");
    result.errors.push_back({parser.error->offset, parser.error->message});
    return result;
  }
  Checker checker(role, inputs, locate);
  ExprPtr root = checker.check(*syntax);
  result.errors = std::move(checker.errors);
  if (!root) return result;

  size_t start = firstNonSpace(text);
  if (role == Role::Mask && root->type != ScalarType::I1) {
    result.errors.push_back(
        {start, "a mask expression must be a boolean (i1), got " + toString(root->type).str()});
    return result;
  }
  if (role == Role::Score) {
    if (root->type == ScalarType::I1) {
      result.errors.push_back({start,
                               "a score expression must be a number (f32), got a boolean (i1); "
                               "to drop elements use 'mask:'"});
      return result;
    }
    if (root->type == ScalarType::I32) {
      auto promoted = std::make_shared<Node>();
      promoted->kind = Kind::ToFloat;
      promoted->type = ScalarType::F32;
      promoted->loc = root->loc;
      promoted->children.push_back(root);
      root = promoted;
    }
  }
  result.root = root;
  return result;
}

llvm::StringRef spelling(Op op) {
  switch (op) {
  case Op::Neg: return "-";
  case Op::Not: return "!";
  case Op::Add: return "+";
  case Op::Sub: return "-";
  case Op::Mul: return "*";
  case Op::Div: return "/";
  case Op::Rem: return "%";
  case Op::Lt: return "<";
  case Op::Le: return "<=";
  case Op::Gt: return ">";
  case Op::Ge: return ">=";
  case Op::Eq: return "==";
  case Op::Ne: return "!=";
  case Op::And: return "&&";
  case Op::Or: return "||";
  }
  return "?";
}

llvm::StringRef spelling(Func func) {
  for (const FuncInfo& info : kFuncs)
    if (info.func == func) return info.name;
  return "?";
}

bool isReservedName(llvm::StringRef name) {
  return isIndexVar(name) || name == "score" || name == "true" || name == "false" ||
         findFunc(name) != nullptr;
}

std::string formatFloatLiteral(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  std::string text = buffer;
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string print(const Node& node) {
  switch (node.kind) {
  case Kind::IntLit: return std::to_string(node.intValue);
  case Kind::FloatLit: return formatFloatLiteral(node.floatValue);
  case Kind::BoolLit: return node.boolValue ? "true" : "false";
  case Kind::Var: return node.name;
  case Kind::InputIndex:
  case Kind::Call: {
    std::string text = node.name + (node.kind == Kind::Call ? "(" : "[");
    for (size_t i = 0; i < node.children.size(); ++i)
      text += (i ? ", " : "") + print(*node.children[i]);
    return text + (node.kind == Kind::Call ? ")" : "]");
  }
  case Kind::Unary: return "(" + spelling(node.op).str() + print(*node.children[0]) + ")";
  case Kind::Binary:
    return "(" + print(*node.children[0]) + " " + spelling(node.op).str() + " " +
           print(*node.children[1]) + ")";
  case Kind::ToFloat: return "float(" + print(*node.children[0]) + ")";
  }
  return "?";
}

}  // namespace attnc::expr
