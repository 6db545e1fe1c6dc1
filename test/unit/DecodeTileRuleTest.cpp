// deriveDecodeTiles over every head dim pair: each choice fits the shared memory two blocks per SM
// leave and the rule's register model, on sm_80, sm_86 and sm_90a, for every GQA group and q_len
// the decode path takes; and the Little's-law stages follow the SM count.
#include "attnc/target.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include "llvm/Support/MathExtras.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace mlir::attn;

namespace {

struct NamedTarget {
  TileTarget tile;
  int64_t numSMs;
};

NamedTarget namedTarget(const std::string& name) {
  std::string error;
  std::optional<attnc::Target> t = attnc::Target::byName(name, &error);
  EXPECT_TRUE(t.has_value()) << error;
  return {TileTarget{t->name, t->smemPerBlock, t->smemPerSM, t->regsPerThread}, t->numSMs};
}

// The register model the rule states (TileRuleDecode.cpp): O of all rows, the warp's S slice of
// B_c / 4 keys, Q fragments when resident (at most 32 registers).
int64_t liveRegisters(const DecodeTileChoice& c, int64_t d, int64_t dv) {
  const int64_t q = c.rows / 16 * llvm::alignTo(d, 16) / 16 * 4;
  EXPECT_TRUE(!c.qInRegisters || q <= 32);
  return c.rows * llvm::alignTo(dv, 16) / 32 + c.rows * (c.blockKV / 4) / 32 +
         (c.qInRegisters ? q : 0);
}

TEST(DecodeTileRule, EveryHeadDimPairFitsSharedMemoryAndRegisters) {
  for (const char* name : {"sm_80", "sm_86", "sm_90a"}) {
    const NamedTarget target = namedTarget(name);
    // Half an SM (less the reserve of a block), or the whole block limit where a 16-row block of
    // 2 stages is larger than that (wide heads on sm_86).
    const int64_t halfSM =
        target.tile.smemPerSM / 2 - (target.tile.smemPerSM - target.tile.smemPerBlock);
    for (int64_t d = 8; d <= 256; d += 8) {
      for (int64_t dv = 8; dv <= 256; dv += 8) {
        for (int64_t group : {1, 4, 8, 16}) {
          for (int64_t qLen : {1, 2, 4}) {
            for (int64_t epilogue : {0, 16, 48}) {
              SCOPED_TRACE(testing::Message() << name << " d " << d << " dv " << dv << " G "
                                              << group << " q_len " << qLen << " epilogue "
                                              << epilogue);
              DecodeProblem problem{d, dv, 2, group, qLen, epilogue};
              mlir::FailureOr<DecodeTileChoice> choice =
                  deriveDecodeTiles(problem, target.tile, target.numSMs);
              ASSERT_TRUE(mlir::succeeded(choice));
              const int64_t smallest = (16 + 2 * 64) * llvm::alignTo(std::max(d, dv), 64) * 2;
              EXPECT_LE(choice->smemBytes,
                        smallest > halfSM ? target.tile.smemPerBlock : halfSM);
              EXPECT_LE(liveRegisters(*choice, d, dv),
                        (target.tile.regsPerThread + 1) * 3 / 4 - epilogue);
              EXPECT_EQ(choice->warps, 4);
              EXPECT_EQ(choice->blockKV, 64);  // 16 keys a warp
              EXPECT_GE(choice->stages, 2);
              EXPECT_TRUE(choice->rows == 16 || choice->rows == 32);
              // 32 rows wherever O, S and the epilogue fit: the rows do not depend on q_len.
              DecodeProblem one = problem;
              one.qLen = 1;
              mlir::FailureOr<DecodeTileChoice> atOne =
                  deriveDecodeTiles(one, target.tile, target.numSMs);
              ASSERT_TRUE(mlir::succeeded(atOne));
              EXPECT_EQ(choice->rows, atOne->rows);
              EXPECT_EQ(choice->smemBytes, atOne->smemBytes);
              EXPECT_EQ(choice->rowTiles, int64_t(llvm::divideCeil(group * qLen, choice->rows)));
              EXPECT_FALSE(choice->derivation.empty());
            }
          }
        }
      }
    }
  }
}

TEST(DecodeTileRule, TwoFragmentsWhereThePackedRowsAndRegistersAllowThem) {
  const NamedTarget target = namedTarget("sm_90a");
  // 32 packed rows at d_v 128: O 128 + S 16 = 144 registers fit.
  EXPECT_EQ(deriveDecodeTiles({128, 128, 2, 8, 4}, target.tile, target.numSMs)->rows, 32);
  // At d_v 256 two fragments' O alone is 256 registers: one fragment, two row tiles.
  mlir::FailureOr<DecodeTileChoice> wide =
      deriveDecodeTiles({256, 256, 2, 8, 4}, target.tile, target.numSMs);
  EXPECT_EQ(wide->rows, 16);
  EXPECT_EQ(wide->rowTiles, 2);
  // An epilogue of 60 registers leaves 132 < 144: one fragment again.
  EXPECT_EQ(deriveDecodeTiles({128, 128, 2, 8, 4, 60}, target.tile, target.numSMs)->rows, 16);
}

TEST(DecodeTileRule, StagesKeepLittlesLawBytesInFlight) {
  const NamedTarget target = namedTarget("sm_90a");
  for (int64_t dv : {64, 128, 256}) {
    SCOPED_TRACE(testing::Message() << "dv " << dv);
    mlir::FailureOr<DecodeTileChoice> choice =
        deriveDecodeTiles({dv, dv, 2, 8, 1}, target.tile, target.numSMs);
    ASSERT_TRUE(mlir::succeeded(choice));
    // (stages - 1) tiles in flight per block cover 4.8 MB / SMs / 2 blocks, one tile fewer not.
    const int64_t perBlock = llvm::divideCeil(llvm::divideCeil(4'800'000, target.numSMs), 2);
    const int64_t tileBytes = choice->blockKV * llvm::alignTo(dv, 64) * 2;
    EXPECT_GE((choice->stages - 1) * tileBytes, perBlock);
    EXPECT_LT((choice->stages - 2) * tileBytes, perBlock);
  }
  // Fewer SMs share the same bandwidth: more bytes each, never fewer stages.
  int64_t previous = 0;
  for (int64_t sms : {264, 132, 66, 33}) {
    int64_t stages = deriveDecodeTiles({64, 64, 2, 8, 1}, target.tile, sms)->stages;
    EXPECT_GE(stages, previous) << sms << " SMs";
    previous = stages;
  }
  EXPECT_GT(previous, deriveDecodeTiles({64, 64, 2, 8, 1}, target.tile, 264)->stages);
}

TEST(DecodeTileRule, RejectsWhatNoTileFits) {
  NamedTarget target = namedTarget("sm_80");
  // O of 16 rows at d_v 256 is 128 registers: a 64-register thread holds none of it.
  target.tile.regsPerThread = 64;
  EXPECT_TRUE(mlir::failed(deriveDecodeTiles({256, 256, 2, 8, 1}, target.tile, target.numSMs)));
  // Degenerate groups and SM counts are refused, not divided by.
  target = namedTarget("sm_80");
  EXPECT_TRUE(mlir::failed(deriveDecodeTiles({128, 128, 2, 0, 1}, target.tile, target.numSMs)));
  EXPECT_TRUE(mlir::failed(deriveDecodeTiles({128, 128, 2, 8, 1}, target.tile, 0)));
}

}  // namespace
