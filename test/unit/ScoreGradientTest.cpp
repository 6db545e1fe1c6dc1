// attn-derive-backward's score gradient against central finite differences in float64, for random
// score expressions (and the builtins), at random points away from kinks. Also: an expression
// whose derivative cannot be formed is rejected with a message naming the op.
#include "compiler/Spec/BuildIR.h"
#include "compiler/Spec/Spec.h"
#include "dialects/Attn/IR/AttnOps.h"
#include "dialects/Attn/Transforms/MaskEvaluator.h"
#include "dialects/Attn/Transforms/Passes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace attnc;
using namespace mlir::attn;

namespace {

constexpr int kHeads = 8;

class ScoreGen {
public:
  explicit ScoreGen(std::mt19937& rng) : rng(rng) {}

  std::string real(int depth) {
    switch (pick(depth <= 0 ? 3 : 15)) {
    case 0: return "score";
    case 1: return constant();
    case 2: return "slopes[h]";
    case 3: return "(" + real(depth - 1) + " + " + real(depth - 1) + ")";
    case 4: return "(" + real(depth - 1) + " - " + real(depth - 1) + ")";
    case 5: return "(" + real(depth - 1) + " * " + real(depth - 1) + ")";
    case 6: return "(" + real(depth - 1) + " / (2.0 + abs(" + real(depth - 1) + ")))";
    case 7: return "tanh(" + real(depth - 1) + ")";
    case 8: return "exp(" + real(depth - 1) + " * 0.25)";
    case 9: return "log(1.5 + abs(" + real(depth - 1) + "))";
    case 10: return "sqrt(1.0 + " + real(depth - 1) + " * " + real(depth - 1) + ")";
    case 11: return std::string(pick(2) ? "min(" : "max(") + real(depth - 1) + ", " + real(depth - 1) + ")";
    case 12: return "where(" + real(depth - 1) + " > " + constant() + ", " + real(depth - 1) + ", " + real(depth - 1) + ")";
    case 13: return "(score * (k - q) * 0.01)";
    default: return "exp2(" + real(depth - 1) + " * 0.125)";
    }
  }

private:
  std::string constant() { return std::to_string(int(pick(9)) - 4) + ".5"; }
  unsigned pick(unsigned n) { return std::uniform_int_distribution<unsigned>(0, n - 1)(rng); }
  std::mt19937& rng;
};

struct Lowered {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  TiledBackwardOp backward;
};

// The spec through the compile pipeline up to attn-derive-backward.
mlir::FailureOr<Lowered> lower(const Spec& spec, mlir::MLIRContext& context) {
  Lowered lowered;
  lowered.module = buildAttentionIR(spec, context);
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  pm.addPass(createAttnExpandBuiltins());
  pm.addPass(createAttnSelectTiles());
  pm.addPass(createAttnClassifyBlocks());
  pm.addPass(createAttnTile());
  pm.addPass(createAttnDeriveBackward());
  if (mlir::failed(pm.run(*lowered.module))) return mlir::failure();
  lowered.module->walk([&](TiledBackwardOp op) { lowered.backward = op; });
  return lowered;
}

}  // namespace

TEST(ScoreGradient, MatchesFiniteDifferences) {
  mlir::MLIRContext context;
  context.printOpOnDiagnostic(false);
  std::mt19937 rng(42);
  ScoreGen gen(rng);
  std::vector<double> slopes(kHeads);
  for (int h = 0; h < kHeads; ++h) slopes[size_t(h)] = std::exp2(-double(h + 1));
  std::vector<float> slopesF(slopes.begin(), slopes.end());
  attnc::InputRef slopesRef{slopesF.data(), 0, 1, 0};
  MaskInputs inputs{llvm::ArrayRef(slopesRef), 1, kHeads};

  int expressions = 0, points = 0, kinks = 0;
  while (expressions < 250) {
    std::string text = gen.real(4);
    Diagnostics diags;
    std::optional<Spec> spec = SpecBuilder("grad").headDim(64).heads(kHeads)
                                   .input("slopes", ScalarType::F32, {InputDim::H})
                                   .score(text).build(diags);
    ASSERT_TRUE(spec) << text << "\n" << renderAll(diags);
    auto lowered = lower(*spec, context);
    ASSERT_TRUE(mlir::succeeded(lowered)) << text;
    std::string error;
    auto score = MaskEvaluator::create(lowered->backward.getScore(), lowered->backward.getInputs(), error);
    auto grad = MaskEvaluator::create(lowered->backward.getScoreGrad(), lowered->backward.getInputs(), error);
    ASSERT_TRUE(mlir::succeeded(score) && mlir::succeeded(grad)) << error;
    ++expressions;
    for (int trial = 0; trial < 8; ++trial) {
      double s = std::uniform_real_distribution<double>(-6, 6)(rng);
      int h = int(rng() % kHeads), q = int(rng() % 100), k = int(rng() % 100);
      auto f = [&](double x) { return score->score(x, 0, h, q, k, 100, 100, inputs); };
      auto fd = [&](double step) { return (f(s + step) - f(s - step)) / (2 * step); };
      double step = 1e-5 * std::max(1.0, std::abs(s));
      double coarse = fd(step), fine = fd(step / 8);
      double value = f(s);
      if (!std::isfinite(value) || !std::isfinite(coarse)) continue;
      // A kink (where/min/max/abs switching) or wild curvature inside the step: skip the point.
      if (std::abs(coarse - fine) > 1e-4 * std::max(1.0, std::abs(coarse))) {
        ++kinks;
        continue;
      }
      double derived = grad->score(s, 0, h, q, k, 100, 100, inputs);
      ++points;
      ASSERT_NEAR(derived, fine, 1e-4 * std::max(1.0, std::abs(fine)))
          << "d/dscore of " << text << " at score = " << s << ", h " << h << ", q " << q << ", k " << k;
    }
  }
  std::printf("%d expressions, %d points checked, %d near kinks skipped\n", expressions, points, kinks);
  EXPECT_GT(points, 1000);
}

TEST(ScoreGradient, BuiltinsAndIdentity) {
  mlir::MLIRContext context;
  struct Case { SpecBuilder builder; std::function<double(double, int, int, int)> expected; };
  std::vector<Case> cases;
  cases.push_back({SpecBuilder("plain").headDim(64).heads(4), [](double, int, int, int) { return 1.0; }});
  cases.push_back({SpecBuilder("softcap").headDim(64).heads(4).softcap(30),
                   [](double s, int, int, int) { double t = std::tanh(s / 30); return 1 - t * t; }});
  cases.push_back({SpecBuilder("alibi").headDim(64).heads(4).causal().alibi(),
                   [](double, int, int, int) { return 1.0; }});
  for (auto& [builder, expected] : cases) {
    Diagnostics diags;
    std::optional<Spec> spec = builder.build(diags);
    ASSERT_TRUE(spec);
    auto lowered = lower(*spec, context);
    ASSERT_TRUE(mlir::succeeded(lowered));
    std::string error;
    auto grad = MaskEvaluator::create(lowered->backward.getScoreGrad(), lowered->backward.getInputs(), error);
    ASSERT_TRUE(mlir::succeeded(grad)) << error;
    for (double s : {-5.0, -0.5, 0.0, 2.0, 17.0})
      EXPECT_NEAR(grad->score(s, 0, 1, 7, 3, 16, 16), expected(s, 1, 7, 3), 1e-6) << spec->name << " at " << s;
  }
}

// A remainder by a value that depends on the score: d(x % y) = x' - y' trunc(x / y) between the
// jumps, checked against central differences (the points stay away from the jumps).
TEST(ScoreGradient, RemainderByTheScore) {
  mlir::MLIRContext context;
  Diagnostics diags;
  std::optional<Spec> spec =
      SpecBuilder("rem").headDim(64).heads(4).score("(3.0 * score) % (score + 7.5)").build(diags);
  ASSERT_TRUE(spec) << renderAll(diags);
  auto lowered = lower(*spec, context);
  ASSERT_TRUE(mlir::succeeded(lowered));
  std::string error;
  auto score = MaskEvaluator::create(lowered->backward.getScore(), lowered->backward.getInputs(), error);
  auto grad = MaskEvaluator::create(lowered->backward.getScoreGrad(), lowered->backward.getInputs(), error);
  ASSERT_TRUE(mlir::succeeded(score) && mlir::succeeded(grad)) << error;
  // 3s / (s + 7.5) is -19.5, -0.46, 0.19, 0.86, 1.64 and 2.18 here: no jump within the step.
  for (double s : {-6.5, -1.0, 0.5, 3.0, 9.0, 20.0}) {
    auto f = [&](double x) { return score->score(x, 0, 1, 7, 3, 16, 16); };
    const double step = 1e-6;
    const double expected = (f(s + step) - f(s - step)) / (2 * step);
    EXPECT_NEAR(grad->score(s, 0, 1, 7, 3, 16, 16), expected, 1e-5) << "at score = " << s;
  }
}
