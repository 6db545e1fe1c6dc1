// Every size limit of the spec front end, in one place. Each bounds a recursion or an allocation
// that hostile input could otherwise drive without bound (a stack overflow, a heap exhaustion, a
// compile that never ends); each is far above what a real spec needs. Exceeding one is an error
// at the offending text, never a crash.
#pragma once

#include <cstddef>

namespace attnc::limits {

// The largest spec file: real specs are a few hundred bytes; the file is read into memory whole.
constexpr size_t kMaxSpecBytes = size_t(1) << 20;

// YAML nesting of every kind (block indentation, `-` and `?` entries, flow collections): a spec
// nests four levels (inputs.NAME.dims[...]); LLVM's YAML parser recurses once per level.
constexpr unsigned kMaxYamlNesting = 16;

// The spec's `name` stems the kernels' C symbols (name + "_fwd_sm90a_..."): 64 characters keep
// every derived symbol readable and far inside the lengths NVRTC and ptxas handle (a name of
// ~100,000 characters corrupted NVRTC's heap).
constexpr size_t kMaxNameLength = 64;

// An input's name is spelt into generated code and diagnostics like the spec's name.
constexpr size_t kMaxInputNameLength = 64;

// The number of declared inputs is bounded by the kernels' parameter block: attnc::kMaxInputs in
// templates/attnc/common/params.h.

// Depth of one expression's tree, parentheses, unary operators and calls included; a chain
// `a + b + c ...` counts one level per operator (the parser builds it left-leaning). Every later
// walk of an expression (type checking, IR building, printing, symbolic differentiation)
// recurses once per level, so this bounds their stack.
constexpr unsigned kMaxExprDepth = 64;

// Operands (literals, variables, input reads) of one mask or score expression: compile time grows
// with the square of the expression's size (a mask of 500 terms takes 2.5 s to a cubin).
constexpr unsigned kMaxExprOperands = 256;

// Syntax nodes (operands, operators, calls) of the mask and score expressions together, builtins
// included: the kernel evaluates both per element and the backward differentiates the score.
constexpr unsigned kMaxSpecExprNodes = 512;

}  // namespace attnc::limits
