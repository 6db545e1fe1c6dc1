// See SpecKey.h. Each struct is taken apart by a structured binding that names every member, so a
// field added to Spec, MaskSpec, ScoreSpec or InputDecl stops this file compiling until the
// canonical text (and the key) covers it.
#include "compiler/SpecKey.h"

#include <cstdio>

namespace attnc {

namespace {

class CanonicalText {
public:
  void text(const char* field, const std::string& value) {
    out_ += std::string(field) + " " + std::to_string(value.size()) + ":" + value + "\n";
  }
  void integer(const char* field, long long value) {
    out_ += std::string(field) + " " + std::to_string(value) + "\n";
  }
  // %a: the double's exact bits, where a decimal form could round two values to one text.
  void real(const char* field, double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%a", value);
    out_ += std::string(field) + " " + buffer + "\n";
  }
  std::string take() { return std::move(out_); }

private:
  std::string out_;
};

}  // namespace

std::string canonicalSpecText(const Spec& spec) {
  CanonicalText out;
  const auto& [name, headDim, headDimV, dtype, headsQ, headsKV, scale, mask, score, dropout,
               dropoutRounds, inputs, specLoc] = spec;
  (void)specLoc;
  out.text("name", name);
  out.integer("head_dim", headDim);
  out.integer("head_dim_v", headDimV);
  out.text("dtype", toString(dtype).str());
  out.integer("heads.q", headsQ);
  out.integer("heads.kv", headsKV);
  scale ? out.real("scale", *scale) : out.text("scale", "auto");
  out.real("scale.effective", spec.effectiveScale());

  const auto& [maskKind, topLeft, window, prefix, documentCausal, documentInput, maskExpr,
               maskText, maskLoc] = mask;
  (void)maskExpr, (void)maskLoc;  // the expression is its text read against the inputs below
  out.integer("mask.kind", maskKind);
  out.integer("mask.top_left", topLeft);
  out.integer("mask.window", window);
  out.integer("mask.prefix", prefix);
  out.integer("mask.document_causal", documentCausal);
  out.text("mask.document_input", documentInput);
  out.text("mask.expr", maskText);

  const auto& [scoreKind, softcap, alibiSlopes, scoreExpr, scoreText, scoreLoc] = score;
  (void)scoreExpr, (void)scoreLoc;
  out.integer("score.kind", scoreKind);
  out.real("score.softcap", softcap);
  out.text("score.alibi_slopes", alibiSlopes);
  out.text("score.expr", scoreText);

  out.real("dropout.p", dropout);
  out.integer("dropout.rounds", dropoutRounds);

  out.integer("inputs", static_cast<long long>(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& [inputName, type, dims, inputLoc] = inputs[i];
    (void)inputLoc;
    const std::string field = "input[" + std::to_string(i) + "]";
    out.text((field + ".name").c_str(), inputName);
    out.text((field + ".type").c_str(), toString(type).str());
    std::string dimList;
    for (InputDim dim : dims) dimList += (dimList.empty() ? "" : ",") + toString(dim).str();
    out.text((field + ".dims").c_str(), dimList);
  }
  return out.take();
}

}  // namespace attnc
