// templates/attnc/common/philox.h on the host: Philox4x32-10 against the Random123 known-answer
// vectors (kat_vectors), the attnc mapping (counter, key, group, 16-bit halves) against plain
// calls and test/gpu/philox_host.py, the launch's precomputed round keys against the rounds' own
// key bumps, the threshold's rounding at the edges, and the kernels' one-compare decision
// (dropoutHalfKept) against the 16-bit halves it stands for.
#include "attnc/common/philox.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace attnc {
namespace {

void expectWords(u32x4 got, u32x4 want) {
  EXPECT_EQ(got.x, want.x);
  EXPECT_EQ(got.y, want.y);
  EXPECT_EQ(got.z, want.z);
  EXPECT_EQ(got.w, want.w);
}

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
  for (const Case& c : cases) expectWords(philox4x32_10(c.counter, c.k0, c.k1), c.expected);
}

// Element (q, k)'s group is one plain Philox call on the documented counter and key, and the 8
// elements (q | 8 r, k | 8 t | j) of a group share it and take its 8 distinct 16-bit halves:
// word 2 r + t, half j.
TEST(Dropout, MappingIsThePhiloxCallOfTheGroup) {
  expectWords(dropoutRandom(0x299f31d0a4093822ull, 0x0370734400000000ull, 0x13198a2e,
                            /*q=*/16 * 5 + 8 + 3, /*k=*/16 * 7 + 8 + 2 * 2 + 1),
              philox4x32_10(u32x4{7 * 4 + 2, 5 * 8 + 3, 0x13198a2e, 0x00000000}, 0xa4093822,
                            0x299f31d0 ^ 0x03707344));
  const u64 seed = 0x123456789abcdef0ull, offset = 0xfedcba9876543210ull;
  const u32 q = 32 + 5, k = 48 + 6;
  const u32x4 w = dropoutRandom(seed, offset, 5, q, k);
  const u32 words[4] = {w.x, w.y, w.z, w.w};
  for (u32 r = 0; r < 2; ++r)
    for (u32 t = 0; t < 2; ++t)
      for (u32 j = 0; j < 2; ++j) {
        const u32 qe = q | 8 * r, ke = k | 8 * t | j;
        expectWords(dropoutRandom(seed, offset, 5, qe, ke), w);
        EXPECT_EQ(dropoutBits(w, qe, ke), (words[2 * r + t] >> (16 * j)) & 0xffffu);
      }
  // The same values from test/gpu/philox_host.py (numpy), b = 1, h = 2 of 3 heads.
  const u32 known[4][3] = {{0, 0, 14816}, {9, 3, 28872}, {17, 26, 724}, {31, 31, 5623}};
  for (const auto& e : known)
    EXPECT_EQ(dropoutBits(dropoutRandom(seed, offset, 5, e[0], e[1]), e[0], e[1]), e[2]);
}

TEST(Dropout, ThresholdRoundsDown) {
  EXPECT_EQ(dropoutThreshold(0.0f), 0u);
  EXPECT_EQ(dropoutThreshold(0.5f), 0x8000u);
  EXPECT_EQ(dropoutThreshold(0.1f), 6553u);
  EXPECT_EQ(dropoutThreshold(1.0f), 0xffffu);
  EXPECT_EQ(dropoutThreshold(-0.25f), 0u);
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
