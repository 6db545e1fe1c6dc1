// The expression type checker: the untyped syntax tree -> the typed expr::Node tree. It collects
// every type error it finds, makes int-to-float promotion an explicit ToFloat node, and suggests
// the nearest known name for a misspelt one.
#include "compiler/Spec/ExprSyntax.h"

#include <algorithm>

namespace attnc::expr::detail {

namespace {

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

}  // namespace

ExprPtr checkTypes(const Syntax& syntax, Role role, const std::vector<InputDecl>& inputs,
                   LocateFn locate, std::vector<ParseError>& errors) {
  Checker checker(role, inputs, locate);
  ExprPtr root = checker.check(syntax);
  errors.insert(errors.end(), checker.errors.begin(), checker.errors.end());
  return root;
}

}  // namespace attnc::expr::detail
