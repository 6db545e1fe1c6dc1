// A tile's mask decisions made with the whole warp (maskKeepBitsWarp, the sm_90a forward's): a
// split mask's per-key parts computed once per key across the lanes and shuffled to the lanes
// that hold the key, or, where the join comes as key ranges, the tile decided as 128-key bitmaps
// a row (keepBitsRanges). Device only: warp shuffles and ballots.
#pragma once

#include "attnc/common/mask.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// A value from lane `src` of the warp (all 32 lanes take part), as 32-bit words: a mask split's
// per-key values are any struct of scalars (bool, ints, floats), padded here to whole words.
template <class T>
ATTNC_DEVICE T shuffleWords(const T& value, int src) {
  if constexpr (__is_empty(T)) {
    return value;
  } else {
    constexpr int kWords = int((sizeof(T) + 3) / 4);
    u32 words[kWords] = {};
    memcpy(words, &value, sizeof(T));
#pragma unroll
    for (int i = 0; i < kWords; ++i) words[i] = __shfl_sync(0xffffffffu, words[i], src);
    T result;
    memcpy(&result, words, sizeof(T));
    return result;
  }
}

// maskKeepBits for a tile of 8 NTiles keys from kTile0 (the sm_90a forward's accumulator layout:
// this lane's keys are kTile0 + 2 (lane & 3) + 8 ni + j), with the whole warp: where the mask is
// split (MaskSplitOf) and decided per element, each lane computes the per-key values (mask_col:
// for a document mask, one read of the input) of keys kTile0 + lane + 32 i only, and the lanes
// that need a key take its values from the lane that made them with a shuffle. A lane's 2
// NTiles keys then cost NTiles / 4 reads and 2 NTiles shuffles instead of 2 NTiles reads, which
// are most of a document tile's mask. Key 8 ni + 2 c + j
// (c = lane & 3) is made by lane (8 ni + 2 c + j) mod 32 as its value ni / 4. Otherwise
// maskKeepBits. The warp must be converged (the tile's class is the same for all its lanes).
//
// maskKeepBitsWarp's split path is two steps, which a kernel may also take apart: readMaskParts
// makes the lane's share of the key parts (for a document mask, its loads of the ids),
// keepBitsFromParts makes the row parts (the same every tile of a block: after the first, the
// loads hit in L1) and shuffles and joins, or decides the tile as key ranges (keepBitsRanges). The
// sm_90a forward issues a tile's reads together with the load of its class word, and its first
// tile's before the waits for K and Q, joining them once that tile's S = Q K^T is issued.
template <class Variant, int MTiles, int NTiles>
struct MaskPartReads {
  using Parts = typename MaskSplitOf<Variant>::template Parts<MaskSplitOf<Variant>::value>;
  typename Parts::Col made[ceilDiv(8 * NTiles, 32)];  // keys kTile0 + lane + 32 i
};

template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE MaskPartReads<Variant, MTiles, NTiles> readMaskParts(const Params& p, int b, int h,
                                                                   int qRow, int kTile0, int lane) {
  MaskPartReads<Variant, MTiles, NTiles> reads;
  if constexpr (Variant::kHasMask && MaskSplitOf<Variant>::value) {
#pragma unroll
    for (int i = 0; i < ceilDiv(8 * NTiles, 32); ++i)
      reads.made[i] = Variant::mask_col(p, b, h, kTile0 + lane + 32 * i);
  }
  return reads;
}

// Whether a split mask's join also comes as key ranges a row (its `kJoinRanges`: EmitCUDA.cpp
// emitJoinRanges); false for a Variant without the member.
ATTNC_VARIANT_FLAG(VariantJoinRanges, kJoinRanges);

// Bits lo..hi of a 32-bit word (none where lo > hi; lo and hi may lie outside 0..31).
ATTNC_DEVICE u32 bitSpan(int lo, int hi) {
  lo = maxOf(lo, 0);
  hi = minOf(hi, 31);
  return lo > hi ? 0u : (0xFFFFFFFFu >> (31 - hi)) & (0xFFFFFFFFu << lo);
}

// A 16-bit value's 2-bit groups spread 4 bits apart (group i to bits 4 i, 4 i + 1).
ATTNC_DEVICE u32 spreadPairs(u32 x) {
  x = (x | (x << 8)) & 0x00FF00FFu;
  x = (x | (x << 4)) & 0x0F0F0F0Fu;
  return (x | (x << 2)) & 0x33333333u;
}

// keepBitsFromParts for a join that comes as key ranges (VariantJoinRanges): each of the lane's two
// rows keeps the keys of [join_k_lo, join_k_hi] (and below kv_len) whose key value equals its row
// value (kJoinEq), so the warp makes the tile's decisions as 128-key bitmaps a row: the range from
// two shifts a word, the equality from ballots over the key values (one round per distinct row
// value among the warp's 16 rows: a document's rows are one or two), then each lane takes its
// elements' bits (keys kTile0 + 8 ni + 2 (lane & 3) + j): fewer than half the instructions of
// the join per element (docs/design/sm80-and-common.md).
template <class Variant, int NTiles, class Params>
ATTNC_DEVICE KeepBits<1, NTiles> keepBitsRanges(const Params& p, int b, int h, int qRow,
                                                int kTile0, int lane,
                                                const MaskPartReads<Variant, 1, NTiles>& reads) {
  static_assert(NTiles % 8 == 0, "whole 32-key words and KeepBits words");
  constexpr int kWords = NTiles / 4;  // 32 keys a word: bit i of word w is key kTile0 + 32 w + i
  typename Variant::MaskRow rows[1][2];
  maskRowParts<Variant, 1>(rows, p, b, h, qRow);
  // the tile's last key in the sequence
  const int kLast = minOf(kTile0 + 8 * NTiles, p.kv_len) - 1;
  u32 keep[2][kWords];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = minOf(qRow + 8 * r, p.q_len - 1);
    const long long lo = Variant::join_k_lo(p, b, h, q, rows[0][r]);
    const long long hi = Variant::join_k_hi(p, b, h, q, rows[0][r]);
    // [lo, hi] within [kTile0, kLast], relative to kTile0 (empty: first > last)
    const int first = lo > kLast ? 8 * NTiles : int(maxOf(lo, (long long)kTile0) - kTile0);
    const int last = hi < kTile0 ? -1 : int(minOf(hi, (long long)kLast) - kTile0);
#pragma unroll
    for (int w = 0; w < kWords; ++w) keep[r][w] = bitSpan(first - 32 * w, last - 32 * w);
  }
  if constexpr (Variant::kJoinEq) {
    const int rowValue[2] = {Variant::join_eq_row(rows[0][0]), Variant::join_eq_row(rows[0][1])};
    int keyValue[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) keyValue[w] = Variant::join_eq_col(reads.made[w]);
    // One round per distinct row value still pending in the warp: the keys whose value equals it.
    bool pending[2] = {true, true};
    u32 equal[2][kWords] = {};
    for (;;) {
      const u32 pending0 = __ballot_sync(0xffffffffu, pending[0]);
      const u32 pending1 = __ballot_sync(0xffffffffu, pending[1]);
      if ((pending0 | pending1) == 0u) break;
      const int source = __ffs(pending0 != 0u ? pending0 : pending1) - 1;
      const int value =
          __shfl_sync(0xffffffffu, pending0 != 0u ? rowValue[0] : rowValue[1], source);
      u32 match[kWords];
#pragma unroll
      for (int w = 0; w < kWords; ++w) match[w] = __ballot_sync(0xffffffffu, keyValue[w] == value);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool take = pending[r] && rowValue[r] == value;
#pragma unroll
        for (int w = 0; w < kWords; ++w) equal[r][w] = take ? match[w] : equal[r][w];
        pending[r] = pending[r] && !take;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int w = 0; w < kWords; ++w) keep[r][w] &= equal[r][w];
  }
  // This lane's keys are kTile0 + 8 ni + 2 t + j (t = lane & 3): shifted right by 2 t, key
  // 32 w + 8 m + 2 t + j of a row sits at bit 8 m + j of word w; those pairs, packed, are bits
  // 2 ni + j of `pairs` (ni = 4 w + m); KeepBits wants bit 4 ni + 2 r + j.
  const int shift = 2 * (lane & 3);
  KeepBits<1, NTiles> bits{};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    u32 pairs[ceilDiv(kWords, 4)] = {};
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      const u32 next = w + 1 < kWords ? keep[r][w + 1] : 0u;
      u32 x = __funnelshift_r(keep[r][w], next, shift) & 0x03030303u;
      x = (x | (x >> 6)) & 0x000F000Fu;
      x = (x | (x >> 12)) & 0xFFu;
      pairs[w / 4] |= x << (8 * (w % 4));
    }
#pragma unroll
    for (int i = 0; i < NTiles / 8; ++i)  // KeepBits word i: ni = 8 i .. 8 i + 7
      bits.words[i] |= spreadPairs((pairs[i / 2] >> (16 * (i % 2))) & 0xFFFFu) << (2 * r);
  }
  return bits;
}

// The per-element decisions of a tile from readMaskParts' values (a split mask only).
template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE KeepBits<MTiles, NTiles> keepBitsFromParts(
    const Params& p, int b, int h, int qRow, int kTile0, int lane,
    const MaskPartReads<Variant, MTiles, NTiles>& reads) {
  if constexpr (VariantJoinRanges<Variant>::value && MTiles == 1 && NTiles % 8 == 0)
    return keepBitsRanges<Variant, NTiles>(p, b, h, qRow, kTile0, lane, reads);
  const int kCol = kTile0 + 2 * (lane & 3);
  typename Variant::MaskRow rows[MTiles][2];
  maskRowParts<Variant, MTiles>(rows, p, b, h, qRow);
  return collectKeepBits<MTiles, NTiles>([&](auto&& visit) {
    forEachKeepJoined<Variant, MTiles, NTiles>(
        p, b, h, qRow, kCol, rows,
        [&](int ni, int j) {
          return shuffleWords(reads.made[ni / 4], (kCol - kTile0 + 8 * ni + j) & 31);
        },
        visit);
  });
}

template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE KeepBits<MTiles, NTiles> maskKeepBitsWarp(const Params& p, int b, int h, int qRow,
                                                        int kTile0, int lane, bool perElement) {
  if constexpr (Variant::kHasMask && MaskSplitOf<Variant>::value) {
    if (perElement)
      return keepBitsFromParts<Variant, MTiles, NTiles>(
          p, b, h, qRow, kTile0, lane,
          readMaskParts<Variant, MTiles, NTiles>(p, b, h, qRow, kTile0, lane));
  }
  return maskKeepBits<Variant, MTiles, NTiles>(p, b, h, qRow, kTile0 + 2 * (lane & 3), perElement);
}
#endif

}  // namespace sm80
}  // namespace attnc
