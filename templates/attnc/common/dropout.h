// Dropout on a tile of probabilities held in mma or wgmma accumulators, in the forward's frame
// (rows q, keys k): the Philox call of each group of a lane's elements and the keep decisions it
// makes (the mapping: philox.h), applied to the floats (applyDropout) or to P once packed as the
// A operand of P V (dropoutKeptWords, applyDropoutKept).
#pragma once

#include "attnc/common/philox.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// The dropout decisions (the mapping is documented in philox.h) of this lane's elements of an
// accumulator in the forward's frame (rows q, columns k): calls visit(mi, ni, c, kept) for element
// [mi][ni][c]. The accumulator's NTiles n8 tiles are a kv tile, which starts at a multiple of
// 8 NTiles keys (B_c). One Philox call decides the lane's 16 elements of rows q, q + 8 and four
// adjacent n8 tiles (32 keys from a multiple of 32): word 2 r + (t & 1), byte 2 (t >> 1) + j for
// tile t of the four; where B_c is not a multiple of 32, each pair of tiles (16 keys from a
// multiple of 16) makes its own call and uses half of it (dropoutGroupTiles). qRow and kCol are
// the lane's first row and column, both 0..7 past a multiple of 16 (the mma and wgmma accumulator
// layouts).
// The Philox call of each group of the lane's accumulator (the layout above): visit(mi, g, words)
// for group g (n8 tiles kGroupTiles g ..) of m16 tile mi.
template <int Rounds, int MTiles, int NTiles, class Params, class Visit>
ATTNC_DEVICE void forEachDropoutGroup(const Params& p, u32 batchHead, int qRow, int kCol,
                                      Visit&& visit) {
  static_assert(NTiles % 2 == 0, "dropout decides pairs of n8 tiles");
  constexpr int kGroupTiles = dropoutGroupTiles(NTiles);
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int g = 0; g < NTiles / kGroupTiles; ++g)
      visit(mi, g,
            dropoutRandom<Rounds>(p.dropout_keys, p.dropout_offset, batchHead,
                                  u32(qRow + 16 * mi), u32(kCol + 8 * kGroupTiles * g)));
}
// Bit 4 of the keys of group g's tiles: known for a whole group of four n8 tiles, else that of
// the pair's start. It picks the bytes of the group's words that the tiles use.
template <int NTiles>
ATTNC_DEVICE u32 dropoutGroupKeyBit4(int kCol, int g) {
  constexpr int kGroupTiles = dropoutGroupTiles(NTiles);
  return kGroupTiles == 4 ? 0u : (u32(kCol + 8 * kGroupTiles * g) >> 4) & 1u;
}
template <int Rounds, int MTiles, int NTiles, class Params, class Visit>
ATTNC_DEVICE void forEachDropoutDecision(const Params& p, u32 batchHead, u32 threshold, int qRow,
                                         int kCol, Visit&& visit) {
  constexpr int kGroupTiles = dropoutGroupTiles(NTiles);
  forEachDropoutGroup<Rounds, MTiles, NTiles>(
      p, batchHead, qRow, kCol, [&](int mi, int g, u32x4 w) {
        const u32 keyBit4 = dropoutGroupKeyBit4<NTiles>(kCol, g);
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int t = 0; t < kGroupTiles; ++t)
#pragma unroll
            for (int j = 0; j < 2; ++j)
              visit(mi, kGroupTiles * g + t, 2 * r + j,
                    dropoutByteKept(w, 2u * r + (t & 1), 2u * ((u32(t) >> 1) + keyBit4) + j,
                                    threshold));
      });
}

// Zeroes the dropped probabilities.
template <int Rounds, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyDropout(float (&s)[MTiles][NTiles][4], const Params& p, u32 batchHead,
                               u32 threshold, int qRow, int kCol) {
  forEachDropoutDecision<Rounds, MTiles, NTiles>(p, batchHead, threshold, qRow, kCol,
                                                 [&](int mi, int ni, int c, bool kept) {
                                                   if (!kept) s[mi][ni][c] = 0.0f;
                                                 });
}

// applyDropout in two halves, for P once packed as the A operand of its P V (packP's layout:
// pA[mi][ni / 2][2 (ni & 1) + r] holds row half r of n8 tile ni, its lower key in bits 0..15).
// The decisions are applyDropout's. dropoutKeptWords makes each Philox group's four words of keep
// tests (dropoutKeptBytes: bit 7 of a byte set where it keeps its element) while P is still in
// floats; applyDropoutKept then turns each packed pair's two bytes into a 32-bit mask
// with one byte permute (prmt's sign mode replicates a byte's bit 7) and ANDs it in: a permute
// and an AND per pair instead of an extract, a compare and a select per probability.
template <int NTiles>
ATTNC_HD constexpr int dropoutGroups() {
  return NTiles / dropoutGroupTiles(NTiles);
}
template <int Rounds, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void dropoutKeptWords(u32 (&kept)[MTiles][dropoutGroups<NTiles>()][4],
                                   const Params& p, u32 batchHead, u32 threshold, int qRow,
                                   int kCol) {
  const DropoutKeptBytesConstants c = dropoutKeptBytesConstants(threshold);
  forEachDropoutGroup<Rounds, MTiles, NTiles>(
      p, batchHead, qRow, kCol, [&](int mi, int g, u32x4 w) {
#pragma unroll
        for (u32 i = 0; i < 4; ++i) kept[mi][g][i] = dropoutKeptBytes(dropoutWord(w, i), c);
      });
}
template <int MTiles, int PairSteps>
ATTNC_DEVICE void applyDropoutKept(u32 (&pA)[MTiles][PairSteps][4],
                                   const u32 (&kept)[MTiles][dropoutGroups<2 * PairSteps>()][4],
                                   int kCol) {
  constexpr int NTiles = 2 * PairSteps;
  constexpr int kGroupTiles = dropoutGroupTiles(NTiles);
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int g = 0; g < NTiles / kGroupTiles; ++g) {
      const u32 keyBit4 = dropoutGroupKeyBit4<NTiles>(kCol, g);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int t = 0; t < kGroupTiles; ++t) {
          const int ni = kGroupTiles * g + t;
          // bytes 2 bp (the lower key) and 2 bp + 1 of word 2 r + (t & 1)
          const u32 bp = (u32(t) >> 1) + keyBit4;
          pA[mi][ni / 2][2 * (ni & 1) + r] &= dropoutPairMask(kept[mi][g][2 * r + (t & 1)], bp);
        }
    }
}

}  // namespace sm80
}  // namespace attnc
