// The steps the backward kernels of both families share (the sm80 dK/dV and dQ kernels, and the
// sm_90a ones in sm90/): the log2-domain LSE, the score hook recomputed with its derivative, and
// the stream of (query head, q tile) pairs a dK/dV block visits. Namespace sm80::bwd, where the
// sm80 backward defined them first; the sm_90a kernels call them by that name.
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {
namespace bwd {

// log2-domain LSE: exp2(x c - lse2) is the probability; a row with LSE = -inf (nothing unmasked)
// gets +inf, so every probability of it is exp2(-inf) = 0 instead of NaN.
ATTNC_DEVICE float lseLog2(float lse) { return lse == -kInfinity ? kInfinity : lse * kLog2e; }

// x becomes score(x scale) at positions q, k (ints or expr::Pos), and the result is
// d score / d (x scale).
template <class Variant, class Q>
ATTNC_DEVICE float hookWithGrad(const BwdParams& p, float& x, int b, int h, Q q, Q k) {
  // The raw score and the scale apart (expr::Scaled), as the sm_90a forward gives them: the
  // hooks' first add, multiply or division takes the scale in the same instruction, and the
  // derivative's identical steps are shared with the hook's.
  const expr::Scaled scaled{x, p.scale};
  x = Variant::score(p, scaled, b, h, q, k);
  return Variant::score_grad(p, scaled, b, h, q, k);
}

// The score hook recomputed on a raw score x = q.k (its indices clamped into the sequences, as
// the forward sees them): x becomes score(x scale), and the result is d score / d (x scale), 1
// without a hook.
template <class Variant>
ATTNC_DEVICE float scoreWithGrad(const BwdParams& p, float& x, int b, int h, int q, int k) {
  if constexpr (Variant::kHasScore) {
    return hookWithGrad<Variant>(p, x, b, h, minOf(q, p.q_len - 1), minOf(k, p.kv_len - 1));
  } else {
    return 1.0f;
  }
}

// The same on unclamped positions (expr::Pos: a per-lane base and the element's constant offset),
// for a Variant whose kBackwardPositions says its hook and derivative stay finite past the ends.
template <class Variant>
ATTNC_DEVICE float scoreWithGrad(const BwdParams& p, float& x, int b, int h, expr::Pos q,
                                 expr::Pos k) {
  return hookWithGrad<Variant>(p, x, b, h, q, k);
}

// Whether a Variant's backward may take unclamped positions (its `kBackwardPositions`; false
// without the member).
ATTNC_VARIANT_FLAG(BackwardPositions, kBackwardPositions);

// One q tile a backwardKV block visits: query head h, tile index, the head's last live tile, and
// the tile's class. h == end of the group means "no more".
struct QItem {
  int h, tile, last;
  expr::Tri cls;
};

// The (query head, q tile) pairs of one kv tile, in order: heads of the GQA group, and for each
// the non-empty q tiles between the binary-searched first and last ones.
template <class Config, class Variant>
struct QTileStream {
  using Tiles = QTiles<Variant, Config::kBlockQ, BwdParams>;
  const BwdParams& p;
  int b, kLo, kHi, hEnd;

  // Head h's walk, reading the launch's precomputed classes where the Variant has them
  // (tile_classes.h; row (b, h, kv tile)).
  ATTNC_DEVICE Tiles walk(int h) const {
    Tiles tiles(p, b, h, kLo, kHi);
    tiles.useTileClasses(tileClassRowIndex<Variant>(b, h, p.heads_q, p.kv_len, Config::kBlockKV,
                                                   kLo / Config::kBlockKV));
    return tiles;
  }
  ATTNC_DEVICE QItem settle(QItem it) const {
    while (it.h < hEnd) {
      const Tiles tiles = walk(it.h);
      it.tile = tiles.nextLive(it.tile, it.last, it.cls);
      if (it.tile <= it.last) return it;
      if (++it.h < hEnd) {
        const Tiles nextHead = walk(it.h);
        it.tile = nextHead.first();
        it.last = nextHead.last();
      }
    }
    return it;
  }
  ATTNC_DEVICE QItem start(int h) const {
    if (h >= hEnd) return QItem{h, 0, -1, expr::Tri::False};
    const Tiles tiles = walk(h);
    return settle(QItem{h, tiles.first(), tiles.last(), expr::Tri::False});
  }
  ATTNC_DEVICE QItem next(QItem it) const {
    if (it.h >= hEnd) return it;
    ++it.tile;
    return settle(it);
  }
};

}  // namespace bwd
}  // namespace sm80
}  // namespace attnc
