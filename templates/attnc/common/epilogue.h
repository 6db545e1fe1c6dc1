// The elementwise epilogue on a score tile held in mma accumulators (layout in mma.h): the
// Variant's score hook, its per-element mask and the kv_len tail before the softmax, and dropout on
// the probabilities after it. Element (mi, ni, c) of a lane is row qRow + 16 mi + 8 (c / 2) and key
// kCol + 8 ni + c % 2, where qRow = first row + lane / 4 and kCol = first key + 2 (lane % 4).
// The mask steps are mask.h (per element, and as bits) and mask_warp.h (decided with the whole
// warp), dropout's dropout.h; this header has the score hook and includes them.
#pragma once

#include "attnc/common/dropout.h"
#include "attnc/common/expr.h"
#include "attnc/common/mask.h"
#include "attnc/common/mask_warp.h"
#include "attnc/common/params.h"
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

}  // namespace sm80
}  // namespace attnc
