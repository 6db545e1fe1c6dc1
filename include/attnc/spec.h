// The attention spec: what a user asks attnc to compile (head dims, heads, dtype, mask, score
// modification, dropout, extra inputs), built in C++ with SpecBuilder and checked as the YAML form
// is; JitCompiler::compile (attnc/attnc.h) takes it. docs/spec.md is the reference for every field
// and rule here. Plain C++17: the definitions are in the attncJit library (its attncSpec part).
#pragma once

#include "attnc/diagnostic.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnc {

// Element type of Q, K, V and O.
enum class DType { BF16, FP16 };
// Types of expression values and of declared inputs (inputs are i32 or f32 only).
enum class ScalarType { I1, I32, F32 };
// What indexes a dimension of a declared input: the batch, the query head, or a sequence position
// (q or k).
enum class InputDim { B, H, Pos };

// A checked mask or score expression as a typed tree, which the compiler lowers; its node type is
// the compiler's own (compiler/Spec/Expr.h).
namespace expr {
struct Node;
}
using ExprPtr = std::shared_ptr<const expr::Node>;

// An extra tensor the mask or score reads, passed at launch (e.g. document ids, ALiBi slopes).
struct InputDecl {
  std::string name;
  ScalarType type = ScalarType::I32;
  std::vector<InputDim> dims;
  SourceLoc loc;
};

// Which (q, k) pairs are kept. q' below is the query row aligned to the end of the key sequence,
// q' = q + kv_len - q_len (bottom-right, as FlashAttention 2); topLeft causal uses q' = q.
struct MaskSpec {
  enum Kind {
    None,      // keep everything
    Causal,    // k <= q'
    Window,    // causal sliding window: q' - window < k <= q'
    Prefix,    // prefix-LM: k < prefix || k <= q'
    Document,  // documentInput[q] == documentInput[k] (&& k <= q' when documentCausal)
    Expr       // a user expression of type i1
  } kind = None;
  bool topLeft = false;
  int64_t window = 0;
  int64_t prefix = 0;
  bool documentCausal = false;
  std::string documentInput;
  // After a successful parse or build, set for every kind but None: the typed expression (for
  // builtins, their definition above, written out by builtinExpressionText()). Passes that do not
  // care which builtin it was lower this and nothing else.
  ExprPtr expr;
  std::string exprText;  // the user's text for Expr; the builtin's definition otherwise
  SourceLoc loc;
};

// How the scaled score s = scale * q.k is modified before the softmax.
struct ScoreSpec {
  enum Kind {
    None,     // s
    Softcap,  // softcap * tanh(s / softcap)
    // s - slope[h] * abs(q' - k); slopes from alibiSlopes, or standardAlibiSlopes(heads.q)
    Alibi,
    // a user expression of type f32 over `score` (= s), b, h, q, k, q_len, kv_len, inputs
    Expr
  } kind = None;
  double softcap = 0;
  std::string alibiSlopes;  // the f32 [h] input holding the slopes; empty: the standard slopes
  ExprPtr expr;             // as MaskSpec::expr
  std::string exprText;
  SourceLoc loc;
};

// templates/attnc/common/philox.h's kDropoutRoundsDefault (Spec.cpp asserts they agree).
constexpr int64_t kDefaultDropoutRounds = 7;

// A checked spec, as SpecBuilder::build() and the YAML reader return it: every field in range and
// mask.expr / score.expr typed. Fields changed by hand afterwards are not checked again.
struct Spec {
  std::string name;  // kernel symbol stem: [A-Za-z_][A-Za-z0-9_]*
  int64_t headDim = 0, headDimV = 0;
  DType dtype = DType::BF16;
  int64_t headsQ = 0, headsKV = 0;
  std::optional<double> scale;  // unset: 1/sqrt(headDim)
  MaskSpec mask;
  ScoreSpec score;
  double dropout = 0;
  // Philox4x32's rounds for the dropout decisions, 7 to 10 (`dropout: {p: P, rounds: R}`); the
  // default is templates/attnc/common/philox.h's kDropoutRoundsDefault (Spec.cpp checks both).
  int64_t dropoutRounds = kDefaultDropoutRounds;
  std::vector<InputDecl> inputs;
  SourceLoc loc;  // where the spec starts (its file, for YAML specs)

  const InputDecl* findInput(std::string_view name) const;
  double effectiveScale() const;
};

// Builds a spec in C++ with the same fields, defaults and checks as the YAML form. Diagnostics
// name the spec and the field:
//   spec 'x': error: head_dim: must be a multiple of 8 in [8, 256], got 100; did you mean 96 or
//   104?
// Defaults: head_dim_v = head_dim, heads kv = q, dtype bf16, scale auto, no mask, no score.
class SpecBuilder {
public:
  explicit SpecBuilder(std::string name);
  SpecBuilder& headDim(int64_t d);
  SpecBuilder& headDimV(int64_t d);
  SpecBuilder& dtype(DType t);
  SpecBuilder& heads(int64_t q, int64_t kv);
  SpecBuilder& heads(int64_t q) { return heads(q, q); }
  SpecBuilder& scale(double s);
  // Mask setters replace any previous mask; score setters any previous score.
  SpecBuilder& causal(bool topLeft = false);
  SpecBuilder& window(int64_t w);
  SpecBuilder& prefix(int64_t p);
  SpecBuilder& document(std::string input, bool causal = false);
  SpecBuilder& mask(std::string expression);
  SpecBuilder& softcap(double c);
  SpecBuilder& alibi(std::string slopesInput = "");
  SpecBuilder& score(std::string expression);
  // p, and Philox4x32's rounds for its decisions (7 to 10).
  SpecBuilder& dropout(double p, int64_t rounds = kDefaultDropoutRounds);
  SpecBuilder& input(std::string name, ScalarType type, std::vector<InputDim> dims);

  // The checked spec, or nullopt after an error; warnings (docs/spec.md) are appended either way.
  std::optional<Spec> build(Diagnostics& diags) const;

private:
  Spec spec;
  bool headDimVSet = false, headsKVSet = false;
};

// The definition of a builtin mask or score as expression text (empty for None and Expr), e.g.
// "k <= q + kv_len - q_len" for bottom-right causal. This is the one place the builtins' meaning is
// written down; the parser and builder type-check it into MaskSpec::expr / ScoreSpec::expr.
std::string builtinExpressionText(const MaskSpec& mask, const std::vector<InputDecl>& inputs);
std::string builtinExpressionText(const ScoreSpec& score, int64_t headsQ);

// ALiBi slopes of the paper (Press et al.) for `heads` heads: 2^(-8(i+1)/n) for a power of two n,
// interleaved from 2n otherwise. What `score: alibi` uses when no slopes input is named.
std::vector<double> standardAlibiSlopes(int64_t heads);

// A spec's number as messages and `attnc explain` print it ("%g": 0.1, 30, 1e-05).
std::string formatNumber(double value);

}  // namespace attnc
