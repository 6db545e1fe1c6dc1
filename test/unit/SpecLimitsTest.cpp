// The front end's limits (compiler/Spec/Limits.h): input past each one is an error at the
// offending text, never a crash, a hang or an unbounded read; the largest input within them goes
// through the whole pipeline. The hostile inputs are generated here, at the sizes that crashed
// the front end before it had limits.
#include "compiler/Pipeline.h"
#include "compiler/Spec/Limits.h"
#include "compiler/Spec/Spec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace attnc;

namespace {

const std::string kHeader = "name: t\nhead_dim: 64\nheads: 8\n";

// `count` copies of `item` joined by `separator`.
std::string repeat(const std::string &item, const std::string &separator, size_t count) {
  std::vector<std::string> items(count, item);
  return llvm::join(items, separator);
}

// `count` copies of `leaf` joined by `op` as a balanced tree (depth about log2(count)).
std::string balanced(const std::string &leaf, const std::string &op, size_t count) {
  if (count == 1)
    return leaf;
  return "(" + balanced(leaf, op, count / 2) + op + balanced(leaf, op, count - count / 2) + ")";
}

// The one diagnostic of a spec that must fail.
Diagnostic onlyError(const std::string &text) {
  Diagnostics diags;
  std::optional<Spec> spec = parseSpecText(text, "t.yaml", diags);
  EXPECT_FALSE(spec.has_value());
  EXPECT_EQ(diags.size(), 1u) << renderAll(diags);
  return diags.empty() ? Diagnostic() : diags.front();
}

void expectAt(const Diagnostic &diag, unsigned line, unsigned col, const std::string &message) {
  EXPECT_EQ(diag.loc.file, "t.yaml");
  EXPECT_EQ(diag.loc.line, line) << diag.render();
  EXPECT_EQ(diag.loc.col, col) << diag.render();
  EXPECT_NE(diag.message.find(message), std::string::npos) << diag.render();
  EXPECT_FALSE(diag.sourceLine.empty()) << diag.render();
}

bool accepted(const std::string &text) {
  Diagnostics diags;
  bool ok = parseSpecText(text, "t.yaml", diags).has_value();
  EXPECT_TRUE(ok) << renderAll(diags);
  return ok;
}

} // namespace

// Flat chains of ~17,500 operands crashed the type checker (one recursion per operand). The
// error points at the operator that makes the chain one level too deep.
TEST(SpecLimits, LongChainsAreErrorsAtTheOperator) {
  const size_t kCrashed = 17500;
  struct Case {
    std::string field, prefix, operand, op;
  };
  for (const Case &c : {Case{"mask", "k <= ", "q", "+"}, Case{"mask", "", "k <= q", " && "},
                        Case{"score", "", "score", "+"}}) {
    std::string value = c.prefix + repeat(c.operand, c.op, kCrashed);
    Diagnostic diag = onlyError(kHeader + c.field + ": \"" + value + "\"\n");
    // A chain a op b op ... has one level per operator above its operands' own: the operator
    // that takes it past kMaxExprDepth is the one reported.
    size_t operandDepth = c.operand == "k <= q" ? 2 : 1;
    size_t operators = limits::kMaxExprDepth + 1 - operandDepth;
    size_t offset = c.prefix.size() + operators * c.operand.size() +
                    (operators - 1) * c.op.size() + c.op.find_first_not_of(' ');
    expectAt(diag, 4, unsigned(c.field.size() + 3 + offset + 1), "nested too deeply");
  }
}

TEST(SpecLimits, DepthLimitIsExact) {
  const unsigned depth = limits::kMaxExprDepth;
  EXPECT_TRUE(accepted(kHeader + std::string("score: \"") + repeat("score", "+", depth) + "\"\n"));
  onlyError(kHeader + std::string("score: \"") + repeat("score", "+", depth + 1) + "\"\n");
  // Parentheses and unary operators nest the parser itself.
  std::string parens = std::string(depth - 1, '(') + "score" + std::string(depth - 1, ')');
  EXPECT_TRUE(accepted(kHeader + std::string("score: \"") + parens + "\"\n"));
  // The value starts at column 9; the parser passes its depth at the token after `depth` levels.
  expectAt(onlyError(kHeader + std::string("score: \"(") + parens + ")\"\n"), 4, 9 + depth,
           "nested too deeply");
  std::string negations = std::string(depth, '-') + "score";
  expectAt(onlyError(kHeader + std::string("score: \"") + negations + "\"\n"), 4, 9 + depth,
           "nested too deeply");
}

TEST(SpecLimits, OperandsPerExpression) {
  const unsigned operands = limits::kMaxExprOperands;
  EXPECT_TRUE(accepted(kHeader + std::string("score: \"") + balanced("score", "+", operands) +
                       "\"\n"));
  Diagnostic diag = onlyError(kHeader + std::string("score: \"") +
                              balanced("score", "+", operands + 1) + "\"\n");
  EXPECT_NE(diag.message.find("more than " + std::to_string(operands) + " operands"),
            std::string::npos)
      << diag.render();
  EXPECT_EQ(diag.loc.line, 4u);
  EXPECT_NE(diag.sourceLine.substr(diag.loc.col - 1, 5), "") << diag.render();
  EXPECT_EQ(diag.sourceLine.substr(diag.loc.col - 1, 5), "score") << diag.render();
}

// The mask and score together: each within its own limits, too large as a pair.
TEST(SpecLimits, NodesPerSpec) {
  const unsigned operands = limits::kMaxExprOperands, nodes = limits::kMaxSpecExprNodes;
  // A score of n sums has 2n - 1 nodes; a mask of m comparisons (two operands each) 4m - 1.
  const unsigned sums = std::min(operands, (nodes + 1) / 2);
  const unsigned comparisons = std::min(operands / 2, (nodes + 1) / 4);
  if ((2 * sums - 1) + (4 * comparisons - 1) <= nodes)
    GTEST_SKIP() << "no pair of expressions within their own limits passes the spec's";
  std::string mask = "mask: \"" + balanced("(k <= q)", " && ", comparisons) + "\"\n";
  std::string score = "score: \"" + balanced("score", "+", sums) + "\"\n";
  EXPECT_TRUE(accepted(kHeader + mask));
  EXPECT_TRUE(accepted(kHeader + score));
  Diagnostic diag = onlyError(kHeader + mask + score);
  expectAt(diag, 5, 9, "operands and operators together");
}

// The largest expressions the limits accept compile to CUDA C++, forward and backward, on both
// targets: every walk after the front end (IR building, block classification, tiling, symbolic
// differentiation, the emitter) stays within them.
TEST(SpecLimits, LargestAcceptedExpressionsCompile) {
  const unsigned depth = limits::kMaxExprDepth, operands = limits::kMaxExprOperands;
  const unsigned nodes = limits::kMaxSpecExprNodes;
  const unsigned sums = std::min(operands, (nodes + 1) / 2);
  const unsigned comparisons = std::min(operands / 2, nodes / 8);
  const unsigned calls = std::min(operands, (nodes - (4 * comparisons - 1) + 1) / 3);
  const std::vector<std::string> specs = {
      // The deepest: chains as long as the depth allows, tanh nested as deep.
      kHeader + std::string("mask: \"") + repeat("k <= q", " && ", depth / 2) + "\"\n" +
          "score: \"" + repeat("score", " * ", depth - 1) + " + q\"\n",
      kHeader + std::string("score: \"") + repeat("tanh(", "", depth - 1) + "score" +
          std::string(depth - 1, ')') + "\"\n",
      // The widest: as many operands as an expression takes, nodes as many as a spec takes
      // (m comparisons are 4m - 1 nodes, t calls of tanh 3t - 1).
      kHeader + std::string("score: \"") + balanced("score", " * ", sums) + "\"\n",
      kHeader + std::string("mask: \"") + balanced("(k <= q)", " || ", comparisons) + "\"\n" +
          "score: \"" + balanced("tanh(score)", " + ", calls) + "\"\n",
  };
  for (const char *targetName : {"sm_80", "sm_90a"}) {
    const Target target = *Target::byName(targetName, nullptr);
    for (const std::string &text : specs) {
      Diagnostics diags;
      std::optional<Spec> spec = parseSpecText(text, "t.yaml", diags);
      ASSERT_TRUE(spec) << renderAll(diags) << text;
      CompileOptions options;
      options.backward = true;
      Compiler pipeline;
      std::optional<CompiledKernel> kernel =
          pipeline.compile(*spec, target, Stage::CUDA, options, diags);
      ASSERT_TRUE(kernel) << targetName << "\n" << renderAll(diags) << text;
      EXPECT_TRUE(kernel->backward.has_value());
    }
  }
}

// YAML nested ~500,000 deep with complex keys crashed LLVM's parser (it recurses per level).
// Every kind of nesting is refused before it, with the place where the limit is passed.
TEST(SpecLimits, DeepYamlIsAnErrorAtItsPlace) {
  const unsigned limit = limits::kMaxYamlNesting;
  const std::string deep = "nested more than " + std::to_string(limit) + " levels deep";
  struct Case {
    std::string text;
    unsigned line, col;
  };
  const size_t kKeys = (limits::kMaxSpecBytes - kHeader.size() - 16) / 2;
  std::string indented = kHeader + std::string("x:\n");
  for (unsigned i = 1; i < 1000; ++i)
    indented += std::string(i, ' ') + "a:\n";
  const Case cases[] = {
      // Complex keys as many as a file of the size limit holds (about 520,000).
      {kHeader + std::string("mask: ") + repeat("?", " ", kKeys) + " a\n", 4, 7 + 2 * (limit - 1)},
      {kHeader + repeat("?", " ", kKeys) + " a\n", 4, 1 + 2 * (limit - 1)},
      {kHeader + std::string("x:\n  ") + repeat("-", " ", 100000) + " a\n", 5, 3 + 2 * (limit - 2)},
      {kHeader + std::string("x: ") + std::string(100000, '[') + std::string(100000, ']') + "\n",
       4, 4 + limit - 1},
      {kHeader + std::string("x: ") + repeat("{a: [", "", 50000) + "\n", 4, 4 + 5 * 7 + 4},
      {indented, 4 + limit, limit + 1},
  };
  for (const Case &c : cases) {
    Diagnostic diag = onlyError(c.text);
    expectAt(diag, c.line, c.col, deep);
  }
  // The real nesting of a spec is far inside the limit.
  EXPECT_TRUE(accepted(kHeader + std::string("inputs:\n  doc:\n    dtype: i32\n    dims:\n"
                                             "      - pos\nmask: \"doc[q] == doc[k]\"\n")));
}

// Aliases are never expanded: a billion-laughs document costs its own length, and an alias where
// a value belongs is an error at the alias.
TEST(SpecLimits, AliasesAreNotExpanded) {
  std::string laughs = kHeader;
  laughs += "inputs:\n  l0: &l0 [pos, pos, pos, pos, pos, pos, pos, pos, pos]\n";
  for (int i = 1; i < 10; ++i)
    laughs += "  l" + std::to_string(i) + ": &l" + std::to_string(i) + " [" +
              repeat("*l" + std::to_string(i - 1), ", ", 9) + "]\n";
  Diagnostics diags;
  EXPECT_FALSE(parseSpecText(laughs, "t.yaml", diags));
  ASSERT_FALSE(diags.empty());
  for (const Diagnostic &diag : diags)
    EXPECT_GE(diag.loc.line, 4u) << diag.render();
  std::string alias = kHeader + std::string("inputs:\n  doc: &d {dtype: i32, dims: [pos]}\n"
                                            "  doc2: *d\n");
  expectAt(onlyError(alias), 6, 3, "got an alias");
}

// A name of 100,000 characters corrupted NVRTC's heap; names stem C symbols.
TEST(SpecLimits, NamesAreBounded) {
  const size_t limit = limits::kMaxNameLength;
  EXPECT_TRUE(accepted("name: " + std::string(limit, 'n') + "\nhead_dim: 64\nheads: 8\n"));
  for (size_t length : {limit + 1, size_t(100000)})
    expectAt(onlyError("name: " + std::string(length, 'n') + "\nhead_dim: 64\nheads: 8\n"), 1, 7,
             "at most " + std::to_string(limit) + " characters");
  std::string input = std::string(limits::kMaxInputNameLength + 1, 'i');
  expectAt(onlyError(kHeader + "inputs: {" + input + ": {dtype: i32, dims: [pos]}}\n"), 4, 10,
           "at most " + std::to_string(limits::kMaxInputNameLength) + " characters");
  // One input more than the kernels' parameter block holds.
  std::string inputs = "inputs:\n";
  for (int i = 0; i <= 8; ++i)
    inputs += "  in" + std::to_string(i) + ": {dtype: i32, dims: [pos]}\n";
  expectAt(onlyError(kHeader + inputs), 13, 3, "at most 8 inputs");
}

// Spec files are read at most one byte past the size limit, and only regular files and pipes:
// `attnc compile /dev/zero` read without bound, and a FIFO nobody writes to must not hang.
TEST(SpecLimits, SpecFilesAreReadBounded) {
  auto fileError = [](const std::string &path) {
    Diagnostics diags;
    EXPECT_FALSE(parseSpecFile(path, diags));
    EXPECT_EQ(diags.size(), 1u);
    return diags.empty() ? std::string() : diags.front().render();
  };
  EXPECT_NE(fileError("/dev/zero").find("/dev/zero: error: cannot read spec file: not a regular "
                                        "file or a pipe"),
            std::string::npos);
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("attnc-spec-limits", dir));
  EXPECT_NE(fileError(dir.str().str()).find("it is a directory"), std::string::npos);

  std::string big = (dir + "/big.yaml").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(big, ec);
    ASSERT_FALSE(ec);
    out << kHeader << "# " << std::string(limits::kMaxSpecBytes, 'x') << "\n";
  }
  // Reported where the text crosses the limit, its line shown as a window around the caret.
  const std::string bigError = fileError(big);
  const size_t crossing = limits::kMaxSpecBytes - kHeader.size() + 1;
  EXPECT_NE(bigError.find(big + ":4:" + std::to_string(crossing) +
                          ": error: spec is larger than"),
            std::string::npos)
      << bigError.substr(0, 400);
  EXPECT_LT(bigError.size(), 600u);

  // Nobody has the FIFO open for writing: the read ends at once with an empty spec.
  std::string fifo = (dir + "/fifo.yaml").str();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(fileError(fifo).find("empty spec"), std::string::npos);

  llvm::sys::fs::remove(big);
  llvm::sys::fs::remove(fifo);
  llvm::sys::fs::remove(dir);
}

// Scales outside float32 gave inf or a late error without a place; every numeric field is checked
// at its value.
TEST(SpecLimits, NumbersOutsideTheirRangeAreErrorsAtTheValue) {
  struct Case {
    std::string line, message;
  };
  const std::string normal = "representable as a normal float32";
  const Case cases[] = {
      {"scale: 1e308", normal},
      {"scale: 1e-320", normal},
      {"scale: 1e-39", normal},
      {"scale: 0", normal},
      {"scale: -0.5", normal},
      {"scale: inf", "got 'inf'"},
      {"scale: .nan", "got '.nan'"},
      {"scale: 1e400", "got '1e400'"},
      {"score: {softcap: 1e39}", normal},
      {"dropout: 1e-320", "rounds to 0"},
      {"dropout: 1.5", "must be in [0, 1)"},
      {"mask: {window: 2147483648}", "must be in [1, 2147483647]"},
      {"mask: {window: 99999999999999999999}", "expected an integer"},
      {"mask: {prefix: -1}", "must be in [0, 2147483647]"},
      {"mask: {window: 1.5}", "expected an integer"},
  };
  for (const Case &c : cases) {
    Diagnostic diag = onlyError(kHeader + c.line + "\n");
    EXPECT_EQ(diag.loc.line, 4u) << c.line << "\n" << diag.render();
    EXPECT_EQ(diag.loc.col, c.line.find_last_of(" ") + 2) << c.line << "\n" << diag.render();
    EXPECT_NE(diag.message.find(c.message), std::string::npos) << c.line << "\n" << diag.render();
  }
  for (const char *line : {"head_dim: 1e3", "head_dim: 4294967360", "heads: 2147483648",
                           "heads: -8", "heads: 8.0"}) {
    std::string text = std::string("name: t\n") + line + "\n" +
                       (llvm::StringRef(line).starts_with("head_dim") ? "heads: 8\n"
                                                                      : "head_dim: 64\n");
    Diagnostic diag = onlyError(text);
    EXPECT_EQ(diag.loc.line, 2u) << line << "\n" << diag.render();
    EXPECT_EQ(diag.loc.col, llvm::StringRef(line).find(' ') + 2) << line << "\n" << diag.render();
  }
  // Literals inside expressions: at their column.
  expectAt(onlyError(kHeader + std::string("mask: \"k <= q + 1e400\"\n")), 4, 17, "out of range");
  expectAt(onlyError(kHeader + std::string("score: \"score * 1e-40\"\n")), 4, 17, "out of range");
  expectAt(onlyError(kHeader + std::string("mask: \"k <= q + 2147483648\"\n")), 4, 17,
           "does not fit in i32");
  // The builder checks the same values and names the spec.
  Diagnostics diags;
  EXPECT_FALSE(SpecBuilder("big").headDim(64).heads(8).scale(1e308).build(diags));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_NE(diags.front().render().find("spec 'big': error: scale: must be"), std::string::npos)
      << diags.front().render();
}
