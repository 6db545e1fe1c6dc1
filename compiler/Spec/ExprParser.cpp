// The expression parser: recursive descent with C's precedence into the untyped syntax tree. It
// stops at the first syntax error (recovering from one would mostly invent follow-on errors), and
// bounds the tree's operands and depth as it builds it, so no later walk can overflow the stack.
#include "compiler/Spec/ExprLexer.h"
#include "compiler/Spec/ExprSyntax.h"
#include "compiler/Spec/Limits.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>

namespace attnc::expr::detail {

namespace {

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

}  // namespace

SyntaxTree parseSyntax(llvm::StringRef text) {
  Parser parser(text);
  SyntaxTree tree;
  tree.root = parser.parseAll();
  tree.error = parser.error;
  tree.nodes = parser.nodes;
  return tree;
}

}  // namespace attnc::expr::detail
