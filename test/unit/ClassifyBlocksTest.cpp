// attn-classify-blocks must be sound: a tile it calls empty has no kept element and a tile it
// calls full has no masked one. Checked by brute force against the per-element mask for random
// masks (builtins with random parameters and random expressions), tile sizes and lengths,
// including q_len != kv_len and data-dependent masks. Also checks that each builtin expanded by
// attn-expand-builtins means exactly its definition in the spec reference.
#include "compiler/Spec/BuildIR.h"
#include "compiler/Spec/Spec.h"
#include "dialects/Attn/IR/AttnOps.h"
#include "dialects/Attn/Transforms/MaskEvaluator.h"
#include "dialects/Attn/Transforms/Passes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace attnc;
using namespace mlir::attn;

namespace {

constexpr int kBatch = 3, kHeads = 4;

// Random expressions over the mask's variables and the declared input `doc[pos]`.
class ExprGen {
public:
  explicit ExprGen(std::mt19937& rng) : rng(rng) {}

  std::string boolean(int depth) {
    int choice = pick(depth <= 0 ? 2 : 6);
    switch (choice) {
    case 0:
    case 1: {
      static const char* ops[] = {"<", "<=", ">", ">=", "==", "!="};
      return "(" + integer(depth - 1) + " " + ops[pick(6)] + " " + integer(depth - 1) + ")";
    }
    case 2: return "(" + boolean(depth - 1) + " && " + boolean(depth - 1) + ")";
    case 3: return "(" + boolean(depth - 1) + " || " + boolean(depth - 1) + ")";
    case 4: return "!" + boolean(depth - 1);
    default: return "(" + real(depth - 1) + " < " + real(depth - 1) + ")";
    }
  }

  std::string integer(int depth) {
    int choice = pick(depth <= 0 ? 3 : 11);
    switch (choice) {
    case 0: {
      static const char* vars[] = {"q", "k", "q", "k", "q_len", "kv_len", "b", "h"};
      return vars[pick(8)];
    }
    case 1: return std::to_string(int(pick(400)) - 100);
    case 2: return "doc[" + (pick(2) ? std::string("q") : std::string("k")) + "]";
    case 3: return "(" + integer(depth - 1) + " + " + integer(depth - 1) + ")";
    case 4: return "(" + integer(depth - 1) + " - " + integer(depth - 1) + ")";
    case 5: return "(" + integer(depth - 1) + " * " + std::to_string(int(pick(7)) - 3) + ")";
    case 6: return "(" + integer(depth - 1) + " / " + std::to_string(int(pick(9)) + 1) + ")";
    case 7: return "(" + integer(depth - 1) + " % " + std::to_string(int(pick(9)) - 4) + ")";
    case 8: return std::string(pick(2) ? "min(" : "max(") + integer(depth - 1) + ", " + integer(depth - 1) + ")";
    case 9: return "abs(" + integer(depth - 1) + ")";
    default: return "where(" + boolean(depth - 1) + ", " + integer(depth - 1) + ", " + integer(depth - 1) + ")";
    }
  }

  std::string real(int depth) {
    switch (pick(depth <= 0 ? 2 : 4)) {
    case 0: return "(" + integer(depth) + " * 0.5)";
    case 1: return std::to_string(pick(50)) + ".25";
    case 2: return "sqrt(abs(" + integer(depth - 1) + "))";
    default: return "log(1.0 + abs(" + integer(depth - 1) + "))";
    }
  }

private:
  unsigned pick(unsigned n) { return std::uniform_int_distribution<unsigned>(0, n - 1)(rng); }
  std::mt19937& rng;
};

SpecBuilder baseSpec() {
  SpecBuilder builder("mask");
  builder.headDim(64).heads(kHeads).input("doc", ScalarType::I32, {InputDim::Pos});
  return builder;
}

// The mask region of a spec after attn-expand-builtins, flattened for evaluation.
struct LoweredMask {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  MaskEvaluator evaluator;
};

std::optional<LoweredMask> lower(const Spec& spec, mlir::MLIRContext& context) {
  LoweredMask lowered;
  lowered.module = buildAttentionIR(spec, context);
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  pm.addPass(createAttnExpandBuiltins());
  if (mlir::failed(pm.run(*lowered.module))) return std::nullopt;
  AttentionOp op;
  lowered.module->walk([&](AttentionOp found) { op = found; });
  std::string error;
  auto evaluator = MaskEvaluator::create(op.getMask(), op.getInputs(), error);
  EXPECT_TRUE(mlir::succeeded(evaluator)) << error;
  if (mlir::failed(evaluator)) return std::nullopt;
  lowered.evaluator = std::move(*evaluator);
  return lowered;
}

std::optional<Spec> randomMaskSpec(std::mt19937& rng, ExprGen& gen, std::string& description) {
  SpecBuilder builder = baseSpec();
  std::uniform_int_distribution<int> kind(0, 9), small(1, 200);
  switch (kind(rng)) {
  case 0: builder.causal(false); description = "causal"; break;
  case 1: builder.causal(true); description = "causal top_left"; break;
  case 2: { int w = small(rng); builder.window(w); description = "window " + std::to_string(w); break; }
  case 3: { int p = small(rng) - 1; builder.prefix(p); description = "prefix " + std::to_string(p); break; }
  case 4: builder.document("doc", rng() % 2); description = "document"; break;
  default: description = gen.boolean(3); builder.mask(description); break;
  }
  Diagnostics diags;
  return builder.build(diags);
}

}  // namespace

TEST(ClassifyBlocks, SoundOnRandomMasksTilesAndLengths) {
  mlir::MLIRContext context;
  std::mt19937 rng(20261129);
  ExprGen gen(rng);
  const int tileSizes[] = {16, 32, 64, 128};
  int cases = 0, tiles = 0, empty = 0, full = 0, partial = 0, imprecise = 0;
  while (cases < 1200) {
    std::string description;
    std::optional<Spec> spec = randomMaskSpec(rng, gen, description);
    if (!spec) continue;  // the generator can write ill-typed text (e.g. `% 0` is fine, types are not)
    std::optional<LoweredMask> mask = lower(*spec, context);
    ASSERT_TRUE(mask) << description;
    ++cases;

    int blockQ = tileSizes[rng() % 4], blockKV = tileSizes[rng() % 4];
    int qLen = 1 + int(rng() % 300);
    int kvLen = rng() % 2 ? qLen : 1 + int(rng() % 300);
    int b = int(rng() % kBatch), h = int(rng() % kHeads);
    // Packed documents: sorted ids over max(q_len, kv_len) positions.
    std::vector<int> doc(std::max(qLen, kvLen));
    for (int& id : doc) id = int(rng() % 6);
    std::sort(doc.begin(), doc.end());
    attnc::InputRef docRef{doc.data(), 0, 0, 1};
    MaskInputs inputs{llvm::ArrayRef(docRef), kBatch, kHeads};

    for (int qLo = 0; qLo < qLen; qLo += blockQ) {
      int qHi = std::min(qLo + blockQ, qLen) - 1;
      for (int kLo = 0; kLo < kvLen; kLo += blockKV) {
        int kHi = std::min(kLo + blockKV, kvLen) - 1;
        BlockClass cls = mask->evaluator.classify(b, h, qLo, qHi, kLo, kHi, qLen, kvLen, inputs);
        int kept = 0, total = 0;
        for (int q = qLo; q <= qHi; ++q)
          for (int k = kLo; k <= kHi; ++k, ++total)
            kept += mask->evaluator.keep(b, h, q, k, qLen, kvLen, inputs) ? 1 : 0;
        ++tiles;
        if (cls == BlockClass::Empty) {
          ++empty;
          ASSERT_EQ(kept, 0) << "tile called empty keeps " << kept << " elements: mask '" << description
                             << "', tile q [" << qLo << ", " << qHi << "] k [" << kLo << ", " << kHi
                             << "], q_len " << qLen << ", kv_len " << kvLen;
        } else if (cls == BlockClass::Full) {
          ++full;
          ASSERT_EQ(kept, total) << "tile called full masks " << total - kept << " elements: mask '"
                                 << description << "', tile q [" << qLo << ", " << qHi << "] k ["
                                 << kLo << ", " << kHi << "], q_len " << qLen << ", kv_len " << kvLen;
        } else {
          ++partial;
          imprecise += (kept == 0 || kept == total) ? 1 : 0;
        }
      }
    }
  }
  // The property is soundness; precision is reported so a regression in it is visible.
  RecordProperty("tiles", tiles);
  std::printf("%d masks, %d tiles: %d empty, %d full, %d partial (%d of them uniform)\n", cases,
              tiles, empty, full, partial, imprecise);
  EXPECT_GT(empty, 0);
  EXPECT_GT(full, 0);
}

// Affine builtins are classified exactly: every partial tile really mixes kept and masked.
TEST(ClassifyBlocks, ExactForCausalAndWindow) {
  mlir::MLIRContext context;
  for (bool window : {false, true}) {
    SpecBuilder builder = baseSpec();
    if (window) builder.window(100); else builder.causal();
    Diagnostics diags;
    std::optional<Spec> spec = builder.build(diags);
    ASSERT_TRUE(spec);
    std::optional<LoweredMask> mask = lower(*spec, context);
    ASSERT_TRUE(mask);
    for (auto [qLen, kvLen] : {std::pair{256, 256}, {100, 300}, {300, 100}}) {
      for (int qLo = 0; qLo < qLen; qLo += 64)
        for (int kLo = 0; kLo < kvLen; kLo += 32) {
          int qHi = std::min(qLo + 64, qLen) - 1, kHi = std::min(kLo + 32, kvLen) - 1;
          if (mask->evaluator.classify(0, 0, qLo, qHi, kLo, kHi, qLen, kvLen) != BlockClass::Partial)
            continue;
          int kept = 0, total = 0;
          for (int q = qLo; q <= qHi; ++q)
            for (int k = kLo; k <= kHi; ++k, ++total) kept += mask->evaluator.keep(0, 0, q, k, qLen, kvLen);
          EXPECT_TRUE(kept > 0 && kept < total) << (window ? "window" : "causal") << " tile q " << qLo
                                                << " k " << kLo << " lengths " << qLen << "x" << kvLen;
        }
    }
  }
}

// attn-expand-builtins writes each builtin as the spec reference defines it
// (builtinExpressionText): both forms keep the same elements.
TEST(ExpandBuiltins, MatchesTheSpecDefinitions) {
  mlir::MLIRContext context;
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, SpecBuilder>> builtins;
  builtins.push_back({"causal", baseSpec().causal()});
  builtins.push_back({"causal top_left", baseSpec().causal(true)});
  builtins.push_back({"window", baseSpec().window(37)});
  builtins.push_back({"prefix", baseSpec().prefix(23)});
  builtins.push_back({"document", baseSpec().document("doc")});
  builtins.push_back({"document causal", baseSpec().document("doc", true)});
  for (auto& [name, builder] : builtins) {
    Diagnostics diags;
    std::optional<Spec> spec = builder.build(diags);
    ASSERT_TRUE(spec) << name;
    std::string text = builtinExpressionText(spec->mask, spec->inputs);
    Diagnostics exprDiags;
    std::optional<Spec> asExpression = baseSpec().mask(text).build(exprDiags);
    ASSERT_TRUE(asExpression) << name << ": " << text;
    std::optional<LoweredMask> expanded = lower(*spec, context);
    std::optional<LoweredMask> written = lower(*asExpression, context);
    ASSERT_TRUE(expanded && written);
    for (int trial = 0; trial < 20; ++trial) {
      int qLen = 1 + int(rng() % 150), kvLen = 1 + int(rng() % 150);
      std::vector<int> doc(std::max(qLen, kvLen));
      for (int& id : doc) id = int(rng() % 4);
      std::sort(doc.begin(), doc.end());
      attnc::InputRef docRef{doc.data(), 0, 0, 1};
      MaskInputs inputs{llvm::ArrayRef(docRef), kBatch, kHeads};
      for (int q = 0; q < qLen; ++q)
        for (int k = 0; k < kvLen; ++k)
          ASSERT_EQ(expanded->evaluator.keep(0, 0, q, k, qLen, kvLen, inputs),
                    written->evaluator.keep(0, 0, q, k, qLen, kvLen, inputs))
              << name << " (" << text << ") at q " << q << " k " << k << ", lengths " << qLen
              << " x " << kvLen;
    }
  }
}
