// templates/attnc/common/philox.h on the host: Philox4x32-10 against the generator's published
// known-answer vectors, the launch's precomputed round keys against the rounds' own key bumps,
// and the kernels' one-compare decision (dropoutHalfKept) against the 16-bit halves it stands for.
#include "attnc/common/philox.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace attnc {
namespace {

TEST(Dropout, PhiloxKnownAnswers) {
  struct Case {
    u32x4 counter;
    u32 k0, k1;
    u32x4 expected;
  };
  const Case cases[] = {
      {{0u, 0u, 0u, 0u}, 0u, 0u, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{~0u, ~0u, ~0u, ~0u}, ~0u, ~0u, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       0xa4093822u,
       0x299f31d0u,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Case& c : cases) {
    const u32x4 got = philox4x32_10(c.counter, c.k0, c.k1);
    EXPECT_EQ(got.x, c.expected.x);
    EXPECT_EQ(got.y, c.expected.y);
    EXPECT_EQ(got.z, c.expected.z);
    EXPECT_EQ(got.w, c.expected.w);
  }
}

TEST(Dropout, RoundKeysMatchTheRounds) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) {
    const u64 seed = rng(), offset = rng();
    u32 keys[kDropoutRoundKeys];
    dropoutKeySchedule(seed, offset, keys);
    const u32 q = u32(rng() % 100000), k = u32(rng() % 100000), bh = u32(rng() % 1000);
    const u32x4 a = dropoutRandom(seed, offset, bh, q, k), b = dropoutRandom(keys, offset, bh, q, k);
    ASSERT_EQ(a.x, b.x);
    ASSERT_EQ(a.y, b.y);
    ASSERT_EQ(a.z, b.z);
    ASSERT_EQ(a.w, b.w);
  }
}

TEST(Dropout, OneCompareDecisionEqualsTheHalves) {
  std::mt19937 rng(11);
  std::vector<u32> thresholds = {0u, 1u, 6553u, 32768u, 65534u, 65535u};
  for (int i = 0; i < 20; ++i) thresholds.push_back(rng() & 0xffffu);
  for (u32 t : thresholds) {
    std::vector<u32> words = {0u, ~0u, t << 16, (t << 16) - 1u, t, t - 1u, (t << 16) | 0xffffu};
    for (int i = 0; i < 200; ++i) words.push_back(rng());
    for (u32 w : words)
      for (u32 word = 0; word < 4; ++word)
        for (u32 half = 0; half < 2; ++half) {
          u32x4 ws{u32(rng()), u32(rng()), u32(rng()), u32(rng())};
          (word == 0 ? ws.x : word == 1 ? ws.y : word == 2 ? ws.z : ws.w) = w;
          ASSERT_EQ(dropoutHalfKept(ws, word, half, t), dropoutHalf(ws, word, half) >= t)
              << "word " << std::hex << w << " threshold " << t << " half " << half;
        }
  }
}

}  // namespace
}  // namespace attnc
