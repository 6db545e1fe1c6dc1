// Unit tests of the spec front end: good specs of every mask and score kind, the builder, expression
// types and promotion, exact diagnostics, the bad-spec corpus in test/spec-errors, and a mutation
// test that no input crashes the reader.
#include "compiler/Spec/Expr.h"
#include "compiler/Spec/Spec.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

using namespace attnc;

namespace {

std::optional<Spec> parse(llvm::StringRef text, Diagnostics &diags) {
  return parseSpecText(text, "t.yaml", diags);
}

Spec parseOk(llvm::StringRef text) {
  Diagnostics diags;
  std::optional<Spec> spec = parse(text, diags);
  EXPECT_TRUE(spec.has_value()) << renderAll(diags);
  // Warnings (raw q beside k, say) are for the warning tests; these test what was read.
  EXPECT_FALSE(hasErrors(diags)) << renderAll(diags);
  return spec ? *spec : Spec();
}

// All rendered diagnostics of a spec that must fail.
std::string errorsOf(llvm::StringRef text) {
  Diagnostics diags;
  std::optional<Spec> spec = parse(text, diags);
  EXPECT_FALSE(spec.has_value());
  EXPECT_FALSE(diags.empty());
  return renderAll(diags);
}

const char *kHeader = "name: t\nhead_dim: 64\nheads: {q: 8, kv: 2}\n";

std::string withHeader(const std::string &rest) { return kHeader + rest; }

// Evaluates a typed expression at one point; booleans are 0/1. Test-only reference semantics.
double evaluate(const expr::Node &node, const std::map<std::string, double> &vars,
                const std::map<std::string, std::vector<double>> &inputs = {}) {
  using expr::Kind;
  using expr::Op;
  auto child = [&](size_t i) { return evaluate(*node.children[i], vars, inputs); };
  switch (node.kind) {
  case Kind::IntLit: return double(node.intValue);
  case Kind::FloatLit: return node.floatValue;
  case Kind::BoolLit: return node.boolValue;
  case Kind::Var: return vars.at(node.name);
  case Kind::ToFloat: return child(0);
  case Kind::InputIndex: {
    // Test inputs are flattened with the last dim fastest and 16 entries per dim.
    size_t index = 0;
    for (size_t i = 0; i < node.children.size(); ++i)
      index = index * 16 + size_t(child(i));
    return inputs.at(node.name).at(index);
  }
  case Kind::Unary: return node.op == Op::Neg ? -child(0) : !child(0);
  case Kind::Binary: {
    double a = child(0), b = child(1);
    bool isInt = node.children[0]->type == ScalarType::I32;
    switch (node.op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return isInt ? std::trunc(a / b) : a / b;
    case Op::Rem: return std::fmod(a, b);
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::And: return a && b;
    case Op::Or: return a || b;
    default: return NAN;
    }
  }
  case Kind::Call:
    switch (node.func) {
    case expr::Func::Where: return child(0) ? child(1) : child(2);
    case expr::Func::Tanh: return std::tanh(child(0));
    case expr::Func::Exp: return std::exp(child(0));
    case expr::Func::Exp2: return std::exp2(child(0));
    case expr::Func::Log: return std::log(child(0));
    case expr::Func::Sqrt: return std::sqrt(child(0));
    case expr::Func::Abs: return std::fabs(child(0));
    case expr::Func::Min: return std::min(child(0), child(1));
    case expr::Func::Max: return std::max(child(0), child(1));
    }
  }
  return NAN;
}

std::string printed(llvm::StringRef text, expr::Role role, const std::vector<InputDecl> &inputs = {}) {
  expr::ParseResult result = expr::parse(text, role, inputs);
  if (!result.root) {
    std::string errors;
    for (const expr::ParseError &error : result.errors)
      errors += std::to_string(error.offset) + ": " + error.message + "\n";
    return "ERROR " + errors;
  }
  return expr::print(*result.root);
}

std::vector<InputDecl> testInputs() {
  InputDecl doc{"doc", ScalarType::I32, {InputDim::Pos}, {}};
  InputDecl slopes{"slopes", ScalarType::F32, {InputDim::H}, {}};
  InputDecl bias{"bias", ScalarType::F32, {InputDim::B, InputDim::H}, {}};
  return {doc, slopes, bias};
}

} // namespace

// ---- Good specs ----

TEST(SpecParse, FullSpecFromTheDesign) {
  Spec spec = parseOk(R"yaml(
name: gqa_softcap_causal        # kernel symbol stem
head_dim: 128
dtype: bf16
heads: {q: 32, kv: 8}
scale: auto
mask: causal
score: "30 * tanh(score / 30)"
dropout: 0.1
inputs: {doc: {dtype: i32, dims: [pos]}, slopes: {dtype: f32, dims: [h]}}
)yaml");
  EXPECT_EQ(spec.name, "gqa_softcap_causal");
  EXPECT_EQ(spec.headDim, 128);
  EXPECT_EQ(spec.headDimV, 128);
  EXPECT_EQ(spec.dtype, DType::BF16);
  EXPECT_EQ(spec.headsQ, 32);
  EXPECT_EQ(spec.headsKV, 8);
  EXPECT_FALSE(spec.scale.has_value());
  EXPECT_DOUBLE_EQ(spec.effectiveScale(), 1.0 / std::sqrt(128.0));
  EXPECT_EQ(spec.mask.kind, MaskSpec::Causal);
  EXPECT_FALSE(spec.mask.topLeft);
  ASSERT_TRUE(spec.mask.expr);
  EXPECT_EQ(expr::print(*spec.mask.expr), "(k <= ((q + kv_len) - q_len))");
  EXPECT_EQ(spec.score.kind, ScoreSpec::Expr);
  EXPECT_EQ(spec.score.exprText, "30 * tanh(score / 30)");
  EXPECT_EQ(expr::print(*spec.score.expr), "(float(30) * tanh((score / float(30))))");
  EXPECT_DOUBLE_EQ(spec.dropout, 0.1);
  ASSERT_EQ(spec.inputs.size(), 2u);
  ASSERT_NE(spec.findInput("slopes"), nullptr);
  EXPECT_EQ(spec.findInput("slopes")->type, ScalarType::F32);
  EXPECT_EQ(spec.findInput("doc")->dims, std::vector<InputDim>{InputDim::Pos});
  EXPECT_EQ(spec.findInput("doc")->loc.line, 10u);
  EXPECT_EQ(spec.findInput("nope"), nullptr);
}

TEST(SpecParse, DefaultsAndShorthands) {
  Spec spec = parseOk("name: plain\nhead_dim: 64\nheads: 4\n");
  EXPECT_EQ(spec.headsQ, 4);
  EXPECT_EQ(spec.headsKV, 4);
  EXPECT_EQ(spec.headDimV, 64);
  EXPECT_EQ(spec.dtype, DType::BF16);
  EXPECT_EQ(spec.mask.kind, MaskSpec::None);
  EXPECT_EQ(spec.score.kind, ScoreSpec::None);
  EXPECT_FALSE(spec.mask.expr);
  EXPECT_EQ(spec.dropout, 0);

  spec = parseOk("name: x\nhead_dim: 192\nhead_dim_v: 128\ndtype: fp16\nheads: {q: 6}\n"
                 "scale: 0.125\nmask: none\nscore: none\n");
  EXPECT_EQ(spec.headDimV, 128);
  EXPECT_EQ(spec.dtype, DType::FP16);
  EXPECT_EQ(spec.headsKV, 6);
  EXPECT_DOUBLE_EQ(spec.effectiveScale(), 0.125);
}

// Head dims: every multiple of 8 from 8 to 256, for Q/K and V/O alike; 0, 4, 12 and 264 not.
TEST(SpecParse, HeadDimsAreTheMultiplesOfEightUpTo256) {
  for (int d = 8; d <= 256; d += 8) {
    Spec spec = parseOk("name: x\nhead_dim: " + std::to_string(d) + "\nhead_dim_v: " +
                        std::to_string(264 - d) + "\nheads: 4\n");
    EXPECT_EQ(spec.headDim, d);
    EXPECT_EQ(spec.headDimV, 264 - d);
  }
  for (int bad : {0, 4, 12, 264})
    EXPECT_NE(errorsOf("name: t\nhead_dim: " + std::to_string(bad) + "\nheads: 4\n")
                  .find("head_dim: must be a multiple of 8 in [8, 256], got " + std::to_string(bad)),
              std::string::npos)
        << bad;
}

TEST(SpecParse, EveryMaskKind) {
  Spec spec = parseOk(withHeader("mask: {causal: top_left}\n"));
  EXPECT_EQ(spec.mask.kind, MaskSpec::Causal);
  EXPECT_TRUE(spec.mask.topLeft);
  EXPECT_EQ(spec.mask.exprText, "k <= q");

  spec = parseOk(withHeader("mask: {causal: bottom_right}\n"));
  EXPECT_FALSE(spec.mask.topLeft);

  spec = parseOk(withHeader("mask: {window: 256}\n"));
  EXPECT_EQ(spec.mask.kind, MaskSpec::Window);
  EXPECT_EQ(spec.mask.window, 256);
  EXPECT_EQ(spec.mask.exprText, "k <= q + kv_len - q_len && k > q + kv_len - q_len - 256");

  spec = parseOk(withHeader("mask: {prefix: 0}\n"));
  EXPECT_EQ(spec.mask.kind, MaskSpec::Prefix);
  EXPECT_EQ(spec.mask.prefix, 0);

  spec = parseOk(withHeader("mask: {document: doc}\ninputs: {doc: {dtype: i32, dims: [pos]}}\n"));
  EXPECT_EQ(spec.mask.kind, MaskSpec::Document);
  EXPECT_EQ(spec.mask.documentInput, "doc");
  EXPECT_FALSE(spec.mask.documentCausal);
  EXPECT_EQ(expr::print(*spec.mask.expr), "(doc[((q + kv_len) - q_len)] == doc[k])");

  spec = parseOk(withHeader("mask: {document: d, causal: true}\n"
                            "inputs:\n  d:\n    dtype: i32\n    dims: [b, pos]\n"));
  EXPECT_TRUE(spec.mask.documentCausal);
  EXPECT_EQ(spec.mask.exprText,
            "d[b, q + kv_len - q_len] == d[b, k] && k <= q + kv_len - q_len");

  spec = parseOk(withHeader("mask: \"doc[q] == doc[k] && q >= k\"\n"
                            "inputs: {doc: {dtype: i32, dims: [pos]}}\n"));
  EXPECT_EQ(spec.mask.kind, MaskSpec::Expr);
  EXPECT_EQ(spec.mask.expr->type, ScalarType::I1);
  EXPECT_EQ(expr::print(*spec.mask.expr), "((doc[q] == doc[k]) && (q >= k))");
}

TEST(SpecParse, EveryScoreKind) {
  Spec spec = parseOk(withHeader("score: {softcap: 50}\n"));
  EXPECT_EQ(spec.score.kind, ScoreSpec::Softcap);
  EXPECT_EQ(spec.score.softcap, 50);
  EXPECT_EQ(spec.score.exprText, "50.0 * tanh(score / 50.0)");
  EXPECT_EQ(spec.score.expr->type, ScalarType::F32);

  spec = parseOk(withHeader("score: alibi\n"));
  EXPECT_EQ(spec.score.kind, ScoreSpec::Alibi);
  EXPECT_TRUE(spec.score.alibiSlopes.empty());
  ASSERT_TRUE(spec.score.expr);

  spec = parseOk(withHeader("score: {alibi: slopes}\ninputs: {slopes: {dtype: f32, dims: [h]}}\n"));
  EXPECT_EQ(spec.score.alibiSlopes, "slopes");
  EXPECT_EQ(expr::print(*spec.score.expr),
            "(score - (slopes[h] * float(abs((((q + kv_len) - q_len) - k)))))");

  spec = parseOk(withHeader("score: q - k\n"));
  EXPECT_EQ(spec.score.kind, ScoreSpec::Expr);
  EXPECT_EQ(expr::print(*spec.score.expr), "float((q - k))");
}

// The builtin masks mean what MaskSpec documents, checked point by point.
TEST(SpecParse, BuiltinMasksMatchTheirDefinitions) {
  Spec causal = parseOk(withHeader("mask: causal\n"));
  Spec topLeft = parseOk(withHeader("mask: {causal: top_left}\n"));
  Spec window = parseOk(withHeader("mask: {window: 3}\n"));
  Spec prefix = parseOk(withHeader("mask: {prefix: 2}\n"));
  for (int qLen : {1, 5, 8})
    for (int kvLen : {5, 8, 11})
      for (int q = 0; q < qLen; ++q)
        for (int k = 0; k < kvLen; ++k) {
          std::map<std::string, double> vars{{"b", 0},        {"h", 0},         {"q", q},
                                             {"k", k},        {"q_len", qLen}, {"kv_len", kvLen}};
          int aligned = q + kvLen - qLen;
          EXPECT_EQ(evaluate(*causal.mask.expr, vars), k <= aligned);
          EXPECT_EQ(evaluate(*topLeft.mask.expr, vars), k <= q);
          EXPECT_EQ(evaluate(*window.mask.expr, vars), aligned - 3 < k && k <= aligned);
          EXPECT_EQ(evaluate(*prefix.mask.expr, vars), k < 2 || k <= aligned);
        }
}

TEST(SpecParse, StandardAlibiSlopes) {
  std::vector<double> eight = standardAlibiSlopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(eight[i], std::exp2(-(i + 1)));
  // From the ALiBi reference code, get_slopes(12).
  std::vector<double> twelve = standardAlibiSlopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  EXPECT_DOUBLE_EQ(twelve[7], 1.0 / 256);
  EXPECT_DOUBLE_EQ(twelve[8], std::exp2(-0.5));
  EXPECT_DOUBLE_EQ(twelve[11], std::exp2(-3.5));

  // The builtin score expression computes the same slopes: score - slope * |q - k| at q-k = 1.
  for (int heads : {8, 12, 6, 1}) {
    Spec spec = parseOk("name: a\nhead_dim: 64\nheads: " + std::to_string(heads) +
                        "\nscore: alibi\n");
    std::vector<double> slopes = standardAlibiSlopes(heads);
    for (int h = 0; h < heads; ++h) {
      std::map<std::string, double> vars{{"b", 0}, {"h", h},     {"q", 3},      {"k", 2},
                                         {"q_len", 4}, {"kv_len", 4}, {"score", 0}};
      EXPECT_NEAR(evaluate(*spec.score.expr, vars), -slopes[h], 1e-12) << heads << " " << h;
    }
  }
}

TEST(SpecParse, ExpressionStylesAndBlockScalars) {
  const char *inputs = "inputs: {doc: {dtype: i32, dims: [pos]}}\n";
  for (const char *mask : {"mask: 'doc[q] == doc[k]'\n", "mask: doc[q] == doc[k]\n",
                           "mask: |\n  doc[q] == doc[k]\n", "mask: >-\n  doc[q] ==\n  doc[k]\n",
                           "mask: doc[q] ==\n  doc[k]\n"}) {
    Spec spec = parseOk(withHeader(mask) + inputs);
    ASSERT_TRUE(spec.mask.expr) << mask;
    EXPECT_EQ(expr::print(*spec.mask.expr), "(doc[q] == doc[k])") << mask;
  }
}

TEST(SpecParse, ExpressionNodesKnowTheirFilePosition) {
  Spec spec = parseOk(withHeader("score: \"30 * tanh(score / 30)\"\n"));
  const expr::Node &mul = *spec.score.expr;
  EXPECT_EQ(mul.loc.file, "t.yaml");
  EXPECT_EQ(mul.loc.line, 4u);
  EXPECT_EQ(mul.loc.col, 12u); // the '*'
  EXPECT_EQ(mul.children[1]->loc.col, 14u); // tanh
}

// ---- Builder ----

TEST(SpecBuilder, BuildsTheSameSpecAsYaml) {
  Diagnostics diags;
  std::optional<Spec> spec = SpecBuilder("gqa")
                                 .headDim(128)
                                 .heads(32, 8)
                                 .dtype(DType::FP16)
                                 .document("doc", /*causal=*/true)
                                 .score("30 * tanh(score / 30)")
                                 .dropout(0.1)
                                 .input("doc", ScalarType::I32, {InputDim::B, InputDim::Pos})
                                 .build(diags);
  ASSERT_TRUE(spec) << renderAll(diags);
  EXPECT_EQ(spec->headDimV, 128);
  EXPECT_EQ(spec->headsKV, 8);
  EXPECT_EQ(spec->mask.kind, MaskSpec::Document);
  EXPECT_TRUE(spec->mask.expr);
  EXPECT_EQ(expr::print(*spec->score.expr), "(float(30) * tanh((score / float(30))))");

  Spec fromYaml = parseOk("name: gqa\nhead_dim: 128\nheads: {q: 32, kv: 8}\ndtype: fp16\n"
                          "mask: {document: doc, causal: true}\nscore: 30 * tanh(score / 30)\n"
                          "dropout: 0.1\ninputs: {doc: {dtype: i32, dims: [b, pos]}}\n");
  EXPECT_EQ(expr::print(*fromYaml.mask.expr), expr::print(*spec->mask.expr));
  EXPECT_EQ(expr::print(*fromYaml.score.expr), expr::print(*spec->score.expr));
}

TEST(SpecBuilder, EveryKind) {
  auto base = [] { return SpecBuilder("k").headDim(64).heads(4); };
  Diagnostics diags;
  EXPECT_TRUE(base().causal(true).build(diags));
  EXPECT_TRUE(base().window(128).softcap(30).build(diags));
  EXPECT_TRUE(base().prefix(16).alibi().build(diags));
  EXPECT_TRUE(base()
                  .mask("q + kv_len - q_len >= k")
                  .alibi("s")
                  .input("s", ScalarType::F32, {InputDim::H})
                  .build(diags));
  EXPECT_TRUE(base().scale(0.5).headDimV(32).build(diags));
  EXPECT_TRUE(diags.empty()) << renderAll(diags);
}

TEST(SpecBuilder, DiagnosticsNameTheSpecAndField) {
  Diagnostics diags;
  EXPECT_FALSE(SpecBuilder("x").headDim(100).heads(4).build(diags));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].render(),
            "spec 'x': error: head_dim: must be a multiple of 8 in [8, 256], got 100; did you "
            "mean 96 or 104?\n");

  diags.clear();
  EXPECT_FALSE(SpecBuilder("x").headDim(64).heads(4).mask("q >= kk").build(diags));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].render(), "spec 'x': error: mask: unknown identifier 'kk'\n"
                               "q >= kk\n"
                               "     ^\n");

  diags.clear();
  EXPECT_FALSE(SpecBuilder("1x").headDim(64).heads(6, 4).dropout(1).window(0).softcap(-1)
                   .input("q", ScalarType::I1, {}).build(diags));
  std::string all = renderAll(diags);
  for (const char *expected :
       {"spec '1x': error: name: must be an identifier", "heads.kv: must divide heads.q (6)",
        "dropout: must be in [0, 1), got 1", "mask: window must be in [1, 2147483647], got 0",
        "score: softcap must be a positive number representable as a normal float32 "
        "(1.17549435e-38 to 3.40282347e+38), got -1", "inputs: 'q' is a reserved name",
        "inputs.q.dtype: must be i32 or f32, got i1", "inputs.q.dims: needs at least one"})
    EXPECT_NE(all.find(expected), std::string::npos) << expected << "\nin\n" << all;
}

// Dropout resolves to 1/256 in the kernels (philox.h): the smallest and largest p that do not
// round to 0 or 1 build, the ones just past them do not.
TEST(SpecParse, DropoutRounds) {
  // 7 Philox rounds by default, in the shorthand and the mapping alike; 10 when asked.
  EXPECT_EQ(parseOk("name: x\nhead_dim: 64\nheads: 4\ndropout: 0.1\n").dropoutRounds, 7);
  Spec spec = parseOk("name: x\nhead_dim: 64\nheads: 4\ndropout: {p: 0.1}\n");
  EXPECT_DOUBLE_EQ(spec.dropout, 0.1);
  EXPECT_EQ(spec.dropoutRounds, 7);
  spec = parseOk("name: x\nhead_dim: 64\nheads: 4\ndropout: {p: 0.25, rounds: 10}\n");
  EXPECT_DOUBLE_EQ(spec.dropout, 0.25);
  EXPECT_EQ(spec.dropoutRounds, 10);
}

TEST(SpecBuilder, DropoutRoundsSevenToTen) {
  for (int64_t rounds : {7, 8, 9, 10}) {
    Diagnostics diags;
    std::optional<Spec> spec =
        SpecBuilder("x").headDim(64).heads(4).dropout(0.1, rounds).build(diags);
    ASSERT_TRUE(spec) << rounds << ": " << renderAll(diags);
    EXPECT_EQ(spec->dropoutRounds, rounds);
  }
  for (int64_t rounds : {0, 6, 11}) {
    Diagnostics diags;
    EXPECT_FALSE(SpecBuilder("x").headDim(64).heads(4).dropout(0.1, rounds).build(diags));
    ASSERT_EQ(diags.size(), 1u);
    EXPECT_NE(diags[0].render().find("spec 'x': error: dropout.rounds: must be an integer in "
                                     "[7, 10]"),
              std::string::npos)
        << diags[0].render();
  }
}

TEST(SpecBuilder, DropoutWithinTheKernelsResolution) {
  for (double p : {1.0 / 512, 0.1, 0.5, 510.9 / 512}) {
    Diagnostics diags;
    EXPECT_TRUE(SpecBuilder("x").headDim(64).heads(4).dropout(p).build(diags))
        << p << ": " << renderAll(diags);
  }
  const std::pair<double, const char *> bad[] = {
      {0.0019, "dropout: 0.0019 rounds to 0 at the kernels' resolution of 1/256"},
      {511.0 / 512, "dropout: 0.998047 rounds to 1 at the kernels' resolution of 1/256"}};
  for (const auto &[p, message] : bad) {
    Diagnostics diags;
    EXPECT_FALSE(SpecBuilder("x").headDim(64).heads(4).dropout(p).build(diags));
    ASSERT_EQ(diags.size(), 1u);
    EXPECT_NE(diags[0].render().find(message), std::string::npos) << diags[0].render();
  }
}

// ---- Expressions: types and promotion ----

TEST(Expr, TypesAndPromotion) {
  auto inputs = testInputs();
  EXPECT_EQ(printed("slopes[h] * (q - k)", expr::Role::Score, inputs),
            "(slopes[h] * float((q - k)))");
  EXPECT_EQ(printed("q / 2 % 3", expr::Role::Mask, inputs), "ERROR 0: a mask expression must be "
                                                            "a boolean (i1), got i32\n");
  EXPECT_EQ(printed("where(q > k, 1, 2.5)", expr::Role::Score), "where((q > k), float(1), 2.5)");
  EXPECT_EQ(printed("where(q > k, true, k == 0)", expr::Role::Mask),
            "where((q > k), true, (k == 0))");
  EXPECT_EQ(printed("min(q, k) + max(1, score)", expr::Role::Score),
            "(float(min(q, k)) + max(float(1), score))");
  EXPECT_EQ(printed("abs(q - k)", expr::Role::Score), "float(abs((q - k)))");
  EXPECT_EQ(printed("exp2(q) + sqrt(2) + log(.5) + exp(1e-3)", expr::Role::Score),
            "(((exp2(float(q)) + sqrt(float(2))) + log(0.5)) + exp(0.001))");
  EXPECT_EQ(printed("-score + -1", expr::Role::Score), "((-score) + float((-1)))");
  EXPECT_EQ(printed("!(q < k) == true", expr::Role::Mask), "((!(q < k)) == true)");
  EXPECT_EQ(printed("bias[b, h] < 0.5 || doc[k] != 3", expr::Role::Mask, inputs),
            "((bias[b, h] < 0.5) || (doc[k] != 3))");

  expr::ParseResult result = expr::parse("q + 1.5", expr::Role::Score, {});
  ASSERT_TRUE(result.root);
  const expr::Node &add = *result.root;
  EXPECT_EQ(add.kind, expr::Kind::Binary);
  EXPECT_EQ(add.op, expr::Op::Add);
  EXPECT_EQ(add.type, ScalarType::F32);
  EXPECT_EQ(add.children[0]->kind, expr::Kind::ToFloat);
  EXPECT_EQ(add.children[0]->children[0]->kind, expr::Kind::Var);
  EXPECT_EQ(add.children[0]->children[0]->type, ScalarType::I32);
  EXPECT_EQ(add.children[1]->kind, expr::Kind::FloatLit);
  EXPECT_EQ(add.children[1]->floatValue, 1.5);
  EXPECT_EQ(add.loc.col, 3u);
}

TEST(Expr, PrecedenceIsC) {
  EXPECT_EQ(printed("q - k * 2 < 3 || !(k > q) && true", expr::Role::Mask),
            "(((q - (k * 2)) < 3) || ((!(k > q)) && true))");
  EXPECT_EQ(printed("q - k - 1 == 0 == true", expr::Role::Mask), "((((q - k) - 1) == 0) == true)");
  EXPECT_EQ(printed("-q * -k <= --k", expr::Role::Mask), "(((-q) * (-k)) <= (-(-k)))");
}

TEST(Expr, ErrorsPointAtTheToken) {
  auto inputs = testInputs();
  auto first = [&](llvm::StringRef text, expr::Role role = expr::Role::Mask) {
    expr::ParseResult result = expr::parse(text, role, inputs);
    EXPECT_FALSE(result.root) << text.str();
    if (result.errors.empty())
      return std::string("no error");
    return std::to_string(result.errors[0].offset) + ": " + result.errors[0].message;
  };
  EXPECT_EQ(first("q >= k)"), "6: unbalanced parenthesis: ')' has no matching '('");
  EXPECT_EQ(first("(q >= k"), "0: unbalanced parenthesis: '(' is never closed");
  EXPECT_EQ(first("q >= k k"), "7: unexpected 'k' after a complete expression (missing operator?)");
  EXPECT_EQ(first("q >= "), "5: expected a value, got the end of the expression");
  EXPECT_EQ(first(""), "0: empty expression");
  EXPECT_EQ(first("q = k"), "2: unexpected '=': did you mean '=='?");
  EXPECT_EQ(first("q > k ? 1 : 0"), "6: unexpected '?': write a conditional as where(condition, "
                                    "then, else)");
  EXPECT_EQ(first("q >= 2k"), "5: malformed number '2k'");
  EXPECT_EQ(first("q >= 9999999999"), "5: integer literal 9999999999 does not fit in i32 (at most "
                                      "2147483647)");
  EXPECT_EQ(first("q + (k > 1)"), "2: cannot mix a boolean with a number: '+' got i32 and i1");
  EXPECT_EQ(first("q && k"), "2: '&&' needs booleans (i1), got i32 and i32");
  EXPECT_EQ(first("sin(q) > 0"), "0: unknown function 'sin' (known: where, tanh, exp, exp2, log, "
                                 "sqrt, abs, min, max)");
  EXPECT_EQ(first("where(q > k, 1)"), "0: where() takes 3 arguments (condition, value if true, "
                                      "value if false), got 2");
  EXPECT_EQ(first("where(q, 1, 2) > 0"), "6: where(): the condition must be a boolean (i1), got i32");
  EXPECT_EQ(first("docs[q] == 1"), "0: undeclared input 'docs' (did you mean 'doc'?); declare it "
                                   "under 'inputs:'");
  EXPECT_EQ(first("doc[b, q] == 1"), "0: input 'doc' has 1 dim [pos] but is indexed with 2 indices");
  EXPECT_EQ(first("doc[1.5] == 1"), "4: index 1 of 'doc' must be an integer (i32), got f32");
  EXPECT_EQ(first("doc == 1"), "0: input 'doc' must be indexed, one index per dim [pos], e.g. "
                               "doc[...]");
  EXPECT_EQ(first("kv_lne > 0"), "0: unknown identifier 'kv_lne' (did you mean 'kv_len'?)");
  EXPECT_EQ(first("score > 0"), "0: 'score' is only available in score expressions, not in a mask");
  EXPECT_EQ(first("tanh > 0"), "0: 'tanh' is a function: call it as tanh(...)");
  EXPECT_EQ(first("q(1) > 0"), "0: 'q' is not a function");
  EXPECT_EQ(first("q[1] > 0"), "0: 'q' is not an input and cannot be indexed");
  EXPECT_EQ(first("q > k", expr::Role::Score), "0: a score expression must be a number (f32), got a "
                                               "boolean (i1); to drop elements use 'mask:'");
  EXPECT_EQ(first(std::string(300, '(') + "q" + std::string(300, ')')).substr(0, 30),
            "64: expression nested too deep");

  // Type errors in independent subtrees are all reported.
  expr::ParseResult several = expr::parse("zz > 0 && q + true > 0 && !k", expr::Role::Mask, inputs);
  ASSERT_EQ(several.errors.size(), 3u);
  EXPECT_EQ(several.errors[0].offset, 0u);
  EXPECT_EQ(several.errors[1].offset, 12u);
  EXPECT_EQ(several.errors[2].offset, 26u);
}

// ---- Diagnostics with exact positions ----

TEST(SpecErrors, RenderWithCaret) {
  EXPECT_EQ(errorsOf("name: t\nhead_dim: 100\nheads: 4\n"),
            "t.yaml:2:11: error: head_dim: must be a multiple of 8 in [8, 256], got 100; did you "
            "mean 96 or 104?\n"
            "head_dim: 100\n"
            "          ^\n");
}

TEST(SpecErrors, ExpressionColumnsInsideScalars) {
  // Plain, double-quoted, single-quoted: the caret lands on the unknown identifier.
  EXPECT_NE(errorsOf(withHeader("mask: q >= kk\n")).find("t.yaml:4:12: error: mask: unknown "
                                                         "identifier 'kk'"),
            std::string::npos);
  EXPECT_NE(errorsOf(withHeader("mask: \"q >= kk\"\n")).find("t.yaml:4:13:"), std::string::npos);
  EXPECT_NE(errorsOf(withHeader("mask:   'q >= kk'\n")).find("t.yaml:4:15:"), std::string::npos);
  // Block scalar and a plain scalar folded over two lines.
  EXPECT_NE(errorsOf(withHeader("mask: |\n    q >= kk\n")).find("t.yaml:5:10:"), std::string::npos);
  EXPECT_NE(errorsOf(withHeader("mask: q >= k &&\n  kk > 0\n")).find("t.yaml:5:3:"),
            std::string::npos);
  // An escaped string still points at the right line.
  EXPECT_NE(errorsOf(withHeader("mask: \"q >= k\\t&& zz\"\n")).find("t.yaml:4:"), std::string::npos);
}

TEST(SpecErrors, AllErrorsInFileOrder) {
  std::string errors = errorsOf("name: 9lives\nhead_dim: 4\nheads: {q: 0}\ndropout: 2\n"
                                "mask: zz > 1\n");
  size_t name = errors.find("t.yaml:1:7: error: name:");
  size_t headDim = errors.find("t.yaml:2:11: error: head_dim:");
  size_t heads = errors.find("t.yaml:3:12: error: heads.q: must be in [1, 2147483647], got 0");
  size_t dropout = errors.find("t.yaml:4:10: error: dropout:");
  size_t mask = errors.find("t.yaml:5:7: error: mask: unknown identifier 'zz'");
  EXPECT_NE(mask, std::string::npos) << errors;
  EXPECT_TRUE(name < headDim && headDim < heads && heads < dropout && dropout < mask) << errors;
}

TEST(SpecErrors, StructuralProblems) {
  EXPECT_NE(errorsOf("").find("t.yaml:1:1: error: empty spec"), std::string::npos);
  EXPECT_NE(errorsOf("# nothing\n").find("empty spec"), std::string::npos);
  EXPECT_NE(errorsOf("- a\n- b\n").find("t.yaml:1:1: error: a spec must be a mapping"),
            std::string::npos);
  EXPECT_NE(errorsOf("name: [a\n").find("t.yaml:"), std::string::npos);
  EXPECT_NE(errorsOf("name: t\nhead_dim: 64\nheads: 4\n---\nname: u\n").find("one YAML document"),
            std::string::npos);
  EXPECT_NE(errorsOf("name: &n t\nhead_dim: 64\nheads: 4\nmask: *n\n").find("aliases"),
            std::string::npos);
  std::string missing = errorsOf("\n\ndtype: bf16\n");
  EXPECT_NE(missing.find("t.yaml:3:1: error: missing required field 'name'"), std::string::npos);
  EXPECT_NE(missing.find("missing required field 'head_dim'"), std::string::npos);
  EXPECT_NE(missing.find("missing required field 'heads'"), std::string::npos);
}

TEST(SpecErrors, FileNotFound) {
  Diagnostics diags;
  EXPECT_FALSE(parseSpecFile("/nonexistent/spec.yaml", diags));
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].render(),
            "/nonexistent/spec.yaml: error: cannot read spec file: No such file or directory\n");
}

// ---- The bad-spec corpus (also run by lit through `attnc compile`) ----

TEST(SpecErrorCorpus, EveryFileFailsWithItsCheckedDiagnostics) {
  std::error_code ec;
  unsigned files = 0;
  for (llvm::sys::fs::directory_iterator it(ATTNC_SPEC_ERRORS_DIR, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef path = it->path();
    if (!path.ends_with(".yaml"))
      continue;
    ++files;
    auto buffer = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(bool(buffer)) << path.str();
    std::vector<std::string> checks;
    llvm::SmallVector<llvm::StringRef> lines;
    (*buffer)->getBuffer().split(lines, '\n');
    for (llvm::StringRef line : lines)
      if (line.consume_front("# CHECK: "))
        checks.push_back(line.rtrim().str());
    EXPECT_FALSE(checks.empty()) << path.str() << " has no '# CHECK: ' line";

    Diagnostics diags;
    std::optional<Spec> spec = parseSpecFile(path, diags);
    EXPECT_FALSE(spec) << path.str() << " parsed without errors";
    std::string rendered = renderAll(diags);
    for (const std::string &check : checks)
      EXPECT_NE(rendered.find(check), std::string::npos)
          << path.str() << "\nexpected: " << check << "\ngot:\n" << rendered;
  }
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_GE(files, 35u);
}

// ---- Robustness: no input crashes the reader ----

TEST(SpecRobustness, RandomMutationsNeverCrash) {
  std::vector<std::string> seeds = {
      "name: gqa_softcap_causal\nhead_dim: 128\ndtype: bf16\nheads: {q: 32, kv: 8}\nscale: auto\n"
      "mask: causal\nscore: \"30 * tanh(score / 30)\"\ndropout: 0.1\n"
      "inputs: {doc: {dtype: i32, dims: [pos]}, slopes: {dtype: f32, dims: [h]}}\n",
      "name: doc_mask\nhead_dim: 64\nheads:\n  q: 8\n  kv: 8\nmask: {document: doc, causal: true}\n"
      "score: {alibi: slopes}\ninputs:\n  doc:\n    dtype: i32\n    dims: [b, pos]\n"
      "  slopes: {dtype: f32, dims: [h]}\n",
      "name: expr\nhead_dim: 96\nheads: 4\nmask: 'where(q > k, doc[q] == doc[k], false) || !(k < 3)'\n"
      "score: |\n  min(score, 5.0) + bias[b, h] * exp2(-(q - k) % 7)\n"
      "inputs: {doc: {dtype: i32, dims: [pos]}, bias: {dtype: f32, dims: [b, h]}}\n",
      "name: w\nhead_dim: 256\nhead_dim_v: 128\ndtype: fp16\nheads: {q: 12, kv: 4}\n"
      "mask: {window: 1024}\nscore: {softcap: 50.0}\nscale: 0.1\n",
  };
  // The lead's examples/ join the seeds when present.
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(ATTNC_EXAMPLES_DIR, ec), end;
       it != end && !ec; it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(".yaml"))
      if (auto buffer = llvm::MemoryBuffer::getFile(it->path()))
        seeds.push_back((*buffer)->getBuffer().str());
  for (const std::string &seed : seeds) {
    Diagnostics diags;
    EXPECT_TRUE(parse(seed, diags)) << renderAll(diags) << seed;
  }

  const std::string alphabet = " \t\n:{}[],-'\"#&*!|>%@`?.0123456789abhkqz_()<=";
  const std::vector<std::string> tokens = {"mask: ", "score", "{", "}", "[", "]", ": ", "\n  ",
                                           "'",      "\"",    "-", "causal", "doc[q]", "&&",
                                           "(",      ")",     "\\", "\t", "---\n", "? "};
  std::mt19937 rng(20240607);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::string text = seeds[rng() % seeds.size()];
    int mutations = 1 + rng() % 4;
    for (int m = 0; m < mutations && !text.empty(); ++m) {
      size_t pos = rng() % (text.size() + 1);
      switch (rng() % 5) {
      case 0: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
      case 1: if (pos < text.size()) text.erase(pos, 1 + rng() % 8); break;
      case 2: if (pos < text.size()) text[pos] = alphabet[rng() % alphabet.size()]; break;
      case 3: text.insert(pos, tokens[rng() % tokens.size()]); break;
      case 4: text = text.substr(0, pos); break; // truncation
      }
    }
    Diagnostics diags;
    std::optional<Spec> spec = parse(text, diags);
    EXPECT_TRUE(spec.has_value() != hasErrors(diags)) << text;
    for (const Diagnostic &diag : diags) {
      EXPECT_FALSE(diag.message.empty()) << text;
      EXPECT_GE(diag.loc.line, 1u) << text;
      (void)diag.render();
    }
  }
}
