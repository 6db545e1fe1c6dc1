// Which kv tiles a q tile visits, and how much masking each needs. The generated Variant's mask
// hook, instantiated over intervals, classifies a (q range) x (k range) rectangle as empty (Tri::False:
// skip it, no loads, no math), full (Tri::True: no per-element mask) or partial (Tri::Unknown).
//
// The visited range [first, last] comes from two binary searches: "the mask over q x [0, t * BlockKV)
// is False" can only turn from true to false as t grows, because interval evaluation over a
// sub-range is never less precise than over the whole; the same holds for suffixes. Tiles inside
// the range are classified again, so empty tiles in the middle (document masks) are skipped too.
// Keys at or past kv_len are outside every range; only the last tile can hold some, and it is
// flagged as the tail so the kernel masks them element by element.
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {

template <class Variant, int BlockKV, class Params = FwdParams>
struct KvTiles {
  using Tri = expr::Tri;
  using IntI = expr::IntI;

  const Params& p;
  int b, h;
  int qLo, qHi;  // the q tile's rows, clipped to q_len - 1 (qLo <= qHi)
  int numTiles;  // ceil(kv_len / BlockKV)

  ATTNC_HD KvTiles(const Params& params, int batch, int head, int qFirst, int qLast)
      : p(params), b(batch), h(head), qLo(qFirst), qHi(qLast),
        numTiles(ceilDiv(params.kv_len, BlockKV)) {}

  // The mask over rows [rowLo, rowHi] x keys [kLo, kHi] (both non-empty, inside the sequences).
  ATTNC_HD Tri classify(int rowLo, int rowHi, int kLo, int kHi) const {
    if constexpr (Variant::kHasMask) {
      return Variant::mask(p, IntI{b, b}, IntI{h, h}, IntI{rowLo, rowHi}, IntI{kLo, kHi});
    } else {
      return Tri::True;
    }
  }

  ATTNC_HD int tileEnd(int t) const { return minOf((t + 1) * BlockKV, p.kv_len) - 1; }
  ATTNC_HD Tri tileClass(int t) const { return classify(qLo, qHi, t * BlockKV, tileEnd(t)); }
  // The last tile may reach past kv_len; its extra keys are masked element by element.
  ATTNC_HD bool isTail(int t) const { return (t + 1) * BlockKV > p.kv_len; }

  // First tile that is not provably empty: the largest t with [0, t * BlockKV) empty.
  ATTNC_HD int first() const {
    if constexpr (!Variant::kHasMask) {
      return 0;
    } else {
      int lo = 0, hi = numTiles + 1;  // prefix(lo) is empty (vacuously for 0); prefix(hi) is not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        const int kHi = minOf(mid * BlockKV, p.kv_len) - 1;
        if (classify(qLo, qHi, 0, kHi) == Tri::False)
          lo = mid;
        else
          hi = mid;
      }
      return lo;
    }
  }

  // Last tile that is not provably empty: one before the smallest t with [t * BlockKV, kv_len)
  // empty. Returns first - 1 or less when nothing is left.
  ATTNC_HD int last() const {
    if constexpr (!Variant::kHasMask) {
      return numTiles - 1;
    } else {
      int lo = -1, hi = numTiles;  // suffix(hi) is empty (vacuously for numTiles); suffix(lo) not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (classify(qLo, qHi, mid * BlockKV, p.kv_len - 1) == Tri::False)
          hi = mid;
        else
          lo = mid;
      }
      return hi - 1;
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

// The same for the backward's dK/dV kernel, with the loops' roles swapped: a fixed kv tile (keys
// [kLo, kHi]) and the q tiles of BlockQ rows of one query head it must visit. first()/last() binary
// search prefixes [0, t * BlockQ) and suffixes [t * BlockQ, q_len) of the queries (sound for the
// same reason as above); rows at or past q_len belong to the last tile only (isTail).
template <class Variant, int BlockQ, class Params>
struct QTiles {
  using Tri = expr::Tri;
  using IntI = expr::IntI;

  const Params& p;
  int b, h;
  int kLo, kHi;  // the kv tile's keys, clipped to kv_len - 1 (kLo <= kHi)
  int numTiles;  // ceil(q_len / BlockQ)

  ATTNC_HD QTiles(const Params& params, int batch, int head, int kFirst, int kLast)
      : p(params), b(batch), h(head), kLo(kFirst), kHi(kLast),
        numTiles(ceilDiv(params.q_len, BlockQ)) {}

  // The mask over rows [rowLo, rowHi] x keys [keyLo, keyHi] (both non-empty, inside the sequences).
  ATTNC_HD Tri classify(int rowLo, int rowHi, int keyLo, int keyHi) const {
    if constexpr (Variant::kHasMask) {
      return Variant::mask(p, IntI{b, b}, IntI{h, h}, IntI{rowLo, rowHi}, IntI{keyLo, keyHi});
    } else {
      return Tri::True;
    }
  }

  ATTNC_HD int tileEnd(int t) const { return minOf((t + 1) * BlockQ, p.q_len) - 1; }
  ATTNC_HD Tri tileClass(int t) const { return classify(t * BlockQ, tileEnd(t), kLo, kHi); }
  ATTNC_HD bool isTail(int t) const { return (t + 1) * BlockQ > p.q_len; }

  ATTNC_HD int first() const {
    if constexpr (!Variant::kHasMask) {
      return 0;
    } else {
      int lo = 0, hi = numTiles + 1;  // prefix(lo) is empty (vacuously for 0); prefix(hi) is not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        const int rowHi = minOf(mid * BlockQ, p.q_len) - 1;
        if (classify(0, rowHi, kLo, kHi) == Tri::False)
          lo = mid;
        else
          hi = mid;
      }
      return lo;
    }
  }

  ATTNC_HD int last() const {
    if constexpr (!Variant::kHasMask) {
      return numTiles - 1;
    } else {
      int lo = -1, hi = numTiles;  // suffix(hi) is empty (vacuously for numTiles); suffix(lo) not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (classify(mid * BlockQ, p.q_len - 1, kLo, kHi) == Tri::False)
          hi = mid;
        else
          lo = mid;
      }
      return hi - 1;
    }
  }

  ATTNC_HD int nextLive(int t, int last, Tri& cls) const {
    for (; t <= last; ++t) {
      cls = tileClass(t);
      if (cls != Tri::False) return t;
    }
    cls = Tri::False;
    return t;
  }
};

}  // namespace attnc
