// templates/attnc/common/split_kv.h on the host: blocks per SM from a kernel's resources, and the
// decode's split count at the plan's pinned shapes and over sweeps (never more splits than kv
// tiles, one split when the grid fills the machine, busy slots that grow with the SM count).
#include "attnc/common/split_kv.h"
#include "attnc/target.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace attnc {
namespace {

// An H100/H200 SM (attnc::Target "sm_90a"; 32 resident blocks).
constexpr SmLimits kHopper = {65536, 233472, 2048, 32};

// The pinned shapes: bf16, head dims 128/128, BlockKV 64, 132 SMs at 2 blocks each, GQA 32/8 at
// q_len 1 (4 packed rows, one row tile a kv head).
constexpr int kSlots = 132 * 2;
constexpr i64 kKvTileBytes = 64 * (128 + 128) * 2;
constexpr i64 kPartialBytes = 4 * 128 * 4;

SplitProblem decode(int batch, int kvLen, int slots = kSlots) {
  return {batch * 8, ceilDiv(kvLen, 64), slots, kKvTileBytes, kPartialBytes};
}

TEST(SplitKv, BlocksPerSMTakesTheTightestLimit) {
  // 4 warps at 255 registers: 8 KB of registers a warp, 8 warps an SM.
  EXPECT_EQ(blocksPerSM(128, 255, 0, kHopper), 2);
  // 128 registers and 48 KB: registers allow 4, shared memory (with 1 KB reserved each) 4.
  EXPECT_EQ(blocksPerSM(128, 128, 48 * 1024, kHopper), 4);
  // 100 KB a block: shared memory allows 2 (233472 / (102400 + 1024)).
  EXPECT_EQ(blocksPerSM(128, 64, 100 * 1024, kHopper), 2);
  // Registers round up to 8 a thread: 100 counts as 104, 19 warps, not 20.
  EXPECT_EQ(blocksPerSM(128, 100, 0, kHopper), 4);
  // 76 KB: three blocks fill 228 KB exactly, but each has 1 KB reserved on top.
  EXPECT_EQ(blocksPerSM(128, 32, 76 * 1024, kHopper), 2);
  // Tiny blocks stop at the resident-block limit, large ones at the thread limit.
  EXPECT_EQ(blocksPerSM(32, 16, 0, kHopper), 32);
  EXPECT_EQ(blocksPerSM(1024, 32, 0, kHopper), 2);
  EXPECT_EQ(blocksPerSM(4096, 32, 0, kHopper), 0);
  EXPECT_EQ(blocksPerSM(128, 32, 300 * 1024, kHopper), 0);
}

// attnc::Target carries what SmLimits needs (explain builds them from it): every known target has
// an SM count and a block limit, and sm_90a's are the ones kHopper pins.
TEST(SplitKv, TargetsCarryTheirBlockLimits) {
  for (const Target& target : Target::known()) {
    EXPECT_GT(target.numSMs, 0) << target.name;
    EXPECT_GT(target.maxBlocksPerSM, 0) << target.name;
  }
  const Target hopper = *Target::byName("sm_90a", nullptr);
  EXPECT_EQ(hopper.numSMs, 132);
  const SmLimits limits = {hopper.regsPerSM, hopper.smemPerSM, hopper.maxThreadsPerSM,
                           hopper.maxBlocksPerSM};
  EXPECT_EQ(limits.regsPerSM, kHopper.regsPerSM);
  EXPECT_EQ(limits.smemPerSM, kHopper.smemPerSM);
  EXPECT_EQ(limits.maxThreadsPerSM, kHopper.maxThreadsPerSM);
  EXPECT_EQ(limits.maxBlocksPerSM, kHopper.maxBlocksPerSM);
  EXPECT_EQ(Target::byName("sm_80", nullptr)->maxBlocksPerSM, 32);
  EXPECT_EQ(Target::byName("sm_86", nullptr)->maxBlocksPerSM, 16);
  EXPECT_EQ(Target::byName("sm_89", nullptr)->maxBlocksPerSM, 24);
}

// The plan's cases (docs/design/decode.md derives them).
TEST(SplitKv, PinnedDecodeShapes) {
  // B8 Hkv8 kv 32K: 64 units, 512 kv tiles; 4 splits fill 256 of 264 slots (97%).
  SplitPlan b8 = splitCount(decode(8, 32768));
  EXPECT_EQ(b8.splits, 4);
  EXPECT_EQ(b8.splitTiles, 128);
  // B1 kv 128K: 8 units; 33 splits would fill all 264 slots, 29 fill 232 (88% >= 85%), 28 only
  // 224 (84.8%).
  SplitPlan b1 = splitCount(decode(1, 131072));
  EXPECT_EQ(b1.splits, 29);
  EXPECT_EQ(b1.splitTiles, 71);
  // B64 kv 8K: 512 units fill the 264 slots without splitting.
  SplitPlan b64 = splitCount(decode(64, 8192));
  EXPECT_EQ(b64.splits, 1);
  EXPECT_EQ(b64.splitTiles, 128);
}

TEST(SplitKv, SplitsHaveTwoTilesAndReadSixteenTimesTheirPartials) {
  // 10 kv tiles on 8 units would take 10 splits of one tile; two tiles a split allow 5.
  SplitPlan shortKv = splitCount({8, 10, kSlots, kKvTileBytes, kPartialBytes});
  EXPECT_EQ(shortKv.splits, 5);
  EXPECT_EQ(shortKv.splitTiles, 2);
  // 64 packed rows (G 16, q_len 4): 32 KB of partials a split, as much as a kv tile reads, so a
  // split needs 16 tiles: 64 tiles give 4 splits.
  SplitPlan wide = splitCount({8, 64, kSlots, kKvTileBytes, 64 * 128 * 4});
  EXPECT_EQ(wide.splits, 4);
  EXPECT_EQ(wide.splitTiles, 16);
  // One kv tile: one split.
  EXPECT_EQ(splitCount({8, 1, kSlots, kKvTileBytes, kPartialBytes}).splits, 1);
  EXPECT_EQ(splitCount({8, 0, kSlots, kKvTileBytes, kPartialBytes}).splits, 1);
}

// Over a sweep of shapes and machines: the plan covers the kv tiles exactly once, never takes more
// splits than kv tiles (or kMaxSplits), respects the allowed plans, and takes one split once the
// units alone fill the slots.
TEST(SplitKv, SweepInvariants) {
  for (int units = 1; units <= 600; units += 7)
    for (int kvTiles : {1, 2, 3, 5, 17, 64, 100, 512, 2048, 8192})
      for (int slots : {2, 64, 216, 264, 528}) {
        SplitProblem problem = {units, kvTiles, slots, kKvTileBytes, kPartialBytes};
        SplitPlan plan = splitCount(problem);
        SCOPED_TRACE(testing::Message() << units << " units, " << kvTiles << " tiles, " << slots
                                        << " slots");
        ASSERT_GE(plan.splits, 1);
        ASSERT_LE(plan.splits, std::min(kvTiles, kMaxSplits) + (kvTiles == 0));
        ASSERT_EQ(plan.splits, ceilDiv(kvTiles, plan.splitTiles));
        ASSERT_TRUE(splitAllowed(plan, problem));
        if (units >= slots) {
          ASSERT_EQ(plan.splits, 1) << "the grid is full";
        }
      }
}

// The split count itself is not monotone in the SM count: an exact fit takes fewer splits (64
// units: 2 splits fill 64 SMs x 2 slots; 63 SMs' 126 slots need 7 to reach 89%). What grows with
// the SMs is the work the machine does at once: the chosen plan keeps busy, per wave, at least
// kSplitEfficiency of the slots any smaller machine's plan keeps busy.
TEST(SplitKv, BusySlotsGrowWithTheSMCount) {
  EXPECT_EQ(splitCount({64, 512, 64 * 2, kKvTileBytes, kPartialBytes}).splits, 2);
  EXPECT_EQ(splitCount({64, 512, 63 * 2, kKvTileBytes, kPartialBytes}).splits, 7);
  for (int units : {1, 3, 8, 16, 32, 64, 100, 200})
    for (int kvTiles : {32, 128, 512, 2048, 2185}) {
      double mostBusy = 0;
      for (int sms = 8; sms <= 200; ++sms) {
        const int slots = sms * 2;
        SplitPlan plan = splitCount({units, kvTiles, slots, kKvTileBytes, kPartialBytes});
        const double busy = slotEfficiency(units, plan.splits, slots) * slots;
        ASSERT_GE(busy, kSplitEfficiency * mostBusy * (1 - 1e-6))
            << units << " units, " << kvTiles << " tiles, " << sms << " SMs";
        mostBusy = std::max(mostBusy, busy);
      }
    }
}

// Mixed lengths the host knows: a batch of one length plans as splitCount does; a mixed one is
// split by its work, so its live blocks keep more of the slots busy than the longest sequence's
// plan does, and the plan is the fewest splits within kSplitEfficiency of the best split size.
TEST(SplitKv, MixedLengthsSplitByTheBatchsWork) {
  const std::vector<int> same(8, 512);
  const SplitProblem uniform = decode(8, 32768);
  EXPECT_EQ(splitCountMixed(uniform, same.data(), 8).splits, splitCount(uniform).splits);
  EXPECT_EQ(splitCountMixed(uniform, same.data(), 8).splitTiles, splitCount(uniform).splitTiles);

  // Eight sequences of 641 .. 27752 keys (10 .. 434 tiles), GQA 32/8: 64 units.
  const std::vector<int> tiles = {434, 11, 293, 243, 371, 125, 42, 61};
  const SplitProblem mixed = decode(8, 434 * 64);
  const SplitPlan byLongest = splitCount(mixed);
  const SplitPlan plan = splitCountMixed(mixed, tiles.data(), 8);
  const auto efficiency = [&](const SplitPlan& p) {
    return mixedEfficiency(8, tiles.data(), 8, p.splitTiles, kSlots);
  };
  EXPECT_GT(plan.splits, byLongest.splits);
  EXPECT_GT(efficiency(plan), 1.3f * efficiency(byLongest));
  float best = 0;
  for (int s = 1; s <= kMaxSplits; ++s) {
    const SplitPlan candidate = splitPlanFor(s, mixed.kvTiles);
    if (splitAllowed(candidate, mixed)) best = std::max(best, efficiency(candidate));
  }
  for (int s = 1; s <= kMaxSplits; ++s) {
    const SplitPlan candidate = splitPlanFor(s, mixed.kvTiles);
    if (candidate.splits < plan.splits && splitAllowed(candidate, mixed)) {
      EXPECT_LT(efficiency(candidate), kSplitEfficiency * best) << s << " splits";
    }
  }
  EXPECT_GE(efficiency(plan), kSplitEfficiency * best);
  EXPECT_LE(plan.splits, kMaxSplits);

  // A full grid takes one split whatever the lengths; empty sequences leave no live block.
  std::vector<int> wide(64, 512);
  wide[0] = 2;
  EXPECT_EQ(splitCountMixed(decode(64, 32768), wide.data(), 64).splits, 1);
  EXPECT_EQ(mixedEfficiency(8, std::vector<int>(4, 0).data(), 4, 8, kSlots), 0.0f);
}

}  // namespace
}  // namespace attnc
