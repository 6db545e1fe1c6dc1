// Internal to compiler/Spec: the untyped syntax tree of a mask or score expression, which the
// parser builds and the type checker turns into expr::Node, and the names both know.
#pragma once

#include "compiler/Spec/Expr.h"

#include "llvm/ADT/StringRef.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc::expr::detail {

inline constexpr llvm::StringLiteral kIndexVars[] = {"b", "h", "q", "k", "q_len", "kv_len"};

struct FuncInfo {
  llvm::StringLiteral name;
  Func func;
  unsigned arity;
};
inline constexpr FuncInfo kFuncs[] = {
    {"where", Func::Where, 3}, {"tanh", Func::Tanh, 1}, {"exp", Func::Exp, 1},
    {"exp2", Func::Exp2, 1},   {"log", Func::Log, 1},   {"sqrt", Func::Sqrt, 1},
    {"abs", Func::Abs, 1},     {"min", Func::Min, 2},   {"max", Func::Max, 2},
};

const FuncInfo* findFunc(llvm::StringRef name);
bool isIndexVar(llvm::StringRef name);

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

// What the parser read: the tree, or the first syntax error; and the nodes it built either way.
struct SyntaxTree {
  SyntaxPtr root;  // null when there is an error
  std::optional<SyntaxError> error;
  unsigned nodes = 0;  // syntax nodes built (operands, operators, calls): the expression's size
};

// Parses `text` with C's precedence, bounding its operands and depth (Limits.h).
SyntaxTree parseSyntax(llvm::StringRef text);

// Type-checks a syntax tree for `role`, appending every type error found to `errors`; null when
// there is one.
ExprPtr checkTypes(const Syntax& syntax, Role role, const std::vector<InputDecl>& inputs,
                   LocateFn locate, std::vector<ParseError>& errors);

}  // namespace attnc::expr::detail
