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

// Where tile t's class (2 bits) sits in a row of precomputed classes (FwdParams::kv_tile_classes).
ATTNC_HD constexpr int tileClassWord(int t) { return t >> 4; }
ATTNC_HD constexpr int tileClassShift(int t) { return 2 * (t & 15); }
// Where tile t's 64-row group classes (8 bits, group g's class in bits 2 g, 2 g + 1) sit in a row
// of FwdParams::kv_group_classes.
ATTNC_HD constexpr int tileGroupWord(int t) { return t >> 2; }
ATTNC_HD constexpr int tileGroupShift(int t) { return 8 * (t & 3); }

// Whether a Variant's forward launches always precompute their tile classes (its
// `kTileClasses`, true for masks that read declared inputs: tile_classes.h), so that a forward
// kernel's walk reads them and never searches or classifies whole tiles itself; false for a
// Variant without the member. Only FwdParams carries them (the backward's walks search).
ATTNC_VARIANT_FLAG(VariantTileClasses, kTileClasses);
// Whether a Variant's mask never reads the query head (its `kMaskIgnoresHead`, emitted true where
// the launch makes tile classes and the mask region leaves its head argument unused): then every
// head's tiles classify alike, the launch classifies one head's (rows of head 0) and every head
// reads them. False without the member.
ATTNC_VARIANT_FLAG(VariantMaskIgnoresHead, kMaskIgnoresHead);
// The heads the tile-class rows have: heads_q, or 1 where the mask ignores the head.
template <class Variant>
ATTNC_HD int tileClassHeads(int heads_q) {
  return VariantMaskIgnoresHead<Variant>::value ? 1 : heads_q;
}
// The first tile-class row of (b, h): rows run (b, head, tile) over tileClassHeads heads.
template <class Variant>
ATTNC_HD i64 tileClassHeadRow(int b, int h, int heads_q) {
  return VariantMaskIgnoresHead<Variant>::value ? i64(b) : i64(b) * heads_q + h;
}
// The row of (b, h) and of tile `tile` of the fixed axis (`length` positions in tiles of `block`):
// what a kernel's walk passes to useTileClasses.
template <class Variant>
ATTNC_HD i64 tileClassRowIndex(int b, int h, int heads_q, int length, int block, int tile) {
  return tileClassHeadRow<Variant>(b, h, heads_q) * ceilDiv(length, block) + tile;
}
// The walks that read precomputed classes: the forward's along the keys (FwdParams::kv_tile_*),
// and the backward's two: the dK/dV kernel's along the queries (BwdParams::q_tile_*) and the
// sm_90a dQ kernel's along the keys (BwdParams::kv_tile_*; the sm80 dQ kernel's walk, with tiles
// of its own, opts out: TileWalk's Precomputed).
template <class P, bool AlongKeys>
struct ParamsTileClasses {
  static constexpr bool value = false;
};
template <>
struct ParamsTileClasses<FwdParams, true> {
  static constexpr bool value = true;
};
template <bool AlongKeys>
struct ParamsTileClasses<BwdParams, AlongKeys> {
  static constexpr bool value = true;
};
// Whether a launch's parameters are the forward's: its classes are along the keys, it alone has
// 64-row group classes (FwdParams::kv_group_classes), and its q tiles may be end-aligned.
template <class P>
struct IsForwardParams {
  static constexpr bool value = false;
};
template <>
struct IsForwardParams<FwdParams> {
  static constexpr bool value = true;
};
// A launch's rows of classes along one axis (AlongKeys: rows of kv tiles): the bounds, the class
// words and the words a row has.
template <bool AlongKeys>
ATTNC_HD const int* tileBoundsOf(const FwdParams& p) {
  static_assert(AlongKeys, "the forward's classes are along the keys");
  return p.kv_tile_bounds;
}
template <bool AlongKeys>
ATTNC_HD const u32* tileClassesOf(const FwdParams& p) {
  static_assert(AlongKeys, "the forward's classes are along the keys");
  return p.kv_tile_classes;
}
template <bool AlongKeys>
ATTNC_HD int tileClassWordsOf(const FwdParams& p) {
  static_assert(AlongKeys, "the forward's classes are along the keys");
  return p.kv_class_words;
}
template <bool AlongKeys>
ATTNC_HD const int* tileBoundsOf(const BwdParams& p) {
  return AlongKeys ? p.kv_tile_bounds : p.q_tile_bounds;
}
template <bool AlongKeys>
ATTNC_HD const u32* tileClassesOf(const BwdParams& p) {
  return AlongKeys ? p.kv_tile_classes : p.q_tile_classes;
}
template <bool AlongKeys>
ATTNC_HD int tileClassWordsOf(const BwdParams& p) {
  return AlongKeys ? p.kv_class_words : p.q_class_words;
}

// Tiles of Block positions along the keys (AlongKeys) or the queries, for the fixed range
// [fixedLo, fixedHi] of the other axis (clipped to its length - 1, fixedLo <= fixedHi).
// Precomputed false: never reads the launch's classes (a walk whose tiles are not those the
// classes were made for).
template <class Variant, int Block, class Params, bool AlongKeys, bool Precomputed = true>
struct TileWalk {
  using Tri = expr::Tri;
  using IntI = expr::IntI;
  static constexpr int kBlock = Block;

  const Params& p;
  int b, h;
  int fixedLo, fixedHi;
  int numTiles;  // ceil(length() / Block)
  // Whether first(), last(), bounds() and nextLive() read the fixed range's row of precomputed
  // tile classes (useTileClasses) instead of evaluating the mask over intervals.
  static constexpr bool kReadsClasses = Precomputed && VariantTileClasses<Variant>::value &&
                                       ParamsTileClasses<Params, AlongKeys>::value;
  // Whether groupClass() reads the launch's 64-row group classes (the forward's alone has them).
  static constexpr bool kReadsGroupClasses =
      kReadsClasses && AlongKeys && IsForwardParams<Params>::value;
  const int* boundsRow = nullptr;
  const u32* classRow = nullptr;
  const u32* groupRow = nullptr;  // FwdParams::kv_group_classes' row, where the launch made it

  ATTNC_HD TileWalk(const Params& params, int batch, int head, int first, int last)
      : p(params), b(batch), h(head), fixedLo(first), fixedHi(last),
        numTiles(ceilDiv(AlongKeys ? params.kv_len : params.q_len, Block)) {}

  // The row (params.h) of the precomputed classes to read, where kReadsClasses.
  ATTNC_HD void useTileClasses(i64 row) {
    if constexpr (kReadsClasses) {
      boundsRow = tileBoundsOf<AlongKeys>(p) + 2 * row;
      classRow = tileClassesOf<AlongKeys>(p) + row * tileClassWordsOf<AlongKeys>(p);
      if constexpr (kReadsGroupClasses) {
        if (p.kv_group_classes) groupRow = p.kv_group_classes + row * p.kv_group_words;
      }
    }
  }

  // The class of tile t for the 64-row group `group` of the fixed range (a partial tile can be
  // empty or full for one consumer warpgroup's rows alone): read where kReadsClasses (the sm_90a
  // forward gets FwdParams::kv_group_classes), else the mask over rows [rowLo, rowHi].
  ATTNC_HD Tri groupClass(int t, int group, int rowLo, int rowHi) const {
    if constexpr (kReadsGroupClasses) {
      return groupClassOf(groupClassWord(t), t, group);
    } else {
      return classify(rowLo, rowHi, t * Block, tileEnd(t));
    }
  }
  // The read and the decoding of groupClass where it reads the launch's classes, apart, so that a
  // kernel can issue the read well before it needs the class (the sm_90a forward's loop).
  ATTNC_HD u32 groupClassWord(int t) const { return groupRow[tileGroupWord(t)]; }
  ATTNC_HD static Tri groupClassOf(u32 word, int t, int group) {
    return Tri((word >> (tileGroupShift(t) + 2 * group)) & 3u);
  }

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

  // First tile that is not provably empty: the largest t with [0, t * Block) empty.
  ATTNC_HD int first() const {
    if constexpr (kReadsClasses) {
      return boundsRow[0];
    } else if constexpr (!Variant::kHasMask) {
      return 0;
    } else {
      int lo = 0, hi = numTiles + 1;  // prefix(lo) is empty (vacuously for 0); prefix(hi) is not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (classifyAlong(0, minOf(mid * Block, length()) - 1) == Tri::False)
          lo = mid;
        else
          hi = mid;
      }
      return lo;
    }
  }

  // Last tile that is not provably empty: one before the smallest t with [t * Block, length)
  // empty. Returns first - 1 or less when nothing is left.
  ATTNC_HD int last() const {
    if constexpr (kReadsClasses) {
      return boundsRow[1];
    } else if constexpr (!Variant::kHasMask) {
      return numTiles - 1;
    } else {
      int lo = -1, hi = numTiles;  // suffix(hi) is empty (vacuously for numTiles); suffix(lo) not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (classifyAlong(mid * Block, length() - 1) == Tri::False)
          hi = mid;
        else
          lo = mid;
      }
      return hi - 1;
    }
  }

  // first() and last() together.
  ATTNC_HD void bounds(int& firstTile, int& lastTile) const {
    firstTile = first();
    lastTile = last();
  }

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  // first() and last() with all 32 lanes of a warp (the sm_90a producer's call): where the mask is
  // evaluated over intervals, a 32-ary search instead of a binary one. Each round the lanes test 32
  // evenly spaced points of the bracket at once and a ballot counts those on the empty side (the
  // tests are monotone, as for first() and last()), so the bracket shrinks 32-fold a round: two
  // rounds a search up to 1023 tiles, against a binary search's chain of 7-11 mask evaluations
  // (a round's mask evaluation over intervals and ballot take as long as several binary steps, so
  // a cheap mask gains nothing: docs/design/sm80-and-common.md).
  ATTNC_DEVICE void boundsWarp(int& firstTile, int& lastTile) const {
    if constexpr (kReadsClasses || !Variant::kHasMask) {
      bounds(firstTile, lastTile);
    } else {
      // first: the largest t in [0, numTiles] with [0, t Block) empty (vacuously for 0).
      firstTile = lastTrueWarp(0, numTiles + 1, [&](int t) {
        return classifyAlong(0, minOf(t * Block, length()) - 1) == Tri::False;
      });
      // last: the largest t in [-1, numTiles) with [t Block, length) not empty (vacuously for -1),
      // one before the smallest empty suffix.
      lastTile = lastTrueWarp(-1, numTiles, [&](int t) {
        return classifyAlong(t * Block, length() - 1) != Tri::False;
      });
    }
  }

  // The largest t in [lo, hi) where `holds`, a test that is true at lo (not evaluated there), false
  // at hi and can turn from true to false only once as t grows. Each round the 32 lanes test 32
  // evenly spaced points of the bracket and a ballot counts those that hold.
  template <class Holds>
  static ATTNC_DEVICE int lastTrueWarp(int lo, int hi, const Holds& holds) {
    const int lane = int(threadIdx.x & 31);
    while (hi - lo > 1) {
      const int step = ceilDiv(hi - lo, 32);
      const int t = lo + (lane + 1) * step;
      lo += __popc(__ballot_sync(0xffffffffu, t < hi && holds(t))) * step;
      hi = minOf(hi, lo + step);
    }
    return lo;
  }
#endif

  // The first tile t' >= t, t' <= last, that is not empty (last + 1 when none), and its class.
  ATTNC_HD int nextLive(int t, int last, Tri& cls) const {
    for (; t <= last; ++t) {
      if constexpr (kReadsClasses)
        cls = Tri((classRow[tileClassWord(t)] >> tileClassShift(t)) & 3u);
      else
        cls = tileClass(t);
      if (cls != Tri::False) return t;
    }
    cls = Tri::False;
    return t;
  }
};

// The kv tiles of BlockKV keys that the q rows [qFirst, qLast] visit (Precomputed: TileWalk's).
template <class Variant, int BlockKV, class Params = FwdParams, bool Precomputed = true>
using KvTiles = TileWalk<Variant, BlockKV, Params, true, Precomputed>;

// The q tiles of BlockQ rows (of one query head) that the keys [kFirst, kLast] visit.
template <class Variant, int BlockQ, class Params>
using QTiles = TileWalk<Variant, BlockQ, Params, false>;

}  // namespace attnc
