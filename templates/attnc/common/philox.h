// Philox4x32-R (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; constants
// as in Random123) and the exact mapping from an attention element to its dropout decision.
// R, the number of rounds, is the spec's `dropout: {rounds: R}`, 7 to 10, 7 by default: the paper
// finds Philox4x32 passes TestU01's BigCrush from 7 rounds on and recommends 10 as a safety margin;
// FlashAttention-2's dropout uses 7. Each round is two 32x32->64 multiplies and a few XORs, and in
// the dropout kernels the rounds are most of the integer work (docs/templates.md, "Dropout
// mapping").
// Host-compilable on purpose: the host reference and the backward kernels regenerate the same
// mask bit for bit from this header, so nothing here may change without changing all of them.
//
// The mapping, for element (b, h, q, k) of a forward or backward pass with launch arguments
// seed = p.dropout_seed (u64), offset = p.dropout_offset (u64), p = p.dropout_p (float):
//   key     = { lo32(seed), hi32(seed) ^ hi32(offset) }
//   counter = { kGroup, qGroup, u32(b * heads_q + h), lo32(offset) }
//     qGroup = (q >> 4) * 8 + (q & 7)          rows q and q ^ 8 of a 16-row block share it
//     kGroup = (k >> 5) * 4 + ((k >> 1) & 3)   keys k ^ {0, 1, 8, 9, 16, 17, 24, 25} share it
//   word    = philox4x32<R>(counter, key)[2 * ((q >> 3) & 1) + ((k >> 3) & 1)]
//   r       = byte 2 * ((k >> 4) & 1) + (k & 1) of word: (word >> (8 * byte)) & 0xff
//   dropped = r < threshold,  threshold = round(p * 256), clamped to 0..255
// One Philox call thus decides 2 x 8 elements: exactly the elements one lane holds of four
// adjacent n8 tiles in an mma/wgmma accumulator of the forward (rows q, q + 8; key pairs 8 apart),
// so the forward pays one call per 16 elements; in the backward's transposed frame (keys are
// rows) a warp's lane pair holds 8 of them and the warp beside it the other 8, so it pays one call
// per 8 elements. p is resolved to 1/256 (the spec rejects a dropout that rounds to 0 or 1): the
// drop probability is threshold / 256 and kept probabilities are scaled by 256 / (256 - threshold)
// (dropoutScale), so the expected output is the output without dropout. The softmax normaliser l
// and the LSE are computed from the probabilities before dropout. (docs/templates.md, "Dropout
// mapping", says why 8 bits and not 16.)
#pragma once

#include "attnc/common/types.h"

namespace attnc {

// The rounds a spec may ask for (Spec.cpp checks them) and its default.
constexpr int kDropoutRoundsMin = 7, kDropoutRoundsMax = 10, kDropoutRoundsDefault = 7;

namespace philox {

constexpr u32 kM0 = 0xD2511F53u;
constexpr u32 kM1 = 0xCD9E8D57u;
constexpr u32 kW0 = 0x9E3779B9u;  // golden ratio
constexpr u32 kW1 = 0xBB67AE85u;  // sqrt(3) - 1

// One round: two 32x32->64 multiplies, the high halves mixed with the other words and the key.
ATTNC_HD u32x4 round(u32x4 c, u32 k0, u32 k1) {
  const u64 p0 = u64(kM0) * c.x;
  const u64 p1 = u64(kM1) * c.z;
  const u32 hi0 = u32(p0 >> 32), lo0 = u32(p0);
  const u32 hi1 = u32(p1 >> 32), lo1 = u32(p1);
  return u32x4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
}

}  // namespace philox

// Philox4x32 with `Rounds` rounds; the key is bumped by the Weyl constants between rounds. (Fewer
// than 7 rounds only for the host tests that show what the statistical tests catch.)
template <int Rounds>
ATTNC_HD u32x4 philox4x32(u32x4 counter, u32 k0, u32 k1) {
  static_assert(Rounds >= 1 && Rounds <= kDropoutRoundsMax, "Philox4x32 with 1 to 10 rounds");
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < Rounds; ++i) {
    counter = philox::round(counter, k0, k1);
    k0 += philox::kW0;
    k1 += philox::kW1;
  }
  return counter;
}

// The rounds' keys of one launch, (k0, k1) of round i at [2 i], [2 i + 1]: the host computes them
// once into the launch parameters, so that a kernel's rounds read them from the constant bank
// instead of adding the Weyl constants per call (20 integer adds of ~62 instructions a call at
// 10 rounds). All ten rounds' keys are made; a kernel of R rounds reads the first 2 R.
constexpr int kDropoutRoundKeys = 2 * kDropoutRoundsMax;
ATTNC_HD void dropoutKeySchedule(u64 seed, u64 offset, u32 (&keys)[kDropoutRoundKeys]) {
  u32 k0 = u32(seed);
  u32 k1 = u32(seed >> 32) ^ u32(offset >> 32);
  for (int i = 0; i < kDropoutRoundsMax; ++i) {
    keys[2 * i] = k0;
    keys[2 * i + 1] = k1;
    k0 += philox::kW0;
    k1 += philox::kW1;
  }
}

// philox4x32 with the rounds' keys given (dropoutKeySchedule).
template <int Rounds>
ATTNC_HD u32x4 philox4x32(u32x4 counter, const u32 (&keys)[kDropoutRoundKeys]) {
  static_assert(Rounds >= 1 && Rounds <= kDropoutRoundsMax, "Philox4x32 with 1 to 10 rounds");
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < Rounds; ++i) counter = philox::round(counter, keys[2 * i], keys[2 * i + 1]);
  return counter;
}

// The Philox counter of the group of element (q, k); `batchHead` is b * heads_q + h.
ATTNC_HD u32x4 dropoutCounter(u64 offset, u32 batchHead, u32 q, u32 k) {
  const u32 qGroup = (q >> 4) * 8u + (q & 7u);
  const u32 kGroup = (k >> 5) * 4u + ((k >> 1) & 3u);
  return u32x4{kGroup, qGroup, batchHead, u32(offset)};
}

// The four random words of the group of element (q, k), from Philox4x32 of `Rounds` rounds.
template <int Rounds>
ATTNC_HD u32x4 dropoutRandom(u64 seed, u64 offset, u32 batchHead, u32 q, u32 k) {
  const u32 k0 = u32(seed);
  const u32 k1 = u32(seed >> 32) ^ u32(offset >> 32);
  return philox4x32<Rounds>(dropoutCounter(offset, batchHead, q, k), k0, k1);
}

// dropoutRandom with the launch's round keys (dropoutKeySchedule of its seed and offset).
template <int Rounds>
ATTNC_HD u32x4 dropoutRandom(const u32 (&keys)[kDropoutRoundKeys], u64 offset, u32 batchHead, u32 q,
                             u32 k) {
  return philox4x32<Rounds>(dropoutCounter(offset, batchHead, q, k), keys);
}

// Word `word` (0-3) of a group's words.
ATTNC_HD u32 dropoutWord(u32x4 words, u32 word) {
  return word == 0 ? words.x : (word == 1 ? words.y : (word == 2 ? words.z : words.w));
}

// Byte `byte` (0-3) of word `word` of a group's words: the random bits of the element with
// word = 2 ((q >> 3) & 1) + ((k >> 3) & 1) and byte = 2 ((k >> 4) & 1) + (k & 1).
ATTNC_HD u32 dropoutByte(u32x4 words, u32 word, u32 byte) {
  return (dropoutWord(words, word) >> (8u * byte)) & 0xffu;
}

// dropoutByte(words, word, byte) >= threshold (threshold < 2^8); the top byte without extracting
// it: (w >> 24) >= t exactly when w >= t << 24, one compare instead of a shift and a compare.
ATTNC_HD bool dropoutByteKept(u32x4 words, u32 word, u32 byte, u32 threshold) {
  const u32 w = dropoutWord(words, word);
  return byte == 3u ? w >= (threshold << 24) : ((w >> (8u * byte)) & 0xffu) >= threshold;
}

// Element (q, k)'s 8 random bits out of its group's words.
ATTNC_HD u32 dropoutBits(u32x4 words, u32 q, u32 k) {
  const u32 word = 2u * ((q >> 3) & 1u) + ((k >> 3) & 1u);
  return dropoutByte(words, word, 2u * ((k >> 4) & 1u) + (k & 1u));
}

// The four keep tests of a word at once: bit 7 of byte i of the result is set exactly when byte i
// of `word` is >= the threshold (dropoutByteKept), the other bits are don't-cares. The threshold
// comes as its launch constants (dropoutKeptBytesConstants). The low seven bits are compared by
// one subtraction that cannot borrow across bytes ((b | 0x80) - low7(t) >= 1), whose bit 7 is
// low7(b) >= low7(t); the top bits then decide: b >= t when b's top bit is set and t's is not, or
// both are equal and the low bits compare so (one 3-input logic op).
struct DropoutKeptBytesConstants {
  u32 thresholdBytes;  // threshold * 0x01010101
  u32 lowNegated;      // -(thresholdBytes & 0x7f7f7f7f)
};
ATTNC_HD DropoutKeptBytesConstants dropoutKeptBytesConstants(u32 threshold) {
  const u32 bytes = threshold * 0x01010101u;
  return {bytes, 0u - (bytes & 0x7f7f7f7fu)};
}
ATTNC_HD u32 dropoutKeptBytes(u32 word, const DropoutKeptBytesConstants& c) {
  const u32 low = (word | 0x80808080u) + c.lowNegated;
  return (word & ~c.thresholdBytes) | (~(word ^ c.thresholdBytes) & low);
}
// PTX prmt.b32 in its default mode: byte i of the result is byte (selector nibble i) & 7 of
// {b, a} (a's bytes 0-3, b's 4-7), or, where the nibble's bit 3 is set, that byte's top bit
// replicated over all eight bits. One instruction on the GPU; the host's copy lets the unit tests
// check the masks the kernels make with it.
ATTNC_HD u32 bytePermute(u32 a, u32 b, u32 selector) {
#if defined(__CUDA_ARCH__)
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
#else
  const unsigned long long bytes = (static_cast<unsigned long long>(b) << 32) | a;
  u32 r = 0;
  for (int i = 0; i < 4; ++i) {
    const u32 nibble = (selector >> (4 * i)) & 0xfu;
    u32 byte = u32(bytes >> (8 * (nibble & 7u))) & 0xffu;
    if (nibble & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
    r |= byte << (8 * i);
  }
  return r;
#endif
}

// The 32-bit mask of a packed pair of 16-bit probabilities (its lower key in bits 0..15) whose
// keep tests are bytes 2 bytePair and 2 bytePair + 1 of `kept` (dropoutKeptBytes): each half all
// ones where its byte's bit 7 is set, else zero.
ATTNC_HD u32 dropoutPairMask(u32 kept, u32 bytePair) {
  return bytePermute(kept, 0u, bytePair == 0 ? 0x9988u : 0xBBAAu);
}

// The sm_90a dK/dV kernel's keep bits from one Philox group's words (sm90::dropoutKeepBits): in
// its transposed frame a lane holds key kvRow (0..7 past a multiple of 16, `half` = kvRow & 1)
// and makes the call of query column j = half; the decisions of its own byte (2 keyBit4 + half)
// go to `mine`, those of its partner's (the other byte of the pair, key kvRow ^ 1) to `theirs`,
// each at bit 8 m + 2 (2 t + r) + half for word 2 t + r of group m (m < 4). Four tests a word at
// once (dropoutKeptBytes), the two bytes of the four words gathered with three byte permutes,
// and each byte's bit 7 moved to its place by one multiply and one shift.
struct DropoutKeepBitsLane {
  u32 gather;  // bytePermute selector: {a[mine], b[mine], a[theirs], b[theirs]}
  u32 half;
};
ATTNC_HD DropoutKeepBitsLane dropoutKeepBitsLane(u32 keyBit4, u32 half) {
  const u32 mineByte = 2u * keyBit4 + half, theirByte = mineByte ^ 1u;
  return {mineByte | ((4u + mineByte) << 4) | (theirByte << 8) | ((4u + theirByte) << 12), half};
}
// Bit 7 of byte i of `bytes` to bit 8 m + 2 i + half, every other bit of the result's byte m
// clear except those of the other half; bits below byte m are garbage (mask them or OR from low m
// up). The multiply puts bit 7 + 8 i at 25 + 2 i; its cross terms land below bit 24 and never
// carry.
ATTNC_HD u32 dropoutSpreadKeep(u32 bytes, int m, u32 half) {
  const u32 spread = (bytes & 0x80808080u) * 0x41041u;
  return (spread >> (25u - 8u * u32(m) - half)) & (0xffu << (8 * m));
}
ATTNC_HD void dropoutKeepBitsOfGroup(u32x4 words, int m, const DropoutKeepBitsLane& lane,
                                     const DropoutKeptBytesConstants& c, u32& mine, u32& theirs) {
  const u32 k0 = dropoutKeptBytes(words.x, c), k1 = dropoutKeptBytes(words.y, c);
  const u32 k2 = dropoutKeptBytes(words.z, c), k3 = dropoutKeptBytes(words.w, c);
  const u32 low = bytePermute(k0, k1, lane.gather), high = bytePermute(k2, k3, lane.gather);
  mine |= dropoutSpreadKeep(bytePermute(low, high, 0x5410u), m, lane.half);
  theirs |= dropoutSpreadKeep(bytePermute(low, high, 0x7632u), m, lane.half);
}

// 256 p + 1/2: its floor is p rounded to 256ths (half up). The spec rejects a p for which this
// is below 1 (rounds to 0) or at least 256 (rounds to 1).
ATTNC_HD double dropoutSteps(float p) { return double(p) * 256.0 + 0.5; }

// Random bytes below this one drop their element: P(drop) = threshold / 256 ~= p (round to
// nearest; NaN and p <= 0 drop nothing; at most 255).
ATTNC_HD u32 dropoutThreshold(float p) {
  const double t = dropoutSteps(p);
  if (!(t >= 1.0)) return 0u;  // also p == NaN
  return t >= 255.0 ? 255u : u32(t);
}

// The factor of a kept probability: 1 / (1 - threshold / 256), so that dropout keeps the
// expected output. (256 times the reciprocal is exactly the rounded quotient, and kernels compute a
// reciprocal without the general division's slow path.)
ATTNC_HD float dropoutScale(float p) { return 256.0f * (1.0f / float(256u - dropoutThreshold(p))); }

// The n8 tiles whose decisions one Philox call makes in the forward's frame, for a kv tile of
// `nTiles` n8 tiles that starts at a multiple of 8 nTiles keys: four (32 keys from a multiple of
// 32, 16 elements of a lane) where nTiles is a multiple of 4, else two (half of the call's bytes).
ATTNC_HD constexpr int dropoutGroupTiles(int nTiles) { return nTiles % 4 == 0 ? 4 : 2; }

// The decision of one element alone (one Philox call each, with the launch's round keys).
template <int Rounds>
ATTNC_HD bool dropoutKept(const u32 (&keys)[kDropoutRoundKeys], u64 offset, u32 batchHead,
                          u32 threshold, u32 q, u32 k) {
  return dropoutBits(dropoutRandom<Rounds>(keys, offset, batchHead, q, k), q, k) >= threshold;
}

}  // namespace attnc
