// Mask and score expressions: a typed AST, and the parser + type checker that build it from text.
// Every node carries its type after checking, and int-to-float promotion is an explicit ToFloat
// node, so a lowering walks the tree without re-deriving C's conversion rules.
#pragma once

#include "compiler/Spec/Spec.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

namespace attnc::expr {

enum class Kind {
  IntLit,      // intValue, i32
  FloatLit,    // floatValue, f32
  BoolLit,     // boolValue, i1
  Var,         // name: b h q k q_len kv_len (i32) or score (f32)
  InputIndex,  // name = the input; children = one i32 index per dim
  Unary,       // op Neg | Not; one child
  Binary,      // op; two children of the same type (after promotion)
  Call,        // func; children = arguments (after promotion)
  ToFloat      // i32 -> f32 promotion of its one child, inserted by the checker
};

enum class Op { Neg, Not, Add, Sub, Mul, Div, Rem, Lt, Le, Gt, Ge, Eq, Ne, And, Or };
enum class Func { Where, Tanh, Exp, Exp2, Log, Sqrt, Abs, Min, Max };

struct Node {
  Kind kind = Kind::IntLit;
  ScalarType type = ScalarType::I32;
  // The node's token in the spec file: the operator of a Unary/Binary, the name of a Var, Call or
  // InputIndex, the first character of a literal.
  SourceLoc loc;
  std::vector<ExprPtr> children;
  int64_t intValue = 0;
  double floatValue = 0;
  bool boolValue = false;
  std::string name;
  Op op = Op::Add;
  Func func = Func::Where;
};

// What an expression may refer to: `score` exists only in score expressions, and the result type
// is i1 for a mask and f32 for a score (an i32 result is promoted).
enum class Role { Mask, Score };

struct ParseError {
  size_t offset;  // bytes into the expression text
  std::string message;
};

struct ParseResult {
  ExprPtr root;  // null when there are errors
  std::vector<ParseError> errors;
  // Syntax nodes read (operands, operators, calls), for the per-spec limit (Limits.h).
  unsigned nodes = 0;
};

// Maps a byte offset in the expression text to its place in the spec file (for node locations).
using LocateFn = llvm::function_ref<SourceLoc(size_t offset)>;

// Parses and type-checks `text`. Reports the first syntax error, or every type error found. The
// expression's operands and depth are bounded (Limits.h): every walk of the tree may recurse.
ParseResult parse(llvm::StringRef text, Role role, const std::vector<InputDecl>& inputs,
                  LocateFn locate = nullptr);

// Fully parenthesized text with promotions spelled float(...), e.g. "(float(30) * tanh(...))":
// shows exactly how an expression was read (for tests, dumps and `attnc explain`).
std::string print(const Node& node);

// A float literal that reads back as the same f32 and always looks like a float ("30.0", "0.125").
std::string formatFloatLiteral(double value);

llvm::StringRef spelling(Op op);      // "+", "&&", "!", ...
llvm::StringRef spelling(Func func);  // "where", "tanh", ...

// True for names an input may not take: b h q k q_len kv_len score true false and function names.
bool isReservedName(llvm::StringRef name);

}  // namespace attnc::expr
