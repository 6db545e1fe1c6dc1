// The elementwise epilogue on a score tile held in mma accumulators (layout in mma.h): the
// Variant's score hook, its per-element mask and the kv_len tail before the softmax, and dropout on
// the probabilities after it. Element (mi, ni, c) of a lane is row qRow + 16 mi + 8 (c / 2) and key
// kCol + 8 ni + c % 2, where qRow = first row + lane / 4 and kCol = first key + 2 (lane % 4).
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// Applies the score hook to every element: s <- score(s * scale, b, h, q, k). With `Positions`
// (the sm_90a forward) q and k go to the hook unclamped as expr::Pos, a per-lane base plus the
// element's constant offset, so that position arithmetic (ALiBi's to_f32(q - k)) costs per tile
// rather than per element: padding rows are discarded and padding keys masked to -inf after the
// hook whatever it returned for them, and declared inputs clamp their own indices (expr.h). Without
// it the indices are clamped ints, as the backward recomputes them (there a padding element's
// derivative is multiplied by P = 0, which a non-finite value would turn into NaN); the sm_80
// forward keeps them too, since ALiBi's sm_80 forward spills with positions. With positions the
// score goes as expr::Scaled too, the raw score and the scale unmultiplied, so that the hook's
// first add or multiply folds the scale into an FFMA (expr.h).
template <class Variant, bool Positions = false, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyScore(float (&s)[MTiles][NTiles][4], const Params& p, int b, int h,
                             int qRow, int kCol) {
  const int qMax = p.q_len - 1, kMax = p.kv_len - 1;
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if constexpr (Positions) {
          const expr::Pos q{qRow, 16 * mi + 8 * (c >> 1)};
          const expr::Pos k{kCol, 8 * ni + (c & 1)};
          s[mi][ni][c] = Variant::score(p, expr::Scaled{s[mi][ni][c], p.scale}, b, h, q, k);
        } else {
          const int q = minOf(qRow + 16 * mi + 8 * (c >> 1), qMax);
          const int k = minOf(kCol + 8 * ni + (c & 1), kMax);
          s[mi][ni][c] = Variant::score(p, s[mi][ni][c] * p.scale, b, h, q, k);
        }
      }
}

// Whether the lane's element (q, k) is kept: inside kv_len and, with PerElement, by the Variant's
// scalar mask. The mask is evaluated without a branch (declared inputs clamp their indices), so
// that a tile's loads of one key or row are shared and issued together; under a per-element
// condition each element's loads waited for the previous element's.
template <class Variant, bool PerElement, class Params>
ATTNC_DEVICE bool keepElement(const Params& p, int b, int h, int q, int k) {
  bool keep = k < p.kv_len;
  if constexpr (Variant::kHasMask && PerElement) keep = keep & bool(Variant::mask(p, b, h, q, k));
  return keep;
}

// Calls body(Flag<true>) for a tile the mask decides per element, body(Flag<false>) otherwise:
// the branch is taken once per tile, outside the element loops.
template <class Body>
ATTNC_DEVICE void withPerElement(bool perElement, Body&& body) {
  if (perElement)
    body(Flag<true>());
  else
    body(Flag<false>());
}

// Calls visit(mi, ni, c) for each of a lane's elements of a score tile.
template <int MTiles, int NTiles, class Visit>
ATTNC_DEVICE void forEachIndex(Visit&& visit) {
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) visit(mi, ni, c);
}

// Calls visit(mi, ni, c, q, k) for each of a lane's elements of a score tile: row q (clamped to
// q_len - 1) and key k (not clamped).
template <int MTiles, int NTiles, class Params, class Visit>
ATTNC_DEVICE void forEachElement(const Params& p, int qRow, int kCol, Visit&& visit) {
  const int qMax = p.q_len - 1;
  forEachIndex<MTiles, NTiles>([&](int mi, int ni, int c) {
    visit(mi, ni, c, minOf(qRow + 16 * mi + 8 * (c >> 1), qMax), kCol + 8 * ni + (c & 1));
  });
}

// T where B holds, else F (std::conditional, which NVRTC's headers do not offer here).
template <bool B, class T, class F>
struct SelectType {
  using type = T;
};
template <class T, class F>
struct SelectType<false, T, F> {
  using type = F;
};
// Whether a Variant carries the mask split into its row, key and join parts (EmitCUDA.cpp
// emitMaskSplit: kMaskSplit, MaskRow, MaskCol, mask_row, mask_col, mask_join); hand-written ones
// (the unit tests') need not. Parts<true>::Row / Col are its MaskRow / MaskCol, Parts<false> empty
// placeholders, so that a kernel can declare them whether or not it takes the split.
struct NoMaskParts {
  struct Row {};
  struct Col {};
};
template <class V, class = void>
struct MaskSplitOf {
  static constexpr bool value = false;
  template <bool>
  using Parts = NoMaskParts;
};
template <class V>
struct MaskSplitOf<V, decltype(void(V::kMaskSplit))> {
  static constexpr bool value = V::kMaskSplit;
  struct Split {
    using Row = typename V::MaskRow;
    using Col = typename V::MaskCol;
  };
  template <bool Take>
  using Parts = typename SelectType<Take, Split, NoMaskParts>::type;
};

// The row parts of a lane's 2 MTiles rows (a split mask's mask_row, rows clamped to q_len - 1).
template <class Variant, int MTiles, class Params>
ATTNC_DEVICE void maskRowParts(typename Variant::MaskRow (&rows)[MTiles][2], const Params& p, int b,
                               int h, int qRow) {
  const int qMax = p.q_len - 1;
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) rows[mi][r] = Variant::mask_row(p, b, h, minOf(qRow + 16 * mi + 8 * r, qMax));
}

// forEachKeepSplit (below) with the row parts already made (maskRowParts).
template <class Variant, int MTiles, int NTiles, class Params, class ColOf, class Visit>
ATTNC_DEVICE void forEachKeepJoined(const Params& p, int b, int h, int qRow, int kCol,
                                    const typename Variant::MaskRow (&rows)[MTiles][2],
                                    ColOf&& colOf, Visit&& visit) {
  const int qMax = p.q_len - 1;
  typename Variant::MaskCol cols[NTiles][2];
#pragma unroll
  for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
    for (int j = 0; j < 2; ++j) cols[ni][j] = colOf(ni, j);
  forEachIndex<MTiles, NTiles>([&](int mi, int ni, int c) {
    const int q = minOf(qRow + 16 * mi + 8 * (c >> 1), qMax), k = kCol + 8 * ni + (c & 1);
    visit(mi, ni, c,
          (k < p.kv_len) & Variant::mask_join(p, b, h, q, k, rows[mi][c >> 1], cols[ni][c & 1]));
  });
}

// forEachKeep's split path (below) with the key parts from colOf(ni, j), the part of key kCol + 8 ni
// + j: the row parts are computed once per row of the lane (2 MTiles), then the key parts once per
// key (2 NTiles), then joined per element.
template <class Variant, int MTiles, int NTiles, class Params, class ColOf, class Visit>
ATTNC_DEVICE void forEachKeepSplit(const Params& p, int b, int h, int qRow, int kCol, ColOf&& colOf,
                                   Visit&& visit) {
  typename Variant::MaskRow rows[MTiles][2];
  maskRowParts<Variant, MTiles>(rows, p, b, h, qRow);
  forEachKeepJoined<Variant, MTiles, NTiles>(p, b, h, qRow, kCol, rows, colOf, visit);
}

// Calls visit(mi, ni, c, keep) for each of a lane's elements of a score tile, keep as keepElement
// decides it (rows clamped to q_len - 1 as in forEachElement). Per element with a split mask
// (forEachKeepSplit), a document mask's id loads are one per row and one per key rather than two
// per element.
template <class Variant, bool PerElement, int MTiles, int NTiles, class Params, class Visit>
ATTNC_DEVICE void forEachKeep(const Params& p, int b, int h, int qRow, int kCol, Visit&& visit) {
  if constexpr (PerElement && Variant::kHasMask && MaskSplitOf<Variant>::value) {
    forEachKeepSplit<Variant, MTiles, NTiles>(
        p, b, h, qRow, kCol,
        [&](int ni, int j) { return Variant::mask_col(p, b, h, kCol + 8 * ni + j); }, visit);
  } else {
    forEachElement<MTiles, NTiles>(p, qRow, kCol, [&](int mi, int ni, int c, int q, int k) {
      visit(mi, ni, c, keepElement<Variant, PerElement>(p, b, h, q, k));
    });
  }
}

// Sets masked scores to -inf. With `perElement` the Variant's scalar mask decides (a partial tile);
// keys at or past kv_len are always masked (the tail tile). `BranchFree` (the sm_90a forward)
// takes the per-element choice once for the tile (keepElement); the sm_80 forward keeps it per
// element, under which each element's loads wait for the previous one's, because at its 255
// registers the branch-free form spilled (causal_hd128: 8 bytes).
template <class Variant, bool BranchFree = false, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyMask(float (&s)[MTiles][NTiles][4], const Params& p, int b, int h,
                            int qRow, int kCol, bool perElement) {
  if constexpr (BranchFree) {
    withPerElement(perElement, [&](auto decides) {
      forEachKeep<Variant, decltype(decides)::value, MTiles, NTiles>(
          p, b, h, qRow, kCol, [&](int mi, int ni, int c, bool keep) {
            if (!keep) s[mi][ni][c] = -kInfinity;
          });
    });
  } else {
    forEachElement<MTiles, NTiles>(p, qRow, kCol, [&](int mi, int ni, int c, int q, int k) {
      bool keep = k < p.kv_len;
      if constexpr (Variant::kHasMask) {
        if (perElement && keep) keep = Variant::mask(p, b, h, q, k);
      }
      if (!keep) s[mi][ni][c] = -kInfinity;
    });
  }
}

// A lane's mask decisions for one tile as bits (element [mi][ni][c] is bit bit(mi, ni, c)), made
// before the scores exist: the sm_90a forward evaluates them while S = Q K^T runs, so that the
// mask's integer work and its loads of declared inputs (a document mask reads one id per key) are
// off the path from S to the softmax. Same decisions as applyMask<Variant, true>.
template <int MTiles, int NTiles>
struct KeepBits {
  static constexpr int kBits = MTiles * NTiles * 4;
  u32 words[ceilDiv(kBits, 32)];
  ATTNC_HD static constexpr int bit(int mi, int ni, int c) { return (mi * NTiles + ni) * 4 + c; }
  ATTNC_HD bool kept(int mi, int ni, int c) const {
    const int i = bit(mi, ni, c);
    return (words[i / 32] >> (i % 32)) & 1u;
  }
};

// The bits of the decisions forEach(visit) passes to visit(mi, ni, c, kept).
template <int MTiles, int NTiles, class ForEach>
ATTNC_DEVICE KeepBits<MTiles, NTiles> collectKeepBits(ForEach&& forEach) {
  using Bits = KeepBits<MTiles, NTiles>;
  Bits keep;
#pragma unroll
  for (int w = 0; w < ceilDiv(Bits::kBits, 32); ++w) keep.words[w] = 0u;
  forEach([&](int mi, int ni, int c, bool kept) {
    const int i = Bits::bit(mi, ni, c);
    keep.words[i / 32] |= u32(kept) << (i % 32);
  });
  return keep;
}

template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE KeepBits<MTiles, NTiles> maskKeepBits(const Params& p, int b, int h, int qRow,
                                                    int kCol, bool perElement) {
  return collectKeepBits<MTiles, NTiles>([&](auto&& visit) {
    withPerElement(perElement, [&](auto decides) {
      forEachKeep<Variant, decltype(decides)::value, MTiles, NTiles>(p, b, h, qRow, kCol, visit);
    });
  });
}

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
// NTiles keys then cost NTiles / 4 reads and 2 NTiles shuffles instead of 2 NTiles reads: the
// reads were most of a document tile's mask (docs/perf/H200.md, 2026-12-02). Key 8 ni + 2 c + j
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
// elements' bits (keys kTile0 + 8 ni + 2 (lane & 3) + j). About 230 SASS instructions a thread
// for a 128-key tile of document's forward against about 500 for the join per element (2026-12-04).
template <class Variant, int NTiles, class Params>
ATTNC_DEVICE KeepBits<1, NTiles> keepBitsRanges(const Params& p, int b, int h, int qRow,
                                                int kTile0, int lane,
                                                const MaskPartReads<Variant, 1, NTiles>& reads) {
  static_assert(NTiles % 8 == 0, "whole 32-key words and KeepBits words");
  constexpr int kWords = NTiles / 4;  // 32 keys a word: bit i of word w is key kTile0 + 32 w + i
  typename Variant::MaskRow rows[1][2];
  maskRowParts<Variant, 1>(rows, p, b, h, qRow);
  const int kLast = minOf(kTile0 + 8 * NTiles, p.kv_len) - 1;  // the tile's last key in the sequence
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
      const int value = __shfl_sync(0xffffffffu, pending0 != 0u ? rowValue[0] : rowValue[1], source);
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
        [&](int ni, int j) { return shuffleWords(reads.made[ni / 4], (kCol - kTile0 + 8 * ni + j) & 31); },
        visit);
  });
}

template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE KeepBits<MTiles, NTiles> maskKeepBitsWarp(const Params& p, int b, int h, int qRow,
                                                        int kTile0, int lane, bool perElement) {
  if constexpr (Variant::kHasMask && MaskSplitOf<Variant>::value) {
    if (perElement)
      return keepBitsFromParts<Variant, MTiles, NTiles>(
          p, b, h, qRow, kTile0, lane, readMaskParts<Variant, MTiles, NTiles>(p, b, h, qRow, kTile0, lane));
  }
  return maskKeepBits<Variant, MTiles, NTiles>(p, b, h, qRow, kTile0 + 2 * (lane & 3), perElement);
}
#endif

// Sets the scores whose keep bit is clear to -inf.
template <int MTiles, int NTiles>
ATTNC_DEVICE void applyKeepBits(float (&s)[MTiles][NTiles][4], const KeepBits<MTiles, NTiles>& keep) {
  forEachIndex<MTiles, NTiles>([&](int mi, int ni, int c) {
    if (!keep.kept(mi, ni, c)) s[mi][ni][c] = -kInfinity;
  });
}

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
