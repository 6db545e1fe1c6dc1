// GQA packing for the decode: the Group = heads_q / heads_kv query heads that share a kv head
// become rows of one tile, so a block reads that kv head's K/V once for all of them. Packed row r
// of kv head hKv is query q = r / Group of head h = hKv * Group + r % Group (q-major: a row tile
// holds whole queries where Group divides its rows). Also the score and mask steps on a packed
// score tile, where each row has its own (q, h) (epilogue.h's take one head a tile).
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/mask.h"
#include "attnc/common/types.h"

namespace attnc {

template <int Group>
struct PackedRows {
  static_assert(Group >= 1, "a kv head serves at least one query head");
  static constexpr int kGroup = Group;

  ATTNC_HD static constexpr int query(int r) { return r / Group; }
  ATTNC_HD static constexpr int head(int r, int hKv) { return hKv * Group + r % Group; }
  // The packed row of query q of head h (h's kv head is h / Group).
  ATTNC_HD static constexpr int row(int q, int h) { return q * Group + h % Group; }
  // Packed rows of a sequence of qLen queries.
  ATTNC_HD static constexpr int rows(int qLen) { return qLen * Group; }

  // The queries of rows [rowLo, rowHi] (rowLo <= rowHi), clipped to qLen - 1: the row tile's q
  // interval for classifying its kv tiles (padding rows past the last query are discarded).
  ATTNC_HD static expr::IntI queries(int rowLo, int rowHi, int qLen) {
    return expr::IntI(minOf(query(rowLo), qLen - 1), minOf(query(rowHi), qLen - 1));
  }
  // The hull of the heads of rows [rowLo, rowHi]: the heads between rowLo's and rowHi's where the
  // rows are of one query, else the whole group (the rows wrap around it).
  ATTNC_HD static expr::IntI heads(int rowLo, int rowHi, int hKv) {
    if (query(rowLo) == query(rowHi)) return expr::IntI(head(rowLo, hKv), head(rowHi, hKv));
    return expr::IntI(hKv * Group, hKv * Group + Group - 1);
  }
};

namespace sm80 {

// (q, h) of a lane's 2 MTiles rows of a packed score tile (rows rowBase + 16 mi + 8 j, in the mma
// accumulator layout of epilogue.h; rowBase = the tile's first packed row + lane / 4), queries
// clamped into [0, qLen - 1] as applyScore clamps them: made once a block, where a per-element
// division would cost a tile's worth of integer work every kv tile.
template <int Group, int MTiles>
struct PackedLaneRows {
  int q[MTiles][2];
  int h[MTiles][2];

  ATTNC_HD PackedLaneRows(int rowBase, int hKv, int qLen) {
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = rowBase + 16 * mi + 8 * j;
        q[mi][j] = maxOf(minOf(PackedRows<Group>::query(r), qLen - 1), 0);
        h[mi][j] = PackedRows<Group>::head(r, hKv);
      }
  }
};

// applyScore (epilogue.h) on a packed tile: s <- score(s * scale, b, h, q, k) with each row's own
// (q, h); keys clamped to kv_len - 1 as there. p is a SeqView (seq_params.h) or any parameters
// with scale, q_len and kv_len.
template <class Variant, int Group, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyScorePacked(float (&s)[MTiles][NTiles][4], const Params& p, int b,
                                   const PackedLaneRows<Group, MTiles>& rows, int kCol) {
  const int kMax = p.kv_len - 1;
  forEachIndex<MTiles, NTiles>([&](int mi, int ni, int c) {
    const int k = minOf(kCol + 8 * ni + (c & 1), kMax);
    s[mi][ni][c] =
        Variant::score(p, s[mi][ni][c] * p.scale, b, rows.h[mi][c >> 1], rows.q[mi][c >> 1], k);
  });
}

// applyMask (mask.h) on a packed tile: masked scores to -inf. Keys at or past kv_len are always
// masked; with `perElement` (a partial tile) the Variant's mask at each row's own (q, h) decides,
// branch-free (keepElement), so that a tile's input loads are issued together.
template <class Variant, int Group, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyMaskPacked(float (&s)[MTiles][NTiles][4], const Params& p, int b,
                                  const PackedLaneRows<Group, MTiles>& rows, int kCol,
                                  bool perElement) {
  withPerElement(perElement, [&](auto decides) {
    forEachIndex<MTiles, NTiles>([&](int mi, int ni, int c) {
      const bool keep = keepElement<Variant, decltype(decides)::value>(
          p, b, rows.h[mi][c >> 1], rows.q[mi][c >> 1], kCol + 8 * ni + (c & 1));
      if (!keep) s[mi][ni][c] = -kInfinity;
    });
  });
}

}  // namespace sm80
}  // namespace attnc
