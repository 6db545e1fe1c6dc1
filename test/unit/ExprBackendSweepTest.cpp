// Whatever expression the front end accepts, the back end compiles: every operator and builtin
// over every class of operand types the generated hooks see (int and float literals, positions,
// values that vary over a tile, the score, booleans; declared inputs), in masks and scores,
// forward and backward, through the pipeline to CUDA C++ and through NVRTC's front end for
// sm_80 and sm_90a. Overload resolution in templates/attnc/common/expr.h is where such
// combinations failed (where(q == k, 1, 2) > 0 picked the boolean select).
#include "compiler/Pipeline.h"
#include "compiler/Spec/Spec.h"
#include "runtime/EmbeddedTemplates.h"
#include "runtime/Nvrtc.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace attnc;

namespace {

// One representative per C++ type class a hook's operand takes. Masks are instantiated with int
// (one element) and with intervals (a tile): a literal stays int/float, `q` becomes an interval,
// `q * 0.5` a float interval. Score hooks take q as a position (base + offset), the score as the
// raw score times the scale, and q promoted to float as a split position.
struct OperandClasses {
  std::vector<std::string> numbers, booleans;
};

OperandClasses classesOf(bool score) {
  if (score)
    return {{"3", "q", "2.5", "score", "(q * 0.5)"}, {"true", "(score > 0.0)"}};
  return {{"3", "q", "2.5", "(q * 0.5)"}, {"true", "(q > k)"}};
}

// Boolean terms, each exercising one operator or builtin on one combination of operand classes.
std::vector<std::string> sweepTerms(bool score) {
  const OperandClasses classes = classesOf(score);
  std::vector<std::string> terms;
  auto used = [](const std::string& number) { return "(" + number + ") != 7"; };
  for (const std::string& a : classes.numbers)
    for (const std::string& b : classes.numbers) {
      for (const char* op : {"+", "-", "*", "/", "%"})
        terms.push_back(used(a + " " + op + " " + b));
      for (const char* op : {"<", "<=", ">", ">=", "==", "!="})
        terms.push_back("(" + a + " " + op + " " + b + ")");
      for (const char* func : {"min", "max"})
        terms.push_back(used(std::string(func) + "(" + a + ", " + b + ")"));
      for (const std::string& c : classes.booleans)
        terms.push_back(used("where(" + c + ", " + a + ", " + b + ")"));
    }
  for (const std::string& a : classes.numbers) {
    terms.push_back(used("-" + a));
    for (const char* func : {"abs", "tanh", "exp", "exp2", "log", "sqrt"})
      terms.push_back(used(std::string(func) + "(" + a + ")"));
  }
  for (const std::string& a : classes.booleans) {
    terms.push_back("(!" + a + ")");
    for (const std::string& b : classes.booleans) {
      for (const char* op : {"&&", "||", "==", "!="})
        terms.push_back("(" + a + " " + op + " " + b + ")");
      for (const std::string& c : classes.booleans)
        terms.push_back("where(" + c + ", " + a + ", " + b + ")");
    }
  }
  // Declared inputs: an i32 input read along positions and an f32 one along heads, in the forms
  // above (few: each read costs the kernel registers).
  for (const char* read : {"ii[k]", "ff[h]"})
    for (const char* other : {"3", "2.5", "q"}) {
      terms.push_back(used(std::string(read) + " - " + other));
      terms.push_back(used("where(q > k, " + std::string(read) + ", " + other + ")"));
    }
  return terms;
}

// Joins terms with `op` as a balanced tree, so the depth grows with the logarithm of the count.
std::string balanced(const std::vector<std::string>& terms, size_t begin, size_t end,
                     const char* op) {
  if (end - begin == 1)
    return terms[begin];
  size_t mid = begin + (end - begin) / 2;
  return "(" + balanced(terms, begin, mid, op) + " " + op + " " + balanced(terms, mid, end, op) +
         ")";
}

// As few specs as the front end's size limits allow: each holds a mask and a score of up to
// kTermsPerExpression terms.
std::vector<std::string> sweepSpecs() {
  constexpr size_t kTermsPerExpression = 36; // about 250 syntax nodes each: two fit one spec
  const std::vector<std::string> maskTerms = sweepTerms(false), scoreTerms = sweepTerms(true);
  std::vector<std::string> specs;
  for (size_t i = 0; i < std::max(maskTerms.size(), scoreTerms.size()); i += kTermsPerExpression) {
    std::string text = "name: sweep" + std::to_string(specs.size()) +
                       "\nhead_dim: 64\nheads: {q: 8, kv: 2}\n"
                       "inputs: {ii: {dtype: i32, dims: [pos]}, ff: {dtype: f32, dims: [h]}}\n";
    if (i < maskTerms.size())
      text += "mask: \"" +
              balanced(maskTerms, i, std::min(i + kTermsPerExpression, maskTerms.size()), "||") +
              "\"\n";
    if (i < scoreTerms.size())
      text += "score: \"where(" +
              balanced(scoreTerms, i, std::min(i + kTermsPerExpression, scoreTerms.size()), "||") +
              ", score, -score)\"\n";
    specs.push_back(text);
  }
  return specs;
}

} // namespace

TEST(ExprBackendSweep, EveryAcceptedCombinationCompilesUnderNvrtc) {
  std::string error;
  Nvrtc* nvrtc = Nvrtc::get(&error);
  ASSERT_NE(nvrtc, nullptr) << error;
  const std::vector<std::string> specs = sweepSpecs();
  for (const char* targetName : {"sm_80", "sm_90a"}) {
    const Target target = *Target::byName(targetName, nullptr);
    for (const std::string& text : specs) {
      Diagnostics diags;
      std::optional<Spec> spec = parseSpecText(text, "sweep.yaml", diags);
      ASSERT_TRUE(spec) << renderAll(diags) << text;
      CompileOptions options;
      options.backward = true;
      Compiler pipeline;
      std::optional<CompiledKernel> kernel =
          pipeline.compile(*spec, target, Stage::CUDA, options, diags);
      ASSERT_TRUE(kernel) << targetName << "\n" << renderAll(diags) << text;
      // NVRTC's front end resolves every overload of every hook instantiation; code generation
      // and ptxas add nothing to that, and would take most of the time.
      NvrtcResult result = nvrtc->compile(kernel->cuda, spec->name + ".cu", embeddedTemplates(),
                                          targetName, {"-fdevice-syntax-only"});
      EXPECT_TRUE(result.ok) << targetName << "\n" << text << "\n" << result.log;
    }
  }
  RecordProperty("specs", int(specs.size()));
}
