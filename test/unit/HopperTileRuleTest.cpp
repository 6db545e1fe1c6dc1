// deriveTiles for sm_90a over every head dim and epilogue size: the wgmma kernel's tiles are shapes
// templates/attnc/sm90/config.h accepts, fit its shared memory and the rule's register model, or
// the rule falls back to the sm_80-family kernel only where that model leaves no B_c at all.
#include "attnc/sm90/config.h"
#include "attnc/target.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include <gtest/gtest.h>

using namespace mlir::attn;

namespace {

TileTarget tileTarget(const std::string& name) {
  std::string error;
  std::optional<attnc::Target> t = attnc::Target::byName(name, &error);
  EXPECT_TRUE(t.has_value()) << error;
  return TileTarget{t->name, t->smemPerBlock, t->smemPerSM, t->regsPerThread};
}

// O, S and P of a consumer thread (TileRule.cpp, step 3).
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
              attnc::sm90::consumerRegisters(2) - 56 - epilogue - 3 * scoreOps;
          if (mlir::failed(choice)) {
            // No kernel at all: only for wide d_v with the largest epilogues, where neither
            // template's registers hold O and S (the spec is then rejected, naming the head dim).
            EXPECT_GT(liveRegisters(dv, 16), budget);
            EXPECT_GE(dv, 200);
            EXPECT_GE(epilogue + 3 * scoreOps, 40);
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
          // Whole 64-key steps above 64, unless shared memory cut B_c below the next one.
          if (choice->blockKV > 64 && choice->blockKV % 64 != 0)
            EXPECT_GT(attnc::sm90::smemBytes(int(d), int(dv), int(consumers),
                                             int((choice->blockKV + 63) / 64 * 64), 2),
                      target.smemPerBlock);
          EXPECT_LE(liveRegisters(dv, choice->blockKV), budget);
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

// The template's own layout, instantiated for the tiles the rule picks for the benchmark's head dims.
static_assert(attnc::sm90::FwdConfig<attnc::bf16, 64, 64, 2, 192, 4>::kSmemBytes == 214184);
static_assert(attnc::sm90::FwdConfig<attnc::bf16, 128, 128, 2, 128, 3>::kSmemBytes == 230528);
static_assert(attnc::sm90::FwdConfig<attnc::bf16, 256, 256, 2, 64, 2>::kSmemBytes == 197720);

}  // namespace
