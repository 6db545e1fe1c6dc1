// deriveBackwardTiles over every head dim and known target: each choice is a layout BwdConfig
// accepts (its static_asserts, restated here), fits shared memory, and stays inside the register
// model wherever some layout does; the largest tiles are kept where they fit.
#include "attnc/target.h"
#include "dialects/Attn/Transforms/TileRule.h"

#include "llvm/ADT/STLExtras.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace mlir::attn;

namespace {

int roundUp(int x, int m) { return (x + m - 1) / m * m; }

// The static_asserts of backwardKV in templates/attnc/sm80/bwd_config.h and backward.h.
::testing::AssertionResult bwdConfigAccepts(int d, int dv, int blockQ, int blockKV, int warps) {
  const int dPad = roundUp(d, 16), dvPad = roundUp(dv, 16);
  const int warpsM = std::min(warps, blockKV / 16), warpsN = warps / warpsM;
  const int warpCols = blockQ / warpsN;
  const int dqWarpsM = std::min(warps, blockQ / 16), dqWarpsN = warps / dqWarpsM;
  const int dqTiles = roundUp(dPad / 8, 2 * dqWarpsN) / dqWarpsN;
  if (blockQ % 16 || blockKV % 16) return ::testing::AssertionFailure() << "tiles not m16 blocks";
  if (warpsM * warpsN != warps || blockKV / warpsM % 16)
    return ::testing::AssertionFailure() << "warps do not tile the kv rows";
  if (blockQ % warpsN || warpCols % 16) return ::testing::AssertionFailure() << "warp q columns";
  // dK and dV: whole pairs of n8 tiles per warp column, the head dim padded to them, inside the
  // tiles' 64-column widths (BwdConfig::kDKTiles, kDVTiles).
  const int dkTiles = roundUp(dPad / 8, 2 * warpsN) / warpsN;
  const int dvTiles = roundUp(dvPad / 8, 2 * warpsN) / warpsN;
  if (dkTiles % 2 || dvTiles % 2 || dkTiles * warpsN * 8 > roundUp(d, 64) ||
      dvTiles * warpsN * 8 > roundUp(dv, 64))
    return ::testing::AssertionFailure() << "dK/dV columns not pairs of n8 tiles per warp";
  if (dqWarpsM * dqWarpsN != warps || blockQ % (16 * dqWarpsM) || dqTiles % 2 ||
      dqTiles * dqWarpsN * 8 > roundUp(d, 64))
    return ::testing::AssertionFailure() << "dQ warp layout";
  if (32 * warps < 2 * blockQ) return ::testing::AssertionFailure() << "LSE/delta threads";
  return ::testing::AssertionSuccess();
}

// BwdConfig::kSmemBytes with one Q/dO buffer.
int64_t kvSmemBytes(int d, int dv, int blockQ, int blockKV) {
  const int w = roundUp(d, 64) + roundUp(dv, 64);
  return 2 * blockKV * w + 4 * blockKV * roundUp(blockQ, 64) + 2 * blockQ * w + 8 * blockQ;
}

TileTarget tileTarget(const attnc::Target& t) {
  return TileTarget{t.name, t.smemPerBlock, t.smemPerSM, t.regsPerThread};
}

// The model the rule applies (TileRuleBackward.cpp), restated: dK/dV accumulators (over the head dims
// padded to whole pairs of n8 tiles per warp column) plus the Q and dO fragments of up to two S^T
// slices.
int modelledRegisters(int d, int dv, const BackwardTileChoice& c) {
  const int dPad = roundUp(d, 16), dvPad = roundUp(dv, 16);
  const int warpsN = 8 / std::min<int>(8, c.kvBlockKV / 16);
  const int slices = std::min<int>(2, c.kvBlockQ / warpsN / 16);
  return c.kvBlockKV * (roundUp(dPad, 16 * warpsN) + roundUp(dvPad, 16 * warpsN)) / 256 +
         slices * 16 * 2 * std::max(dPad, dvPad) * 2 / 128;
}

TEST(BackwardTileRule, EveryHeadDimGetsALayoutTheTemplateAccepts) {
  for (const char* name : {"sm_80", "sm_90a"}) {
    std::string error;
    TileTarget target = tileTarget(*attnc::Target::byName(name, &error));
    for (int d = 8; d <= 256; d += 8)
      for (int dv : {d, 8, 64, 128, 256})
        for (int epilogue : {0, 4, 32, 40}) {
          SCOPED_TRACE(testing::Message() << name << " d " << d << " dv " << dv << " epilogue "
                                          << epilogue);
          TileProblem problem{d, dv, 2, 0, 0, epilogue};
          auto c = deriveBackwardTiles(problem, target);
          // Every head dim pair has a layout (until the dK/dV columns were padded to pairs per
          // warp column, d = 200, 208, 232 and 240 had none on sm_80: d / 8 = 2 mod 4 left only
          // B_c = 128, which does not fit the A100's shared memory).
          ASSERT_TRUE(succeeded(c));
          EXPECT_TRUE(bwdConfigAccepts(d, dv, c->kvBlockQ, c->kvBlockKV, c->kvWarps));
          EXPECT_LE(c->kvSmemBytes, target.smemPerBlock);
          EXPECT_LE(c->qSmemBytes, target.smemPerBlock);
          // Where no layout fits the model the choice exceeds it, and the derivation says so.
          bool over = modelledRegisters(d, dv, *c) + epilogue > target.regsPerThread + 1;
          bool said = llvm::any_of(c->derivation, [](const std::string& line) {
            return line.find("nothing fits") != std::string::npos;
          });
          EXPECT_EQ(over, said);
          // The head dims models ship with always fit, whatever the epilogue.
          if (d == dv && d % 32 == 0 && d != 224) EXPECT_FALSE(over);
        }
  }
}

TEST(BackwardTileRule, KeepsTheLargestTilesThatFit) {
  std::string error;
  TileTarget sm80 = tileTarget(*attnc::Target::byName("sm_80", &error));
  auto tiles = [&](int d, int epilogue) {
    auto c = deriveBackwardTiles(TileProblem{d, d, 2, 0, 0, epilogue}, sm80);
    EXPECT_TRUE(succeeded(c));
    return std::make_pair(c->kvBlockKV, c->kvBlockQ);
  };
  // FlashAttention's kept tile (capped at 128) and 64 streamed rows up to head dim 128.
  EXPECT_EQ(tiles(64, 0), std::make_pair(int64_t(128), int64_t(64)));
  EXPECT_EQ(tiles(128, 0), std::make_pair(int64_t(128), int64_t(64)));
  // Wider: the streamed tile shrinks before the kept one.
  EXPECT_EQ(tiles(160, 0), std::make_pair(int64_t(64), int64_t(64)));
  EXPECT_EQ(tiles(192, 0), std::make_pair(int64_t(64), int64_t(32)));
  EXPECT_EQ(tiles(256, 0), std::make_pair(int64_t(64), int64_t(32)));
  // An epilogue's registers count: dropout at 128 and 256 takes a smaller kept tile.
  EXPECT_EQ(tiles(128, 40), std::make_pair(int64_t(64), int64_t(64)));
  EXPECT_EQ(tiles(256, 40), std::make_pair(int64_t(32), int64_t(64)));
  // Head dims whose n8 tiles (26 or 30) split into no whole pairs over two warp columns take the
  // kept tile of their neighbours, padded to 224 or 256 columns (not B_c = 128, which does not fit
  // the A100's shared memory at these widths).
  for (int d : {200, 208, 232, 240}) EXPECT_EQ(tiles(d, 0), std::make_pair(int64_t(64), int64_t(32))) << d;
}

}  // namespace
