// templates/attnc/common/philox.h on the host: Philox4x32-7 and -10 against the Random123
// known-answer vectors (kat_vectors), chi-square tests of the bytes of neighbouring counters that
// pass at 7 and 10 rounds and catch 2 or 3, the attnc mapping (counter, key, group, 16-bit halves) against plain
// calls and test/gpu/philox_host.py, the launch's precomputed round keys against the rounds' own
// key bumps, the threshold's rounding at the edges and the scale that keeps the expected output,
// and the kernels' one-compare decision (dropoutByteKept), four-at-once tests (dropoutKeptBytes)
// and packed pair masks (dropoutPairMask, through bytePermute's host copy of prmt) against the
// bytes they stand for.
#include "attnc/common/philox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// Random123's kat_vectors for philox4x32 at 7 and 10 rounds: the counter and key all zeros, all
// ones, and the digits of pi; the expected words of each round count in turn.
TEST(Dropout, PhiloxKnownAnswers) {
  const u32x4 pi = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
  const struct {
    u32x4 counter;
    u32 k0, k1;
    u32x4 seven, ten;
  } cases[] = {
      {{0u, 0u, 0u, 0u}, 0u, 0u,
       {0x5f6fb709u, 0x0d893f64u, 0x4f121f81u, 0x4f730a48u},
       {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{~0u, ~0u, ~0u, ~0u}, ~0u, ~0u,
       {0x5207ddc2u, 0x45165e59u, 0x4d8ee751u, 0x8c52f662u},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {pi, 0xa4093822u, 0x299f31d0u,
       {0x4dfccabau, 0x190a87f0u, 0xc47362bau, 0xb6b5242au},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const auto& c : cases) {
    expectWords(philox4x32<7>(c.counter, c.k0, c.k1), c.seven);
    expectWords(philox4x32<10>(c.counter, c.k0, c.k1), c.ten);
  }
}

// How far from uniform the random bytes of neighbouring Philox calls are, as the largest
// |z| = (chi2 - dof) / sqrt(2 dof) of two chi-square tests, along each counter word the kernels
// step (x: the key group, y: the query group): the 256 values of every byte of 2^16 calls, and
// the 65536 pairs (byte of call i, same byte of call i + 1). A uniform, independent stream gives
// |z| of a few at most.
template <int Rounds>
double philoxNonUniformity() {
  const u32 k0 = 0x8badf00du, k1 = 0x1234abcdu;
  constexpr u32 kCalls = 1u << 16;
  double worst = 0;
  auto z = [](const std::vector<u32>& counts, double samples) {
    const double expected = samples / double(counts.size()), dof = double(counts.size()) - 1;
    double chi2 = 0;
    for (u32 n : counts) chi2 += (n - expected) * (n - expected) / expected;
    return std::fabs(chi2 - dof) / std::sqrt(2 * dof);
  };
  for (int axis = 0; axis < 2; ++axis) {
    std::vector<u32> single(256), pairs(65536);
    u32 previous[16] = {};
    for (u32 i = 0; i <= kCalls; ++i) {
      const u32x4 c = axis == 0 ? u32x4{i, 77u, 5u, 12345u} : u32x4{3u, i, 5u, 12345u};
      const u32x4 w = philox4x32<Rounds>(c, k0, k1);
      const u32 words[4] = {w.x, w.y, w.z, w.w};
      for (int b = 0; b < 16; ++b) {
        const u32 byte = (words[b / 4] >> (8 * (b % 4))) & 0xffu;
        if (i < kCalls) ++single[byte];
        if (i > 0) ++pairs[previous[b] * 256 + byte];
        previous[b] = byte;
      }
    }
    worst = std::max({worst, z(single, 16.0 * kCalls), z(pairs, 16.0 * kCalls)});
  }
  return worst;
}

// The rounds a spec may ask for pass (|z| about 1 at 7 and 10); two to five rounds, whose outputs
// still carry their counter's structure, do not (5 rounds: |z| about 1560 for the pairs along the
// query group), so the test can tell and 7 has a margin.
TEST(Dropout, NeighbouringCallsLookUniform) {
  EXPECT_LT(philoxNonUniformity<kDropoutRoundsMin>(), 6.0);
  EXPECT_LT(philoxNonUniformity<kDropoutRoundsDefault>(), 6.0);
  EXPECT_LT(philoxNonUniformity<kDropoutRoundsMax>(), 6.0);
  EXPECT_GT(philoxNonUniformity<2>(), 100.0);
  EXPECT_GT(philoxNonUniformity<3>(), 100.0);
  EXPECT_GT(philoxNonUniformity<4>(), 100.0);
  EXPECT_GT(philoxNonUniformity<5>(), 100.0);
}

// Element (q, k)'s group is one plain Philox call on the documented counter and key, and the 16
// elements (q | 8 r, k | 16 u | 8 t | j) of a group share it and take its 16 distinct bytes:
// word 2 r + t, byte 2 u + j.
TEST(Dropout, MappingIsThePhiloxCallOfTheGroup) {
  expectWords(dropoutRandom<10>(0x299f31d0a4093822ull, 0x0370734400000000ull, 0x13198a2e,
                                /*q=*/16 * 5 + 8 + 3, /*k=*/32 * 7 + 16 + 8 + 2 * 2 + 1),
              philox4x32<10>(u32x4{7 * 4 + 2, 5 * 8 + 3, 0x13198a2e, 0x00000000}, 0xa4093822,
                             0x299f31d0 ^ 0x03707344));
  expectWords(dropoutRandom<7>(0x299f31d0a4093822ull, 0x0370734400000000ull, 0x13198a2e,
                               /*q=*/16 * 5 + 8 + 3, /*k=*/32 * 7 + 16 + 8 + 2 * 2 + 1),
              philox4x32<7>(u32x4{7 * 4 + 2, 5 * 8 + 3, 0x13198a2e, 0x00000000}, 0xa4093822,
                            0x299f31d0 ^ 0x03707344));
  const u64 seed = 0x123456789abcdef0ull, offset = 0xfedcba9876543210ull;
  const u32 q = 32 + 5, k = 64 + 6;
  const u32x4 w = dropoutRandom<10>(seed, offset, 5, q, k);
  const u32 words[4] = {w.x, w.y, w.z, w.w};
  std::vector<u32> seen;
  for (u32 r = 0; r < 2; ++r)
    for (u32 u = 0; u < 2; ++u)
      for (u32 t = 0; t < 2; ++t)
        for (u32 j = 0; j < 2; ++j) {
          const u32 qe = q | 8 * r, ke = k | 16 * u | 8 * t | j;
          expectWords(dropoutRandom<10>(seed, offset, 5, qe, ke), w);
          EXPECT_EQ(dropoutBits(w, qe, ke), (words[2 * r + t] >> (8 * (2 * u + j))) & 0xffu);
          seen.push_back(2 * r + t + 4 * (2 * u + j));
        }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()) - seen.begin(), 16) << "16 distinct bytes";
  // The neighbouring groups: keys 32 further, rows 16 further, another head.
  const u32x4 other[3] = {dropoutRandom<10>(seed, offset, 5, q, k + 32),
                          dropoutRandom<10>(seed, offset, 5, q + 16, k),
                          dropoutRandom<10>(seed, offset, 6, q, k)};
  for (const u32x4& o : other) EXPECT_NE(o.x, w.x);
  // The same values from test/gpu/philox_host.py (numpy), b = 1, h = 2 of 3 heads.
  const u32 known[4][3] = {{0, 0, 224}, {5, 8, 207}, {12, 17, 47}, {31, 29, 73}};
  for (const auto& e : known)
    EXPECT_EQ(dropoutBits(dropoutRandom<10>(seed, offset, 5, e[0], e[1]), e[0], e[1]), e[2]);
}

TEST(Dropout, ThresholdRoundsToNearest) {
  EXPECT_EQ(dropoutThreshold(0.0f), 0u);
  EXPECT_EQ(dropoutThreshold(0.5f), 128u);
  EXPECT_EQ(dropoutThreshold(0.1f), 26u);  // 25.6
  EXPECT_EQ(dropoutThreshold(0.3f), 77u);  // 76.8
  EXPECT_EQ(dropoutThreshold(1.0f / 512), 1u);
  EXPECT_EQ(dropoutThreshold(0.99f / 512), 0u);
  EXPECT_EQ(dropoutThreshold(511.0f / 512), 255u);
  EXPECT_EQ(dropoutThreshold(1.0f), 255u);
  EXPECT_EQ(dropoutThreshold(-0.25f), 0u);
  EXPECT_EQ(dropoutThreshold(std::nanf("")), 0u);
}

// Kept values are scaled by 1 / (1 - threshold / 256): the expected kept fraction times the scale
// is 1 for every threshold, so dropout keeps the expected output.
TEST(Dropout, ScaleKeepsTheExpectedOutput) {
  EXPECT_EQ(dropoutScale(0.0f), 1.0f);
  for (float p : {0.002f, 0.1f, 0.25f, 0.3f, 0.5f, 0.9f, 0.998f}) {
    const double kept = 1.0 - dropoutThreshold(p) / 256.0;
    EXPECT_NEAR(kept * dropoutScale(p), 1.0, 1e-6) << "p " << p;
  }
  EXPECT_FLOAT_EQ(dropoutScale(0.1f), 256.0f / 230.0f);
}

TEST(Dropout, RoundKeysMatchTheRounds) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) {
    const u64 seed = rng(), offset = rng();
    u32 keys[kDropoutRoundKeys];
    dropoutKeySchedule(seed, offset, keys);
    const u32 q = u32(rng() % 100000), k = u32(rng() % 100000), bh = u32(rng() % 1000);
    // A kernel of 7 rounds reads the first 14 keys.
    expectWords(dropoutRandom<10>(keys, offset, bh, q, k),
                dropoutRandom<10>(seed, offset, bh, q, k));
    expectWords(dropoutRandom<7>(keys, offset, bh, q, k), dropoutRandom<7>(seed, offset, bh, q, k));
  }
}

TEST(Dropout, OneCompareDecisionEqualsTheBytes) {
  std::mt19937 rng(11);
  std::vector<u32> thresholds = {0u, 1u, 26u, 128u, 254u, 255u};
  for (int i = 0; i < 20; ++i) thresholds.push_back(rng() & 0xffu);
  for (u32 t : thresholds) {
    std::vector<u32> words = {0u, ~0u, t << 24, (t << 24) - 1u, t, t - 1u, t * 0x01010101u,
                              (t * 0x01010101u) - 0x01010101u, (t << 24) | 0xffffffu};
    for (int i = 0; i < 200; ++i) words.push_back(rng());
    for (u32 w : words)
      for (u32 word = 0; word < 4; ++word)
        for (u32 byte = 0; byte < 4; ++byte) {
          u32x4 ws{u32(rng()), u32(rng()), u32(rng()), u32(rng())};
          (word == 0 ? ws.x : word == 1 ? ws.y : word == 2 ? ws.z : ws.w) = w;
          ASSERT_EQ(dropoutByteKept(ws, word, byte, t), dropoutByte(ws, word, byte) >= t)
              << "word " << std::hex << w << " threshold " << t << " byte " << byte;
        }
  }
}

// Every threshold against every byte value in every position of a word, its neighbours at the
// extremes and random: bit 7 of each byte of dropoutKeptBytes is that byte's keep test, and no
// byte's test disturbs another's (the subtraction must not borrow across bytes).
TEST(Dropout, FourAtOnceKeepTestsEqualTheBytes) {
  std::mt19937 rng(12);
  for (u32 t = 0; t < 256; ++t) {
    const DropoutKeptBytesConstants c = dropoutKeptBytesConstants(t);
    for (u32 b = 0; b < 256; ++b)
      for (u32 pos = 0; pos < 4; ++pos)
        for (u32 rest : {0u, ~0u, u32(rng()), (t * 0x01010101u) ^ 0x80808080u}) {
          const u32 w = (rest & ~(0xffu << (8 * pos))) | (b << (8 * pos));
          const u32 kept = dropoutKeptBytes(w, c);
          for (u32 byte = 0; byte < 4; ++byte)
            ASSERT_EQ((kept >> (8 * byte + 7)) & 1u, ((w >> (8 * byte)) & 0xffu) >= t ? 1u : 0u)
                << "word " << std::hex << w << " threshold " << t << " byte " << byte;
        }
  }
}

// bytePermute's host copy against prmt.b32 as the PTX ISA defines it (default mode): bytes picked
// from {b, a} by the selector's nibbles, a set bit 3 replicating the picked byte's top bit.
TEST(Dropout, BytePermuteIsPrmt) {
  const u32 a = 0x33221100u, b = 0x77665544u;
  EXPECT_EQ(bytePermute(a, b, 0x3210u), a);
  EXPECT_EQ(bytePermute(a, b, 0x7654u), b);
  EXPECT_EQ(bytePermute(a, b, 0x0123u), 0x00112233u);
  EXPECT_EQ(bytePermute(a, b, 0x4040u), 0x44004400u);
  // sign mode: bytes 0x80 and 0x7f of a = 0x7f80ff01
  const u32 s = 0x7f80ff01u;
  EXPECT_EQ(bytePermute(s, 0u, 0x8888u), 0x00000000u);  // byte 0 = 0x01: top bit clear
  EXPECT_EQ(bytePermute(s, 0u, 0x9999u), 0xffffffffu);  // byte 1 = 0xff
  EXPECT_EQ(bytePermute(s, 0u, 0xBBAAu), 0x0000ffffu);  // byte 2 = 0x80 low, byte 3 = 0x7f high
  EXPECT_EQ(bytePermute(s, 0u, 0x9988u), 0xffff0000u);  // the pair masks of the packed P
}

// The packed P's dropout (sm80::applyDropoutKept): for every threshold and random words, a pair of
// 16-bit probabilities ANDed with dropoutPairMask of its word's dropoutKeptBytes keeps exactly the
// elements whose bytes the per-element test keeps, the lower key in bits 0..15.
TEST(Dropout, PairMasksKeepWhatTheBytesKeep) {
  std::mt19937 rng(13);
  for (u32 t = 0; t < 256; ++t) {
    const DropoutKeptBytesConstants c = dropoutKeptBytesConstants(t);
    for (int i = 0; i < 64; ++i) {
      const u32 word = rng();
      const u32 kept = dropoutKeptBytes(word, c);
      for (u32 pair = 0; pair < 2; ++pair) {
        const u32 p = 0x3f803c00u;  // two nonzero 16-bit values
        const u32 got = p & dropoutPairMask(kept, pair);
        for (u32 j = 0; j < 2; ++j) {
          const bool keptByte = ((word >> (8 * (2 * pair + j))) & 0xffu) >= t;
          const u32 half = (got >> (16 * j)) & 0xffffu, want = keptByte ? (p >> (16 * j)) & 0xffffu : 0u;
          ASSERT_EQ(half, want) << "word " << std::hex << word << " threshold " << t << " pair "
                                << pair << " element " << j;
        }
      }
    }
  }
}

// The sm_90a dK/dV kernel's keep bits (dropoutKeepBitsOfGroup) against the per-element tests of
// its former loop: bit 8 m + 2 (2 t + r) + half of `mine` tests byte 2 keyBit4 + half of word
// 2 t + r, of `theirs` the pair's other byte, and groups OR'd from m = 0 up keep each other's bits.
TEST(Dropout, BackwardKeepBitsEqualTheBytes) {
  std::mt19937 rng(14);
  for (u32 t : {0u, 1u, 26u, 77u, 128u, 200u, 255u})
    for (u32 keyBit4 = 0; keyBit4 < 2; ++keyBit4)
      for (u32 half = 0; half < 2; ++half)
        for (int trial = 0; trial < 200; ++trial) {
          const DropoutKeepBitsLane lane = dropoutKeepBitsLane(keyBit4, half);
          const DropoutKeptBytesConstants c = dropoutKeptBytesConstants(t);
          u32 mine = 0, theirs = 0, wantMine = 0, wantTheirs = 0;
          for (int m = 0; m < 4; ++m) {
            const u32x4 w{u32(rng()), u32(rng()), u32(rng()), u32(rng())};
            dropoutKeepBitsOfGroup(w, m, lane, c, mine, theirs);
            for (u32 word = 0; word < 4; ++word) {
              const u32 e = 8u * u32(m) + 2u * word + half;
              wantMine |= u32(dropoutByte(w, word, 2u * keyBit4 + half) >= t) << e;
              wantTheirs |= u32(dropoutByte(w, word, (2u * keyBit4 + half) ^ 1u) >= t) << e;
            }
          }
          ASSERT_EQ(mine, wantMine) << "threshold " << t << " keyBit4 " << keyBit4 << " half " << half;
          ASSERT_EQ(theirs, wantTheirs) << "threshold " << t << " keyBit4 " << keyBit4 << " half " << half;
        }
}

}  // namespace
}  // namespace attnc
