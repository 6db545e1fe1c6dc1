// The whole pipeline (spec -> MLIR passes -> CUDA C++) on specs that parse but ask for odd things:
// extreme head dims, head counts, windows, dropout rates and scales, expressions that divide by
// zero or read no position, both targets, with and without the backward. Each must either compile
// or fail with diagnostics that say where (file:line:col) and what; none may crash the compiler or
// fail without a word. (SpecTest's RandomMutationsNeverCrash does the same for the parser alone,
// with mutations that mostly stop there.)
#include "compiler/Pipeline.h"
#include "compiler/Spec/Spec.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include <gtest/gtest.h>
#include <random>
#include <regex>
#include <string>
#include <vector>

using namespace attnc;

namespace {

std::vector<std::string> seedSpecs() {
  std::vector<std::string> seeds;
  for (const char* dir : {ATTNC_EXAMPLES_DIR, ATTNC_SOURCE_DIR "/test/kernel-specs"}) {
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
      if (llvm::StringRef(it->path()).ends_with(".yaml"))
        if (auto buffer = llvm::MemoryBuffer::getFile(it->path()))
          seeds.push_back((*buffer)->getBuffer().str());
  }
  return seeds;
}

// One value-level mutation: a number replaced by an extreme one, a field's value replaced, or a
// field added; the result mostly still parses, so that the passes see it.
std::string mutate(const std::string& text, std::mt19937& rng) {
  static const std::vector<std::string> numbers = {
      "0", "1", "2", "3", "7", "8", "16", "24", "40", "56", "64", "72", "96", "120", "128", "136",
      "184", "192", "200", "248", "256", "264", "512", "1024", "65536", "2147483647", "-1",
      "0.0", "0.5", "0.999", "1e-30", "1e30", "100000"};
  static const std::vector<std::string> fields = {
      "head_dim: 8", "head_dim: 256", "head_dim_v: 8", "head_dim_v: 256", "head_dim_v: 40",
      "heads: 1", "heads: {q: 64, kv: 1}", "heads: {q: 48, kv: 16}", "dtype: fp16",
      "dropout: 0.5", "dropout: {p: 0.1, rounds: 1}", "dropout: {p: 0.25, rounds: 10}",
      "scale: 1e-6", "scale: 1000", "mask: causal", "mask: {window: 1}",
      "mask: {window: 100000}", "mask: {prefix: 0}", "mask: {prefix: 7}",
      "mask: \"k == q\"", "mask: \"q - k < 3 && q >= k\"", "mask: \"false\"", "mask: \"true\"",
      "mask: \"(q * 7 + k) % 5 != 0\"", "mask: \"k <= 0\"", "mask: \"q / 0 == k\"",
      "score: \"score / 0\"", "score: \"score * 0\"", "score: \"tanh(score) * 1e30\"",
      "score: \"exp2(score)\"", "score: \"score - (q - k) * 0.5\"", "score: {softcap: 1e-3}",
      "score: alibi", "score: \"where(q > k, score, -score)\"", "score: \"-abs(q - k) * 1.0\""};
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, '\n');
  std::vector<std::string> lines(parts.begin(), parts.end());
  const int mutations = 1 + int(rng() % 3);
  for (int m = 0; m < mutations; ++m) {
    const size_t i = rng() % lines.size();
    switch (rng() % 3) {
    case 0: {  // a number replaced
      static const std::regex number(R"(-?[0-9]+(\.[0-9]+)?)");
      std::smatch match;
      if (std::regex_search(lines[i], match, number))
        lines[i] = match.prefix().str() + numbers[rng() % numbers.size()] + match.suffix().str();
      break;
    }
    case 1: {  // a top-level field replaced (a duplicate key is an error, also fine)
      const std::string field = fields[rng() % fields.size()];
      const std::string key = field.substr(0, field.find(':') + 1);
      bool replaced = false;
      for (std::string& line : lines)
        if (line.rfind(key, 0) == 0) {
          line = field;
          replaced = true;
          break;
        }
      if (!replaced) lines.push_back(field);
      break;
    }
    default:  // a line dropped
      if (lines.size() > 2) lines.erase(lines.begin() + long(i));
    }
  }
  return llvm::join(lines, "\n") + "\n";
}

}  // namespace

TEST(PipelineRobustness, OddSpecsCompileOrFailWithALocation) {
  constexpr int kThroughNvrtc = 4;
  const std::vector<std::string> seeds = seedSpecs();
  ASSERT_GE(seeds.size(), 20u);
  const Target hopper = *Target::byName("sm_90a", nullptr);
  const Target ampere = *Target::byName("sm_80", nullptr);
  std::mt19937 rng(20261204);
  int parsed = 0, compiled = 0, rejected = 0;
  for (int iteration = 0; iteration < 300; ++iteration) {
    const std::string text = mutate(seeds[rng() % seeds.size()], rng);
    Diagnostics parseDiags;
    std::optional<Spec> spec = parseSpecText(text, "mutant.yaml", parseDiags);
    if (!spec) continue;
    ++parsed;
    // The first few through NVRTC too (about a second each): the templates must take whatever
    // the passes accept.
    const Stage stage = parsed <= kThroughNvrtc ? Stage::Binary : Stage::CUDA;
    for (const Target* target : {&hopper, &ampere}) {
      CompileOptions options;
      options.backward = rng() % 2 == 0;
      Diagnostics diags;
      Compiler pipeline;
      std::optional<CompiledKernel> kernel = pipeline.compile(*spec, *target, stage, options, diags);
      if (kernel) {
        ++compiled;
        EXPECT_FALSE(kernel->cuda.empty()) << text;
        if (stage == Stage::Binary) EXPECT_FALSE(kernel->cubin.empty()) << text;
        continue;
      }
      ++rejected;
      ASSERT_FALSE(diags.empty()) << target->name << ": failed without a diagnostic\n" << text;
      for (const Diagnostic& diag : diags) {
        EXPECT_FALSE(diag.message.empty()) << text;
        EXPECT_EQ(diag.loc.file, "mutant.yaml") << diag.render() << text;
        EXPECT_GE(diag.loc.line, 1u) << target->name << ": no line\n" << diag.render() << text;
        EXPECT_GE(diag.loc.col, 1u) << target->name << ": no column\n" << diag.render() << text;
      }
    }
  }
  // The mutations must mostly reach the passes, and some odd specs must be refused there.
  EXPECT_GE(parsed, 150) << "the mutations stopped at the parser";
  EXPECT_GE(compiled, 100);
  RecordProperty("parsed", parsed);
  RecordProperty("compiled", compiled);
  RecordProperty("rejected", rejected);
}
