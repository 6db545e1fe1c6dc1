// The elementwise epilogue on a score tile held in mma accumulators (layout in mma.h): the
// Variant's score hook, its per-element mask and the kv_len tail before the softmax, and dropout on
// the probabilities after it. Element (mi, ni, c) of a lane is row qRow + 16 mi + 8 (c / 2) and key
// kCol + 8 ni + c % 2, where qRow = first row + lane / 4 and kCol = first key + 2 (lane % 4).
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// Applies the score hook to every element: s <- score(s * scale, b, h, q, k). Indices handed to the
// hook are clamped into the sequences, so a hook that reads a declared input (`doc[q]`) never reads
// past it on the padding rows and keys (whose results are discarded or masked anyway).
template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyScore(float (&s)[MTiles][NTiles][4], const Params& p, int b, int h,
                             int qRow, int kCol) {
  const int qMax = p.q_len - 1, kMax = p.kv_len - 1;
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int q = minOf(qRow + 16 * mi + 8 * (c >> 1), qMax);
        const int k = minOf(kCol + 8 * ni + (c & 1), kMax);
        s[mi][ni][c] = Variant::score(p, s[mi][ni][c] * p.scale, b, h, q, k);
      }
}

// Sets masked scores to -inf. With `perElement` the Variant's scalar mask decides (a partial tile);
// keys at or past kv_len are always masked (the tail tile).
template <class Variant, int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyMask(float (&s)[MTiles][NTiles][4], const Params& p, int b, int h,
                            int qRow, int kCol, bool perElement) {
  const int qMax = p.q_len - 1;
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int q = minOf(qRow + 16 * mi + 8 * (c >> 1), qMax);
        const int k = kCol + 8 * ni + (c & 1);
        bool keep = k < p.kv_len;
        if constexpr (Variant::kHasMask) {
          if (perElement && keep) keep = Variant::mask(p, b, h, q, k);
        }
        if (!keep) s[mi][ni][c] = -kInfinity;
      }
}

// Zeroes the dropped probabilities (the mapping is documented in philox.h). A lane holds keys
// 2t, 2t+1 of each group of four that shares one Philox call, so it uses words (2t & 3) and the next.
template <int MTiles, int NTiles, class Params>
ATTNC_DEVICE void applyDropout(float (&s)[MTiles][NTiles][4], const Params& p, u32 batchHead,
                               u32 threshold, int qRow, int kCol) {
  const bool upperPair = (kCol & 2) != 0;
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int ni = 0; ni < NTiles; ++ni) {
        const u32 q = u32(qRow + 16 * mi + 8 * r);
        const u32 kGroup = u32(kCol + 8 * ni) >> 2;
        const u32x4 w = dropoutRandom(p.dropout_seed, p.dropout_offset, batchHead, q, kGroup);
        const u32 r0 = upperPair ? w.z : w.x;
        const u32 r1 = upperPair ? w.w : w.y;
        if (r0 < threshold) s[mi][ni][2 * r] = 0.0f;
        if (r1 < threshold) s[mi][ni][2 * r + 1] = 0.0f;
      }
}

}  // namespace sm80
}  // namespace attnc
