// The mask on a score tile held in mma accumulators (element layout: epilogue.h): per element
// (applyMask; forEachKeep, which takes a split mask's row, key and join parts apart), or as bits
// decided before the scores exist and applied once they do (KeepBits, maskKeepBits,
// applyKeepBits). Keys at or past kv_len are always masked.
#pragma once

#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

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
    for (int r = 0; r < 2; ++r)
      rows[mi][r] = Variant::mask_row(p, b, h, minOf(qRow + 16 * mi + 8 * r, qMax));
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

// forEachKeep's split path (below) with the key parts from colOf(ni, j), the part of key
// kCol + 8 ni + j: the row parts are computed once per row of the lane (2 MTiles), then the key
// parts once per key (2 NTiles), then joined per element.
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
// registers the branch-free form spills (causal_hd128).
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

// Sets the scores whose keep bit is clear to -inf.
template <int MTiles, int NTiles>
ATTNC_DEVICE void applyKeepBits(float (&s)[MTiles][NTiles][4],
                                const KeepBits<MTiles, NTiles>& keep) {
  forEachIndex<MTiles, NTiles>([&](int mi, int ni, int c) {
    if (!keep.kept(mi, ni, c)) s[mi][ni][c] = -kInfinity;
  });
}

}  // namespace sm80
}  // namespace attnc
