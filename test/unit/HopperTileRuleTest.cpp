// deriveTiles for sm_90a over every head dim and epilogue size: the wgmma kernel's tiles are shapes
// templates/attnc/sm90/config.h accepts, fit its shared memory and the rule's register model, or
// the rule falls back to the sm_80-family kernel only where that model leaves no B_c at all.
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/config.h"
#include "attnc/sm90/wgmma.h"
#include "attnc/target.h"
#include "dialects/Attn/Transforms/TileRule.h"
#include "dialects/Attn/Transforms/TileRuleShared.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include <vector>

using namespace mlir::attn;

namespace {

TileTarget tileTarget(const std::string& name) {
  std::string error;
  std::optional<attnc::Target> t = attnc::Target::byName(name, &error);
  EXPECT_TRUE(t.has_value()) << error;
  return TileTarget{t->name, t->smemPerBlock, t->smemPerSM, t->regsPerThread};
}

// O, S and P of a consumer thread (TileRuleSm90Forward.cpp, step 3).
int64_t liveRegisters(int64_t dv, int64_t blockKV) { return dv / 2 + blockKV / 2 + blockKV / 4; }

TEST(HopperTileRule, EveryHeadDimGetsTheWgmmaKernelOrAReasonedFallback) {
  const TileTarget target = tileTarget("sm_90a");
  int hopper = 0, fallback = 0, unfit = 0;
  for (int64_t d = 16; d <= 256; d += 8) {
    for (int64_t dv : {d, std::max<int64_t>(16, d / 2), std::min<int64_t>(256, 2 * d)}) {
      for (int64_t epilogue : {0, 4, 40, 48}) {
        for (int64_t scoreOps : {0, 3, 7}) {
          SCOPED_TRACE(testing::Message() << "d " << d << " dv " << dv << " epilogue " << epilogue
                                          << " score ops " << scoreOps);
          TileProblem problem{d, dv, 2, 0, 0, epilogue, scoreOps};
          mlir::FailureOr<TileChoice> choice = deriveTiles(problem, target);
          const int64_t budget =
              attnc::sm90::consumerRegisters(2) - 56 - epilogue - (8 * scoreOps + 2) / 3;
          if (mlir::failed(choice)) {
            // No kernel at all: only for wide d_v with the largest epilogues, where neither
            // template's registers hold O and S (the spec is then rejected, naming the head dim).
            EXPECT_GT(liveRegisters(dv, 16), budget);
            EXPECT_GE(dv, 200);
            EXPECT_GE(epilogue + (8 * scoreOps + 2) / 3, 40);
            ++unfit;
            continue;
          }
          if (choice->kernel == "sm80") {
            // Only when even the smallest B_c leaves O + S + P over the budget.
            EXPECT_GT(liveRegisters(dv, 16), budget);
            ++fallback;
            continue;
          }
          ASSERT_EQ(choice->kernel, "sm90");
          ++hopper;
          const int64_t consumers = choice->warps / 4 - 1;
          EXPECT_EQ(choice->blockQ, 64 * consumers);
          EXPECT_EQ(choice->blockKV % 16, 0);
          EXPECT_LE(choice->blockKV, 256);
          if (consumers == 3) {
            // Three consumers only for head dims up to 64, with B_c >= 96 inside their budget
            // (160 registers, 40 reserved; 24 with no epilogue and no mask, but only up to
            // B_c = 128).
            EXPECT_LE(d, 64);
            EXPECT_LE(dv, 64);
            EXPECT_GE(choice->blockKV, 96);
            const int64_t budget3 =
                attnc::sm90::consumerRegisters(3) - epilogue - (8 * scoreOps + 2) / 3;
            if (liveRegisters(dv, choice->blockKV) > budget3 - 40) {
              EXPECT_EQ(epilogue + scoreOps, 0);
              EXPECT_LE(choice->blockKV, 128);
              EXPECT_LE(liveRegisters(dv, choice->blockKV), budget3 - 24);
            }
          } else {
            ASSERT_EQ(consumers, 2);
            if (d == 256 && dv == 256 && epilogue + scoreOps == 0) {
              // hd256 without an epilogue: a reserve of 52, B_c as its registers fit (measured
              // faster than the 64 of whole 64-key steps).
              EXPECT_EQ(choice->blockKV, 80);
              EXPECT_LE(liveRegisters(dv, choice->blockKV), budget + 4);
              EXPECT_GT(liveRegisters(dv, choice->blockKV + 16), budget + 4);
            } else if (d > 128 && d < 256 && dv == d && epilogue + scoreOps == 0) {
              // Head dims 136-248 likewise keep their register fit, with the usual reserve: the
              // largest B_c in 16-key steps that the registers and two stages hold (112 up to
              // 192, 80 above).
              EXPECT_EQ(choice->blockKV, d <= 192 ? 112 : 80);
              EXPECT_LE(liveRegisters(dv, choice->blockKV), budget);
              EXPECT_TRUE(liveRegisters(dv, choice->blockKV + 16) > budget ||
                          attnc::sm90::smemBytes(int(d), int(dv), 2, int(choice->blockKV + 16),
                                                 2) > target.smemPerBlock);
            } else {
              // Whole 64-key steps above 64, unless shared memory cut B_c below the next one.
              if (choice->blockKV > 64 && choice->blockKV % 64 != 0)
                EXPECT_GT(attnc::sm90::smemBytes(int(d), int(dv), int(consumers),
                                                 int((choice->blockKV + 63) / 64 * 64), 2),
                          target.smemPerBlock);
              EXPECT_LE(liveRegisters(dv, choice->blockKV), budget);
            }
          }
          EXPECT_GE(choice->stages, 2);
          EXPECT_LE(choice->stages, 4);
          EXPECT_EQ(choice->smemBytes,
                    attnc::sm90::smemBytes(int(d), int(dv), int(consumers), int(choice->blockKV),
                                           int(choice->stages)));
          EXPECT_LE(choice->smemBytes, target.smemPerBlock);
        }
      }
    }
  }
  EXPECT_GT(hopper, 0);
  EXPECT_GT(fallback, 0);  // dropout-sized epilogues at head dim 256 take the sm_80-family kernel
  EXPECT_LT(unfit, hopper / 20);
}

TEST(HopperTileRule, LightMasksAtHd64TakeWholeTilesOf128Keys) {
  const TileTarget target = tileTarget("sm_90a");
  auto blockKV = [&](int64_t d, int64_t maskOps, int64_t epilogue) {
    TileProblem problem{d, d, 2, 0, 0, epilogue, 0};
    problem.maskOps = maskOps;
    mlir::FailureOr<TileChoice> choice = deriveTiles(problem, target);
    EXPECT_TRUE(mlir::succeeded(choice));
    EXPECT_EQ(choice->warps, 16) << "three consumers at d " << d;
    return choice->blockKV;
  };
  // No mask or a causal one (3 operations), no epilogue: the 24-register reserve gives 128.
  EXPECT_EQ(blockKV(64, 0, 0), 128);
  EXPECT_EQ(blockKV(64, 3, 0), 128);
  // A sliding window (6 operations) or an epilogue keep the 40-register reserve: 112.
  EXPECT_EQ(blockKV(64, 6, 0), 112);
  EXPECT_EQ(blockKV(64, 0, 4), 112);
  // The lighter reserve never lifts B_c past 128 (hd32 spilled at 160), nor lowers it (hd16: 144).
  EXPECT_EQ(blockKV(32, 0, 0), 128);
  EXPECT_EQ(blockKV(16, 0, 0), 144);
}

TEST(HopperTileRule, ScoresLargerThanTheRegisterBudgetShrinkTheTile) {
  // A score of 46 per-element operations (`score + score + ...`, 47 terms) at hd64: its epilogue
  // (123 registers) leaves three consumers no B_c at all, and two consumers 61 registers. A budget
  // below zero once wrapped around through unsigned arithmetic into the largest tile (B_c = 256
  // with three consumers), where ptxas ran out of registers and aborted.
  const TileTarget target = tileTarget("sm_90a");
  for (int64_t scoreOps : {40, 46, 60, 100, 400}) {
    SCOPED_TRACE(testing::Message() << "score ops " << scoreOps);
    TileProblem problem{64, 64, 2, 0, 0, 0, scoreOps};
    mlir::FailureOr<TileChoice> choice = deriveTiles(problem, target);
    if (mlir::failed(choice) || choice->kernel != "sm90") continue;
    const int64_t consumers = choice->warps / 4 - 1;
    const int64_t reserve = consumers == 3 ? 24 : 56;  // the smallest the rule takes for each
    EXPECT_LE(liveRegisters(64, choice->blockKV),
              attnc::sm90::consumerRegisters(int(consumers)) - reserve - (8 * scoreOps + 2) / 3);
  }
  TileProblem problem{64, 64, 2, 0, 0, 0, 46};
  mlir::FailureOr<TileChoice> choice = deriveTiles(problem, target);
  ASSERT_TRUE(mlir::succeeded(choice));
  EXPECT_EQ(choice->kernel, "sm90");
  EXPECT_EQ(choice->warps, 12);  // two consumers
  EXPECT_EQ(choice->blockKV, 32);
}

TEST(HopperTileRule, PlainVariantsOfEveryHeadDimRunTheWgmmaKernel) {
  for (int64_t d = 16; d <= 256; d += 8) {
    mlir::FailureOr<TileChoice> choice = deriveTiles(TileProblem{d, d, 2}, tileTarget("sm_90a"));
    ASSERT_TRUE(mlir::succeeded(choice));
    EXPECT_EQ(choice->kernel, "sm90") << "head dim " << d;
  }
}

TEST(HopperTileRule, OtherTargetsKeepTheSm80FamilyKernel) {
  for (const char* name : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    mlir::FailureOr<TileChoice> choice = deriveTiles(TileProblem{128, 128, 2}, tileTarget(name));
    ASSERT_TRUE(mlir::succeeded(choice)) << name;
    EXPECT_EQ(choice->kernel, "sm80") << name;
  }
}

// Where the wgmma kernel's registers do not fit, sm_90a takes the sm_80-family rule: its tiles and
// its derivation, with the reason for the fallback in front.
TEST(HopperTileRule, FallbackIsTheSm80RuleWithItsReasonFirst) {
  const TileTarget target = tileTarget("sm_90a");
  int fallbacks = 0;
  for (int64_t d = 16; d <= 256; d += 8) {
    for (int64_t epilogue : {0, 40, 48}) {
      for (int64_t scoreOps : {0, 7}) {
        SCOPED_TRACE(testing::Message() << "d " << d << " epilogue " << epilogue << " score ops "
                                        << scoreOps);
        const TileProblem problem{d, d, 2, 0, 0, epilogue, scoreOps};
        mlir::FailureOr<TileChoice> choice = deriveTiles(problem, target);
        if (mlir::failed(choice) || choice->kernel != "sm80") continue;
        ++fallbacks;
        EXPECT_TRUE(mlir::failed(deriveHopperTiles(problem, target)));
        mlir::FailureOr<TileChoice> sm80 = tile_rule::deriveSm80Tiles(problem, target);
        ASSERT_TRUE(mlir::succeeded(sm80));
        EXPECT_EQ(std::tie(choice->blockQ, choice->blockKV, choice->warps, choice->stages,
                           choice->smemBytes),
                  std::tie(sm80->blockQ, sm80->blockKV, sm80->warps, sm80->stages,
                           sm80->smemBytes));
        ASSERT_EQ(choice->derivation.size(), sm80->derivation.size() + 1);
        EXPECT_NE(choice->derivation.front().find("the sm_80-family kernel instead"),
                  std::string::npos)
            << choice->derivation.front();
        EXPECT_TRUE(std::equal(sm80->derivation.begin(), sm80->derivation.end(),
                               choice->derivation.begin() + 1));
      }
    }
  }
  EXPECT_GT(fallbacks, 0);
}

// The template's own layout, instantiated for the tiles the rule picks for the benchmark's head dims.
static_assert(attnc::sm90::FwdConfig<attnc::bf16, 64, 64, 2, 192, 4>::kSmemBytes == 214184);
static_assert(attnc::sm90::FwdConfig<attnc::bf16, 128, 128, 2, 128, 3>::kSmemBytes == 230528);
static_assert(attnc::sm90::FwdConfig<attnc::bf16, 256, 256, 2, 64, 2>::kSmemBytes == 197720);

}  // namespace

// The sm_90a dQ kernel (bwd_dq.h) comes with the wgmma dK/dV kernel: its kv tile the largest of 128,
// 64 and 32 keys within the register model, as many stages as fit (up to 4), and it replaces the
// dK/dV kernel's dQ in the default backward exactly where the head-dim split serves; a mask that
// reads declared inputs keeps the sm80 dQ kernel and the dK/dV kernel's dQ.
TEST(HopperTileRule, TheDqKernelServesWhereTheSplitDoes) {
  const TileTarget target = tileTarget("sm_90a");
  for (int64_t d = 16; d <= 256; d += 8) {
    SCOPED_TRACE(testing::Message() << "d " << d);
    TileProblem problem{d, d, 2, 0, 0, 0, 0};
    mlir::FailureOr<BackwardTileChoice> c = deriveBackwardTiles(problem, target);
    ASSERT_TRUE(mlir::succeeded(c));
    if (c->kvKernel != "sm90") {
      EXPECT_EQ(c->hopperQSmemBytes, 0);
      continue;
    }
    const int blockKV = attnc::sm90::dqKernelBlockKV(int(d));
    EXPECT_EQ(c->hopperQBlockKV, blockKV);
    EXPECT_LE(attnc::sm90::dqKernelRegisters(int(d), blockKV), attnc::sm90::kDqKernelLive);
    if (blockKV < 128)
      EXPECT_GT(attnc::sm90::dqKernelRegisters(int(d), 2 * blockKV), attnc::sm90::kDqKernelLive);
    EXPECT_GE(c->hopperQStages, 2);
    EXPECT_LE(c->hopperQStages, 4);
    EXPECT_EQ(c->hopperQSmemBytes, attnc::sm90::dqKernelSmemBytes(int(d), int(d), blockKV,
                                                                  int(c->hopperQStages)));
    EXPECT_LE(c->hopperQSmemBytes, target.smemPerBlock);
    if (c->hopperQStages < 4)
      EXPECT_GT(attnc::sm90::dqKernelSmemBytes(int(d), int(d), blockKV, int(c->hopperQStages) + 1),
                target.smemPerBlock);
    EXPECT_EQ(c->hopperSeparateDq, c->hopperSplit);
  }
  TileProblem hd256{256, 256, 2, 0, 0, 0, 0};
  mlir::FailureOr<BackwardTileChoice> wide = deriveBackwardTiles(hd256, target);
  EXPECT_EQ(wide->hopperQBlockKV, 32);
  EXPECT_EQ(wide->hopperQStages, 3);
  EXPECT_EQ(wide->hopperQSmemBytes, 230480);
  EXPECT_TRUE(wide->hopperSeparateDq);
  TileProblem hd128{128, 128, 2, 0, 0, 0, 0};
  EXPECT_EQ(deriveBackwardTiles(hd128, target)->hopperQBlockKV, 64);
  EXPECT_FALSE(deriveBackwardTiles(hd128, target)->hopperSeparateDq);
  // A mask that reads declared inputs: the dQ kernel's producer reads the launch's classes of its
  // kv tiles (`_bwd_q_tile_classes`) within the same 24 registers, so the dQ kernel serves as
  // under other masks (the deterministic backward, and the split's default one), up to hd216 at
  // any d_v (dqKernelTakesInputMask: its consumers spilled at (256, 256) under document, where
  // the split keeps its own dQ).
  TileProblem document = hd256;
  document.maskReadsInputs = true;
  EXPECT_EQ(deriveBackwardTiles(document, target)->kvKernel, "sm90");
  EXPECT_EQ(deriveBackwardTiles(document, target)->hopperQSmemBytes, 0);
  EXPECT_FALSE(deriveBackwardTiles(document, target)->hopperSeparateDq);
  for (int64_t d : {64, 128, 192, 224}) {
    TileProblem plain{d, d, 2, 0, 0, 0, 0};
    TileProblem inputs = plain;
    inputs.maskReadsInputs = true;
    mlir::FailureOr<BackwardTileChoice> c = deriveBackwardTiles(inputs, target);
    mlir::FailureOr<BackwardTileChoice> without = deriveBackwardTiles(plain, target);
    EXPECT_EQ(c->kvKernel, "sm90") << d;
    EXPECT_GT(c->hopperQSmemBytes, 0) << d;
    EXPECT_EQ(c->hopperQBlockKV, d <= 176 ? without->hopperQBlockKV : 32) << d;
    EXPECT_EQ(c->hopperSeparateDq, without->hopperSeparateDq) << d;
  }
  static_assert(attnc::sm90::DqConfig<attnc::bf16, 128, 128, 64, 4>::kProducerRegisters ==
                    attnc::sm90::producerRegisters(),
                "the dQ kernel's producer keeps the least registers under every mask");
  static_assert(attnc::sm90::DqConfig<attnc::bf16, 256, 256, 32, 3>::kSmemBytes == 230480 &&
                    attnc::sm90::DqConfig<attnc::bf16, 128, 128, 64, 4>::kSmemBytes == 197736,
                "DqConfig's layout and dqKernelSmemBytes agree");
}

// The backward on sm_90a: the wgmma dK/dV kernel exactly where its register model fits the 240
// registers a consumer gets, with 2-4 stages inside the 227 KiB; its dq_accum layout is a
// permutation of each tile's floats and inside dqAccumElements.
TEST(HopperTileRule, BackwardTakesTheWgmmaKernelWhereItsRegistersFit) {
  const TileTarget target = tileTarget("sm_90a");
  int hopper = 0;
  for (int64_t d = 16; d <= 256; d += 8) {
    // head_dim_v != head_dim takes the same kernel: dK is d wide, dV d_v wide.
    for (int64_t dv : {d, std::max<int64_t>(16, d / 2 / 8 * 8), std::min<int64_t>(256, 2 * d),
                       int64_t(64), int64_t(8)}) {
      for (int64_t extra : {int64_t(0), int64_t(16), int64_t(-1)}) {
        SCOPED_TRACE(testing::Message() << "d " << d << " dv " << dv << " extra " << extra);
        TileProblem problem{d, dv, 2, 0, 0, 0, 0};
        problem.hopperBackwardExtra = extra;
        mlir::FailureOr<BackwardTileChoice> choice = deriveBackwardTiles(problem, target);
        ASSERT_TRUE(mlir::succeeded(choice));
        // The whole head dims per consumer where they fit, else the head-dim split where it fits.
        const int64_t needed = attnc::sm90::bwdConsumerRegisters(int(d), int(dv)) + 32 + extra;
        const int64_t splitNeeded = attnc::sm90::bwdConsumerRegisters(int(d), int(dv), true) + 32 + extra;
        const bool dqKernelFits =
            extra >= 0 && attnc::sm90::dqKernelSmemBytes(int(d), int(dv),
                                                         attnc::sm90::dqKernelBlockKV(int(d)), 2) <=
                              target.smemPerBlock;
        // The split where dK and dV are what does not fit; a head dim of at most 64 columns has
        // no dQ share a consumer could take whole, so there only beside the dQ kernel.
        const bool split = needed > 240 &&
                           (attnc::sm90::splitDqFits(int(d), 2) || dqKernelFits) &&
                           attnc::sm90::bwdConsumerRegisters(int(d), int(dv)) + 32 > 240;
        // Where the plain kernel's dQ (its fp32 tiles and dQ's K chunks) is what does not fit,
        // it runs without dQ beside the sm_90a dQ kernel (BwdConfig SeparateDq).
        const bool separate =
            !split && dqKernelFits &&
            attnc::sm90::bwdSmemBytes(int(d), int(dv), 2, 2) > target.smemPerBlock &&
            attnc::sm90::bwdSmemBytes(int(d), int(dv), 2, 2, false, true) <= target.smemPerBlock;
        auto smem = [&](int stages) {
          return attnc::sm90::bwdSmemBytes(int(d), int(dv), 2, stages, split, separate);
        };
        const bool fits = extra >= 0 && (split ? splitNeeded : needed) <= 240 &&
                          smem(2) <= target.smemPerBlock;
        EXPECT_EQ(choice->kvKernel, fits ? "sm90" : "sm80");
        if (choice->kvKernel != "sm90") continue;
        EXPECT_EQ(choice->hopperSplit, split);
        EXPECT_EQ(choice->hopperSeparateDq, split || separate);
        // BwdConfig's static_assert: both consumers' dQ columns (whole 64-column chunks above
        // 64) inside the K tile, whose chunks the shared memory above counts (keyTileChunks; at
        // head dims 136-192 beside d_v <= 64 the tile once kept three and NVRTC failed); none
        // without dQ.
        if (!separate)
          EXPECT_LE(attnc::sm90::dqColumns(int(d), 2) * 2,
                    64 * attnc::sm90::keyTileChunks(int(d), 2, split));
        else
          EXPECT_EQ(attnc::sm90::keyTileChunks(int(d), 2, false, true), (d + 63) / 64);
        ++hopper;
        EXPECT_GE(choice->hopperStages, 2);
        EXPECT_LE(choice->hopperStages, 4);
        EXPECT_EQ(choice->hopperSmemBytes, smem(int(choice->hopperStages)));
        EXPECT_LE(choice->hopperSmemBytes, target.smemPerBlock);
        // As many stages as fit, but two at head dims 128 / 128 without the split or dropout.
        if (d == 128 && dv == 128 && !split)
          EXPECT_EQ(choice->hopperStages, 2);
        else if (choice->hopperStages < 4)
          EXPECT_GT(smem(int(choice->hopperStages) + 1), target.smemPerBlock);
      }
    }
  }
  EXPECT_GT(hopper, 30);  // hd 16..128 without an epilogue, at least, with three d_v each
  // hd128, the main case, fits with nothing to spare; hd136 does not, and takes the split.
  TileProblem hd128{128, 128, 2, 0, 0, 0, 0};
  EXPECT_EQ(deriveBackwardTiles(hd128, target)->kvKernel, "sm90");
  EXPECT_FALSE(deriveBackwardTiles(hd128, target)->hopperSplit);
  // hd128 keeps two Q/dO stages where three fit, except with dropout (measured slower with two).
  EXPECT_EQ(deriveBackwardTiles(hd128, target)->hopperStages, 2);
  EXPECT_GT(attnc::sm90::bwdSmemBytes(128, 128, 2, 3, false), 0);
  EXPECT_LE(attnc::sm90::bwdSmemBytes(128, 128, 2, 3, false), target.smemPerBlock);
  TileProblem hd128Dropout = hd128;
  hd128Dropout.dropout = true;
  EXPECT_EQ(deriveBackwardTiles(hd128Dropout, target)->hopperStages, 3);
  TileProblem hd136{136, 136, 2, 0, 0, 0, 0};
  EXPECT_EQ(deriveBackwardTiles(hd136, target)->kvKernel, "sm90");
  EXPECT_TRUE(deriveBackwardTiles(hd136, target)->hopperSplit);
  // hd256 takes the head-dim split: 64 shared kv rows, 2 stages, dQ by vector reductions (no dQ
  // tiles in shared memory, which would not fit).
  TileProblem hd256{256, 256, 2, 0, 0, 0, 0};
  mlir::FailureOr<BackwardTileChoice> wide = deriveBackwardTiles(hd256, target);
  EXPECT_EQ(wide->kvKernel, "sm90");
  EXPECT_TRUE(wide->hopperSplit);
  EXPECT_EQ(wide->hopperStages, 2);
  EXPECT_EQ(wide->hopperSmemBytes, 231528);
  static_assert(attnc::sm90::BwdConfig<attnc::bf16, 256, 256, 2, 2, true>::kBlockKV == 64 &&
                    attnc::sm90::BwdConfig<attnc::bf16, 256, 256, 2, 2, true>::kDkTiles == 16 &&
                    attnc::sm90::BwdConfig<attnc::bf16, 256, 256, 2, 2, true>::kSmemBytes == 231528,
                "hd256's split: 64 kv rows, 128 columns of dK and dV a consumer");
  // Dropout, masks that read inputs and score hooks take the split too (they spilled while both
  // consumers computed the whole S^T and dP^T), and so does an epilogue the model charges 16
  // registers (192 + 32 + 16 = 240); one charged 24 does not fit it.
  TileProblem dropout = hd256;
  dropout.dropout = true;
  EXPECT_EQ(deriveBackwardTiles(dropout, target)->kvKernel, "sm90");
  EXPECT_TRUE(deriveBackwardTiles(dropout, target)->hopperSplit);
  TileProblem charged = hd256;
  charged.hopperBackwardExtra = 16;
  EXPECT_TRUE(deriveBackwardTiles(charged, target)->hopperSplit);
  charged.hopperBackwardExtra = 24;
  EXPECT_EQ(deriveBackwardTiles(charged, target)->kvKernel, "sm80");
  // Three 64-column chunks are padded to four (the fourth zeroed in shared memory): hd192 takes
  // the split with hd256's shared memory, its consumers 128 columns each.
  TileProblem hd192{192, 192, 2, 0, 0, 0, 0};
  mlir::FailureOr<BackwardTileChoice> odd = deriveBackwardTiles(hd192, target);
  EXPECT_EQ(odd->kvKernel, "sm90");
  EXPECT_TRUE(odd->hopperSplit);
  EXPECT_EQ(odd->hopperStages, 2);
  EXPECT_EQ(odd->hopperSmemBytes, 231528);
  using Hd192 = attnc::sm90::BwdConfig<attnc::bf16, 192, 192, 2, 2, true>;
  static_assert(Hd192::kKChunks == 4 && Hd192::kKLoadChunks == 3 && Hd192::kDkTiles == 16 &&
                    Hd192::kQKSteps == 12,
                "hd192's split: four chunks in shared memory, three loaded, 12 k16 steps of S^T");
  // A head dim of at most 64 columns has no dQ share a consumer could take whole: the split's
  // own dQ does not fit there, but with the dQ kernel the split serves (its shares padded to a
  // chunk each, the second all padding), e.g. at (256, 64) and (64, 256), where the plain kernel's
  // registers do not fit.
  EXPECT_FALSE(attnc::sm90::splitDqFits(64, 2));
  EXPECT_TRUE(attnc::sm90::splitDqFits(192, 2));
  EXPECT_EQ(attnc::sm90::splitColumns(48, 2), 64);
  for (auto [d, dv] :
       {std::pair{256, 64}, std::pair{64, 256}, std::pair{8, 248}, std::pair{248, 8}}) {
    TileProblem narrow{d, dv, 2, 0, 0, 0, 0};
    mlir::FailureOr<BackwardTileChoice> c = deriveBackwardTiles(narrow, target);
    EXPECT_EQ(c->kvKernel, "sm90") << d << " " << dv;
    EXPECT_TRUE(c->hopperSplit) << d << " " << dv;
    EXPECT_TRUE(c->hopperSeparateDq) << d << " " << dv;
    // Under a mask that reads declared inputs too (separateDqKernel).
    TileProblem document = narrow;
    document.maskReadsInputs = true;
    mlir::FailureOr<BackwardTileChoice> doc = deriveBackwardTiles(document, target);
    EXPECT_EQ(doc->kvKernel, "sm90") << d << " " << dv;
    EXPECT_TRUE(doc->hopperSeparateDq) << d << " " << dv;
  }
  using Padded = attnc::sm90::BwdConfig<attnc::bf16, 256, 64, 2, 2, true>;
  static_assert(Padded::kDkTiles == 16 && Padded::kDvTiles == 8 && Padded::kVChunks == 2 &&
                    Padded::kVLoadChunks == 1,
                "(256, 64)'s split: d_v padded to two chunks, 64 columns a consumer");
}

// Head dims 129-256 beside a narrow d_v, whose plain dK/dV kernel fits its registers but not, with
// its dQ (fp32 tiles and a fourth K chunk for dQ's columns), the shared memory: the kernel without
// dQ (BwdConfig SeparateDq) and the sm_90a dQ kernel, in the default backward too, under every
// mask.
TEST(HopperTileRule, NarrowDvBesideAWideHeadDimRunsWithoutItsDq) {
  const TileTarget target = tileTarget("sm_90a");
  for (auto [d, dv, stages] : {std::tuple{192, 64, 3}, std::tuple{136, 112, 2},
                               std::tuple{176, 80, 2}, std::tuple{200, 48, 2}}) {
    SCOPED_TRACE(testing::Message() << "d " << d << " dv " << dv);
    TileProblem problem{d, dv, 2, 0, 0, 0, 0};
    mlir::FailureOr<BackwardTileChoice> c = deriveBackwardTiles(problem, target);
    ASSERT_TRUE(mlir::succeeded(c));
    EXPECT_EQ(c->kvKernel, "sm90");
    EXPECT_FALSE(c->hopperSplit);
    EXPECT_TRUE(c->hopperSeparateDq);
    EXPECT_GT(c->hopperQSmemBytes, 0);
    EXPECT_EQ(c->hopperStages, stages);
    EXPECT_GT(attnc::sm90::bwdSmemBytes(d, dv, 2, 2), target.smemPerBlock);
    EXPECT_EQ(c->hopperSmemBytes, attnc::sm90::bwdSmemBytes(d, dv, 2, stages, false, true));
    // Under a mask that reads declared inputs too (the dQ kernel's producer reads precomputed
    // classes of its kv tiles), its kv tile at most what 8 registers fewer allow.
    TileProblem document = problem;
    document.maskReadsInputs = true;
    mlir::FailureOr<BackwardTileChoice> doc = deriveBackwardTiles(document, target);
    EXPECT_EQ(doc->kvKernel, "sm90");
    EXPECT_TRUE(doc->hopperSeparateDq);
    const int64_t inputsTile =
        attnc::sm90::dqKernelBlockKV(d, attnc::sm90::kDqKernelInputsReserve);
    EXPECT_EQ(doc->hopperQBlockKV, std::min<int64_t>(c->hopperQBlockKV, inputsTile));
    EXPECT_EQ(doc->hopperStages, stages);
  }
  using Narrow = attnc::sm90::BwdConfig<attnc::bf16, 192, 64, 2, 3, false, true>;
  static_assert(Narrow::kKChunks == 3 && Narrow::kKLoadChunks == 3 && Narrow::kDqTileBytes == 0 &&
                    Narrow::kSmemBytes == attnc::sm90::bwdSmemBytes(192, 64, 2, 3, false, true) &&
                    attnc::sm90::QStagedRowsFit<Narrow>::value,
                "(192, 64) without dQ: three K chunks, no dQ tiles, dK and dV staged in Q tiles");
  // d_v = d keeps the plain kernel's dQ up to 128 and takes the split above (as before).
  for (int64_t d : {64, 128, 192}) {
    TileProblem same{d, d, 2, 0, 0, 0, 0};
    EXPECT_EQ(deriveBackwardTiles(same, target)->hopperSeparateDq, d > 128) << d;
  }
}

// Every (head_dim, head_dim_v) pair of multiples of 8 up to 256 takes the same backward kernels
// and tiles under a mask that reads declared inputs as without one (the dQ kernel's producer
// reads precomputed classes of its kv tiles, `_bwd_q_tile_classes`), but for the dQ kernel at the
// widest pairs, whose consumers spilled (dqKernelTakesInputMask; the split keeps its own dQ
// there), and its kv tile where the registers kept for the inputs' reads halve it.
TEST(HopperTileRule, MasksThatReadInputsTakeTheSameBackwardKernels) {
  const TileTarget target = tileTarget("sm_90a");
  int sm90 = 0;
  for (int64_t d = 8; d <= 256; d += 8)
    for (int64_t dv = 8; dv <= 256; dv += 8) {
      SCOPED_TRACE(testing::Message() << "d " << d << " dv " << dv);
      TileProblem plain{d, dv, 2, 0, 0, 0, 0};
      TileProblem inputs = plain;
      inputs.maskReadsInputs = true;
      mlir::FailureOr<BackwardTileChoice> a = deriveBackwardTiles(plain, target);
      mlir::FailureOr<BackwardTileChoice> b = deriveBackwardTiles(inputs, target);
      ASSERT_TRUE(mlir::succeeded(a) && mlir::succeeded(b));
      ASSERT_EQ(b->kvKernel, a->kvKernel);
      EXPECT_EQ(b->hopperSplit, a->hopperSplit);
      EXPECT_EQ(b->hopperStages, a->hopperStages);
      const bool takes = attnc::sm90::dqKernelTakesInputMask(int(d), int(dv));
      EXPECT_EQ(b->hopperQSmemBytes > 0, takes);
      if (takes) {
        // the same kv tile but where the 8 registers kept for the inputs' reads halve it
        const int64_t inputsTile =
            attnc::sm90::dqKernelBlockKV(int(d), attnc::sm90::kDqKernelInputsReserve);
        EXPECT_EQ(b->hopperQBlockKV, std::min<int64_t>(a->hopperQBlockKV, inputsTile));
        if (b->hopperQBlockKV == a->hopperQBlockKV) EXPECT_EQ(b->hopperQStages, a->hopperQStages);
      } else {
        EXPECT_TRUE(a->hopperSplit && attnc::sm90::splitDqFits(int(d), 2));
      }
      EXPECT_EQ(b->hopperSeparateDq, takes && a->hopperSeparateDq);
      sm90 += b->kvKernel == "sm90";
    }
  EXPECT_EQ(sm90, 32 * 32);  // every pair: the wgmma dK/dV kernel
}

// The head-dim split's dQ reduction: simulate a warp's lanes swapping halves of one n8 tile (the
// m16n8 layout: lane l holds rows l / 4 and l / 4 + 8, columns 2 (l % 4) and 2 (l % 4) + 1) and
// check that each lane's vector of four is four consecutive floats of one row, at the row and
// column it adds them to, and that the warp adds each element of the 16 x 8 tile exactly once.
TEST(HopperBackward, SplitDqPairReductionAddsEveryElementOnceInRowOrder) {
  using Pair = attnc::sm90::DqPairReduction;
  for (int n : {0, 3}) {
    SCOPED_TRACE(testing::Message() << "n8 tile " << n);
    auto element = [&](int lane, int i) {  // (row, column) of accumulator element i of a lane
      return std::pair<int, int>{lane / 4 + 8 * (i / 2), 8 * n + 2 * (lane % 4) + i % 2};
    };
    std::vector<int> added(16 * 8, 0);
    for (int lane = 0; lane < 32; ++lane) {
      const int partner = lane ^ 1;
      std::pair<int, int> vec[4];
      const std::pair<int, int> got[2] = {element(partner, Pair::sent(partner)),
                                          element(partner, Pair::sent(partner) + 1)};
      if (Pair::odd(lane)) {
        vec[0] = got[0], vec[1] = got[1], vec[2] = element(lane, 2), vec[3] = element(lane, 3);
      } else {
        vec[0] = element(lane, 0), vec[1] = element(lane, 1), vec[2] = got[0], vec[3] = got[1];
      }
      EXPECT_EQ(Pair::column(lane, n) % 4, 0) << "16-byte aligned vector, lane " << lane;
      for (int k = 0; k < 4; ++k) {
        ASSERT_EQ(vec[k].first, Pair::row(lane)) << "lane " << lane << " element " << k;
        ASSERT_EQ(vec[k].second, Pair::column(lane, n) + k) << "lane " << lane << " element " << k;
        ++added[vec[k].first * 8 + vec[k].second - 8 * n];
      }
    }
    for (int count : added) EXPECT_EQ(count, 1);
  }
}

template <int D, bool Split = false>
void checkTiledDqLayout() {
  using Config = attnc::sm90::BwdConfig<attnc::bf16, D, D, 2, 2, Split>;
  using Layout = attnc::sm90::TiledDqLayout<Config>;
  SCOPED_TRACE(testing::Message() << "head dim " << D);
  // Every consumer column of every row lands on its own float of the 64 x kDqN block.
  std::vector<int> seen(64 * Config::kDqN, 0);
  for (int row = 0; row < 64; ++row)
    for (int c = 0; c < Config::kDqN; ++c) {
      const int at = Layout::swizzled(row, c);
      ASSERT_GE(at, row * Config::kDqN);
      ASSERT_LT(at, (row + 1) * Config::kDqN);  // a row's floats stay in the row (bulk copies)
      ++seen[at];
    }
  for (int n : seen) EXPECT_EQ(n, 1);
  // Both consumers' columns cover the head dim, and the last tile ends inside the workspace.
  EXPECT_GE(2 * Config::kDqN, D);
  for (int qLen : {1, 63, 64, 65, 1000}) {
    const attnc::i64 last = Layout::tileOffset(qLen, 3, 1, 2, (qLen - 1) / 64 * 64) + Layout::kTileFloats;
    EXPECT_LE(last, attnc::dqAccumElements(2, 3, qLen, D)) << "q_len " << qLen;
  }
}

TEST(HopperTileRule, TiledDqLayoutIsAPermutationInsideTheWorkspace) {
  checkTiledDqLayout<32>();
  checkTiledDqLayout<64>();
  checkTiledDqLayout<72>();
  checkTiledDqLayout<96>();
  checkTiledDqLayout<128>();
  // The head-dim split: hd160 and hd192 pad to four chunks, 128 dQ columns a consumer.
  checkTiledDqLayout<160, true>();
  checkTiledDqLayout<192, true>();
  checkTiledDqLayout<256, true>();
}

// The staged dK/dV store (sm90/bwd_epilogue.h storeRowsStaged): every (row, chunk) of the 64 rows gets
// its own 16 bytes inside the rows' span, and where a row is a multiple of 8 chunks the 8 rows one
// store instruction writes (one chunk each, rows r0 .. r0 + 7 of a lane quad's group) land in 8
// distinct 16-byte bank groups (shared memory's 32 banks are 8 groups of 16 bytes).
template <int Chunks>
void checkStagedRows() {
  using Layout = attnc::sm90::StagedRows<Chunks>;
  std::vector<int> owner(64 * Chunks, -1);
  for (int row = 0; row < 64; ++row)
    for (int c = 0; c < Chunks; ++c) {
      const int at = Layout::offset(row, c);
      ASSERT_EQ(at % 16, 0);
      ASSERT_GE(at, row * Layout::kRowBytes) << "row " << row << " chunk " << c;
      ASSERT_LT(at, (row + 1) * Layout::kRowBytes) << "row " << row << " chunk " << c;
      EXPECT_EQ(owner[at / 16], -1) << "row " << row << " chunk " << c;
      owner[at / 16] = row * Chunks + c;
    }
  if (Chunks % 8 != 0) return;
  for (int r0 = 0; r0 < 64; r0 += 8)
    for (int c = 0; c < Chunks; ++c) {
      std::vector<bool> group(8, false);
      for (int row = r0; row < r0 + 8; ++row) {
        const int g = (Layout::offset(row, c) / 16) % 8;
        EXPECT_FALSE(group[g]) << Chunks << " chunks: rows " << r0 << "+ chunk " << c;
        group[g] = true;
      }
    }
}

TEST(HopperBackward, StagedDkDvRowsArePrivateAndConflictFree) {
  checkStagedRows<2>();   // hd16
  checkStagedRows<6>();   // hd48
  checkStagedRows<8>();   // hd64
  checkStagedRows<12>();  // hd96
  checkStagedRows<16>();  // hd128
  // Which configs stage: dK and dV must fit the consumer's fp32 dQ tile; never with the split.
  EXPECT_TRUE((attnc::sm90::StagedRowsFit<attnc::sm90::BwdConfig<attnc::bf16, 128, 128, 2, 3>>::value));
  EXPECT_TRUE((attnc::sm90::StagedRowsFit<attnc::sm90::BwdConfig<attnc::bf16, 64, 64, 2, 3>>::value));
  EXPECT_FALSE((attnc::sm90::StagedRowsFit<attnc::sm90::BwdConfig<attnc::bf16, 64, 128, 2, 3>>::value));
  EXPECT_FALSE(
      (attnc::sm90::StagedRowsFit<attnc::sm90::BwdConfig<attnc::bf16, 256, 256, 2, 2, true>>::value));
}

// Q's register A fragments (sm90/wgmma.h loadKMajorFragments): the address each lane gives
// ldmatrix.x4 is the element (16 warp + lane % 16, 16 kk + 8 (lane / 16)) of the K-major tile under
// TMA's 128-byte swizzle (the 16-byte chunk index within a 128-byte row XOR the row's index in its
// 8-row atom, rows 128 bytes apart, 64-column chunks `rows` rows apart), and lane 0 of a warp starts
// where kMajorDescriptor's step kk does, 16 warp rows on.
TEST(HopperForward, QFragmentAddressesFollowTheSwizzle) {
  const int rows = 64;  // a consumer's Q tile
  for (int warp = 0; warp < 4; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int kk = 0; kk < 8; ++kk) {
        const unsigned off = attnc::sm90::kMajorFragmentOffset(rows, warp, lane, kk);
        ASSERT_EQ(off % 16, 0u);
        const unsigned chunk64 = off / (rows * 128u), inChunk = off % (rows * 128u);
        const unsigned row = inChunk / 128u, physical16 = (inChunk % 128u) / 16u;
        const unsigned column = chunk64 * 64u + (physical16 ^ (row % 8u)) * 8u;
        EXPECT_EQ(row, unsigned(16 * warp + lane % 16)) << warp << " " << lane << " " << kk;
        EXPECT_EQ(column, unsigned(16 * kk + 8 * (lane / 16))) << warp << " " << lane << " " << kk;
      }
  for (int warp = 0; warp < 4; ++warp)
    for (int kk = 0; kk < 8; ++kk)
      EXPECT_EQ(attnc::sm90::kMajorFragmentOffset(rows, warp, 0, kk),
                unsigned((kk / 4) * rows * 128 + (kk % 4) * 32 + 16 * warp * 128));
}

// wgmma's matrix descriptors (sm90/wgmma.h) are a tile's low word plus each step's offset >> 4;
// that equals the descriptor of the step's own address (the PTX ISA's layout: address >> 4 in bits
// 0-13, leading offset in 16-29, stride offset in 32-45, 128-byte swizzle in 62-63) for every
// 1024-byte-aligned tile and step inside a CTA's 227 KiB of shared memory.
TEST(HopperForward, DescriptorStepsAddToTheTilesWord) {
  auto reference = [](unsigned addr, unsigned leading, unsigned stride) {
    return ((uint64_t(addr) & 0x3FFFF) >> 4) | (uint64_t((leading >> 4) & 0x3FFF) << 16) |
           (uint64_t((stride >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
  };
  const unsigned smem = 227 * 1024;
  int checked = 0;
  for (unsigned tile = 0; tile < smem; tile += 1024)
    for (int rows : {16, 32, 48, 64, 128, 192, 256})
      for (int k16 = 0; k16 < 64; ++k16) {
        const unsigned kStep = unsigned((k16 / 4) * rows * 128 + (k16 % 4) * 32);
        if (tile + kStep + 16 <= smem) {
          ASSERT_EQ(attnc::sm90::kMajorDescriptor(tile, rows, k16), reference(tile + kStep, 16, 1024))
              << tile << " " << rows << " " << k16;
          ++checked;
        }
        const unsigned mnStep = unsigned(k16) * 16 * 128;
        if (tile + mnStep + 16 <= smem) {
          ASSERT_EQ(attnc::sm90::mnMajorDescriptor(tile, rows, k16),
                    reference(tile + mnStep, unsigned(rows) * 128, 1024))
              << tile << " " << rows << " " << k16;
          ++checked;
        }
      }
  EXPECT_GT(checked, 10000);
  EXPECT_EQ(attnc::sm90::matrixDescriptor(0x38C00, 16, 1024), reference(0x38C00, 16, 1024));
}
