// Mask and score expressions from text to the typed tree (the lexer, parser and type checker
// are Expr{Lexer,Parser,TypeCheck}.cpp) and back to text, and the names they reserve.
#include "compiler/Spec/Expr.h"
#include "compiler/Spec/ExprSyntax.h"

#include <cassert>
#include <cstdio>

namespace attnc::expr {

namespace detail {

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

}  // namespace detail

namespace {

size_t firstNonSpace(llvm::StringRef text) {
  size_t offset = text.find_first_not_of(" \t\r\n");
  return offset == llvm::StringRef::npos ? 0 : offset;
}

}  // namespace

ParseResult parse(llvm::StringRef text, Role role, const std::vector<InputDecl>& inputs,
                  LocateFn locate) {
  ParseResult result;
  detail::SyntaxTree syntax = detail::parseSyntax(text);
  result.nodes = syntax.nodes;
  if (!syntax.root) {
    assert(syntax.error && "the parser fails only with an error");
    result.errors.push_back({syntax.error->offset, syntax.error->message});
    return result;
  }
  ExprPtr root = detail::checkTypes(*syntax.root, role, inputs, locate, result.errors);
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
  for (const detail::FuncInfo& info : detail::kFuncs)
    if (info.func == func) return info.name;
  return "?";
}

bool isReservedName(llvm::StringRef name) {
  return detail::isIndexVar(name) || name == "score" || name == "true" || name == "false" ||
         detail::findFunc(name) != nullptr;
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
