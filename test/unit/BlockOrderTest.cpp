// templates/attnc/common/block_order.h on the host: the ordered grid covers every (tile, head,
// batch) once, and in launch order (x fastest) the ranks (0 = the longest tile) never decrease
// inside a group, so the grid ends on its shortest tiles.
#include "attnc/common/block_order.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <utility>

namespace attnc {
namespace {

TEST(BlockOrder, EveryBlockOnceAndRanksAscendInsideAGroup) {
  for (auto [tiles, heads, batch] :
       {std::tuple{32, 8, 4}, std::tuple{32, 16, 4}, std::tuple{128, 16, 1}, std::tuple{8, 32, 16},
        std::tuple{7, 5, 3}, std::tuple{300, 1, 1}, std::tuple{1, 3, 2}, std::tuple{64, 12, 3},
        std::tuple{32, 5, 2}, std::tuple{100, 7, 1}}) {
    const OrderedGrid grid = orderedGrid(tiles, heads * batch);
    std::set<std::tuple<int, int, int>> seen;
    int lastRank = -1, lastLive = -1;
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          const BlockCoord c = orderedBlock(x, y, z, grid.x, heads, batch);
          if (!c.live) {
            ASSERT_EQ(z, grid.z - 1) << "only the last group has padding blocks";
            continue;
          }
          ASSERT_GE(c.rank, 0);
          ASSERT_LT(c.rank, tiles);
          ASSERT_GE(c.h, 0);
          ASSERT_LT(c.h, heads);
          ASSERT_GE(c.b, 0);
          ASSERT_LT(c.b, batch);
          ASSERT_TRUE(seen.insert({c.rank, c.h, c.b}).second) << "block visited twice";
          ASSERT_GE(c.rank, lastRank) << "ranks ascend in launch order inside a group";
          lastRank = c.rank;
          lastLive = c.rank;
        }
      lastRank = -1;  // the next group starts over at rank 0
    }
    EXPECT_EQ(int(seen.size()), tiles * heads * batch) << tiles << "x" << heads << "x" << batch;
    EXPECT_EQ(lastLive, tiles - 1) << "the grid ends on the shortest tiles";
    EXPECT_LE(int(grid.x) * tiles, kOrderGroupBlocks + tiles) << "a group is about kOrderGroupBlocks";
  }
}

TEST(BlockOrder, GroupsOfEightHeadsAtThirtyTwoTiles) {
  const OrderedGrid grid = orderedGrid(32, 64);
  EXPECT_EQ(grid.x, 8u);
  EXPECT_EQ(grid.y, 32u);
  EXPECT_EQ(grid.z, 8u);
  const BlockCoord c = orderedBlock(3, 5, 2, grid.x, 16, 4);  // pair 2 * 8 + 3 = 19
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.h, 3);
  EXPECT_EQ(c.b, 1);
  EXPECT_TRUE(c.live);
  // 6 heads x 3 batches in groups of 5: the last group (z = 3) holds pairs 15-17 and 2 padding blocks.
  EXPECT_TRUE(orderedBlock(2, 0, 3, 5, 6, 3).live);
  EXPECT_FALSE(orderedBlock(3, 0, 3, 5, 6, 3).live);
}

TEST(BlockOrder, EndAlignedQTilesEndAtTheSequenceEnd) {
  for (auto [qLen, block] : {std::pair{4096, 192}, std::pair{4096, 128}, std::pair{1, 192},
                             std::pair{1000, 192}, std::pair{191, 64}, std::pair{193, 192}}) {
    const int tiles = ceilDiv(qLen, block);
    const int lastEnd = qTileStart<true>(tiles - 1, qLen, block) + block;
    EXPECT_GE(lastEnd, qLen) << "the last tile reaches the end";
    EXPECT_LT(lastEnd, qLen + 16) << "and at most 15 rows past it";
    EXPECT_LE(qTileStart<true>(0, qLen, block), 0) << "the first tile holds row 0";
    EXPECT_GT(qTileStart<true>(0, qLen, block) + block, 0);
    for (int t = 0; t < tiles; ++t) {
      EXPECT_EQ(qTileStart<true>(t, qLen, block) % 16, 0) << "rows of 16 as plain tiles (dropout)";
      if (t + 1 < tiles)
        EXPECT_EQ(qTileStart<true>(t + 1, qLen, block), qTileStart<true>(t, qLen, block) + block);
    }
    EXPECT_EQ(qTileStart<false>(tiles - 1, qLen, block), (tiles - 1) * block);
  }
  EXPECT_EQ(qTileStart<true>(0, 4096, 192), -128);  // 4096 = 21 x 192 + 64: rows -128 .. 63
  EXPECT_EQ(qTileStart<true>(0, 1000, 192), -144);  // 1152 - 1000 = 152, rounded down to 144
}

}  // namespace
}  // namespace attnc
