// Which tiles along one axis a fixed range of the other axis meets, and how much masking each
// needs: the kv tiles a q tile visits (KvTiles, the forward and the deterministic dQ kernel) and
// the q tiles of one query head a kv tile visits (QTiles, the backward's dK/dV kernel). The
// generated Variant's mask hook, instantiated over intervals, classifies a (q range) x (k range)
// rectangle as empty (Tri::False: skip it, no loads, no math), full (Tri::True: no per-element
// mask) or partial (Tri::Unknown).
//
// The visited range [first, last] comes from two binary searches: "the mask over the fixed range x
// [0, t * Block) is False" can only turn from true to false as t grows, because interval evaluation
// over a sub-range is never less precise than over the whole; the same holds for suffixes. Tiles
// inside the range are classified again, so empty tiles in the middle (document masks) are skipped
// too. Positions at or past the walked axis's length are outside every range; only the last tile
// can hold some, and it is flagged as the tail so the kernel masks them element by element.
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {

// Tiles of Block positions along the keys (AlongKeys) or the queries, for the fixed range
// [fixedLo, fixedHi] of the other axis (clipped to its length - 1, fixedLo <= fixedHi).
template <class Variant, int Block, class Params, bool AlongKeys>
struct TileWalk {
  using Tri = expr::Tri;
  using IntI = expr::IntI;

  const Params& p;
  int b, h;
  int fixedLo, fixedHi;
  int numTiles;  // ceil(length() / Block)

  ATTNC_HD TileWalk(const Params& params, int batch, int head, int first, int last)
      : p(params), b(batch), h(head), fixedLo(first), fixedHi(last),
        numTiles(ceilDiv(AlongKeys ? params.kv_len : params.q_len, Block)) {}

  // The walked axis's length: kv_len or q_len.
  ATTNC_HD int length() const { return AlongKeys ? p.kv_len : p.q_len; }

  // The mask over rows [rowLo, rowHi] x keys [kLo, kHi] (both non-empty, inside the sequences).
  ATTNC_HD Tri classify(int rowLo, int rowHi, int kLo, int kHi) const {
    if constexpr (Variant::kHasMask) {
      return Variant::mask(p, IntI{b, b}, IntI{h, h}, IntI{rowLo, rowHi}, IntI{kLo, kHi});
    } else {
      return Tri::True;
    }
  }
  // The mask over the fixed range x [lo, hi] of the walked axis.
  ATTNC_HD Tri classifyAlong(int lo, int hi) const {
    return AlongKeys ? classify(fixedLo, fixedHi, lo, hi) : classify(lo, hi, fixedLo, fixedHi);
  }

  ATTNC_HD int tileEnd(int t) const { return minOf((t + 1) * Block, length()) - 1; }
  ATTNC_HD Tri tileClass(int t) const { return classifyAlong(t * Block, tileEnd(t)); }
  // The last tile may reach past the axis's length; its extra positions are masked per element.
  ATTNC_HD bool isTail(int t) const { return (t + 1) * Block > length(); }

  // One of the two binary searches for the tiles that are not provably empty. Search 0 returns
  // the first: the largest t with [0, t * Block) empty (prefix(lo) is empty, vacuously for 0;
  // prefix(hi) is not). Search 1 returns the last: one before the smallest t with
  // [t * Block, length) empty (suffix(hi) is empty, vacuously for numTiles; suffix(lo) is not),
  // first - 1 or less when nothing is left.
  ATTNC_HD int searchBound(int search) const {
    if constexpr (!Variant::kHasMask) {
      return search == 0 ? 0 : numTiles - 1;
    } else {
      int lo = search == 0 ? 0 : -1, hi = search == 0 ? numTiles + 1 : numTiles;
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        const bool empty =
            search == 0 ? classifyAlong(0, minOf(mid * Block, length()) - 1) == Tri::False
                        : classifyAlong(mid * Block, length() - 1) == Tri::False;
        if (search == 0 ? empty : !empty)
          lo = mid;
        else
          hi = mid;
      }
      return search == 0 ? lo : hi - 1;
    }
  }
  ATTNC_HD int first() const { return searchBound(0); }
  ATTNC_HD int last() const { return searchBound(1); }
  // first() and last() from one rolled loop: the mask over intervals, with its inlined scans of
  // declared inputs, then exists once in the code instead of twice (the sm_90a producer: compile
  // time). The sm80 kernels call first() and last(): their register allocation is tight, and the
  // loop's extra state made some of them spill.
  ATTNC_HD void bounds(int& firstTile, int& lastTile) const {
#pragma unroll 1
    for (int search = 0; search < 2; ++search) {
      const int t = searchBound(search);
      if (search == 0)
        firstTile = t;
      else
        lastTile = t;
    }
  }

  // The first tile t' >= t, t' <= last, that is not empty (last + 1 when none), and its class.
  ATTNC_HD int nextLive(int t, int last, Tri& cls) const {
    for (; t <= last; ++t) {
      cls = tileClass(t);
      if (cls != Tri::False) return t;
    }
    cls = Tri::False;
    return t;
  }
};

// The kv tiles of BlockKV keys that the q rows [qFirst, qLast] visit.
template <class Variant, int BlockKV, class Params = FwdParams>
using KvTiles = TileWalk<Variant, BlockKV, Params, true>;

// The q tiles of BlockQ rows (of one query head) that the keys [kFirst, kLast] visit.
template <class Variant, int BlockQ, class Params>
using QTiles = TileWalk<Variant, BlockQ, Params, false>;

}  // namespace attnc
