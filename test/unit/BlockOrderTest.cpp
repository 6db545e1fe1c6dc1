// templates/attnc/common/block_order.h on the host: the order is a bijection of the grid, and the
// ranks (0 = the longest tile) never decrease inside a group, so the grid ends on its shortest tiles.
#include "attnc/common/block_order.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace attnc {
namespace {

TEST(BlockOrder, EveryBlockOnceAndRanksAscendInsideAGroup) {
  for (auto [tiles, heads, batch] : {std::tuple{32, 8, 4}, std::tuple{32, 16, 4}, std::tuple{128, 16, 1},
                                     std::tuple{8, 32, 16}, std::tuple{7, 5, 3}, std::tuple{300, 1, 1},
                                     std::tuple{1, 3, 2}, std::tuple{64, 12, 3}, std::tuple{32, 5, 2},
                                     std::tuple{100, 7, 1}}) {
    const int blocks = tiles * heads * batch;
    std::set<std::tuple<int, int, int>> seen;
    int lastRank = -1, lastGroupStart = 0;
    for (int linear = 0; linear < blocks; ++linear) {
      const BlockCoord c = orderedBlock(linear, tiles, heads, batch);
      ASSERT_GE(c.rank, 0);
      ASSERT_LT(c.rank, tiles);
      ASSERT_GE(c.h, 0);
      ASSERT_LT(c.h, heads);
      ASSERT_GE(c.b, 0);
      ASSERT_LT(c.b, batch);
      ASSERT_TRUE(seen.insert({c.rank, c.h, c.b}).second) << "block visited twice at " << linear;
      if (c.rank < lastRank) {  // a new group starts over at rank 0
        ASSERT_EQ(c.rank, 0) << tiles << "x" << heads << "x" << batch << " at " << linear;
        ASSERT_GE(linear - lastGroupStart, tiles);
        lastGroupStart = linear;
      }
      lastRank = c.rank;
    }
    EXPECT_EQ(int(seen.size()), blocks);
    EXPECT_EQ(orderedBlock(blocks - 1, tiles, heads, batch).rank, tiles - 1)
        << "the grid ends on the shortest tiles";
  }
}

TEST(BlockOrder, GroupsHoldAboutTwoWaves) {
  // 32 q tiles x 64 (head, batch) pairs: groups of 8 pairs, 256 blocks each.
  EXPECT_EQ(orderedBlock(0, 32, 16, 4).rank, 0);
  EXPECT_EQ(orderedBlock(7, 32, 16, 4).rank, 0);
  EXPECT_EQ(orderedBlock(8, 32, 16, 4).rank, 1);
  EXPECT_EQ(orderedBlock(255, 32, 16, 4).rank, 31);
  const BlockCoord second = orderedBlock(256, 32, 16, 4);
  EXPECT_EQ(second.rank, 0);
  EXPECT_EQ(second.h, 8);
  EXPECT_EQ(second.b, 0);
}

}  // namespace
}  // namespace attnc
