// Online softmax over the rows a thread holds in the m16n8 accumulator layout (rows g and g + 8 of
// each 16-row m-tile; see mma.h). The state is the running row maximum m and a partial row sum l;
// after each kv tile the output accumulator is rescaled so that, at the end, O / l is the softmax
// average of V and m + log(l) the log-sum-exp.
//
// Values are kept in the units the kernel scored in (raw q.k without a score hook, the hook's
// result with one); `log2Scale` (> 0) converts them to base-2 exponents, so every probability is
// one FFMA and one ex2: p = 2^(v * log2Scale - m * log2Scale).
#pragma once

#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// Sum or max over the 4 lanes of a quad, which together hold one accumulator row.
ATTNC_DEVICE float quadMax(float v) {
  v = fmax2(v, shuffleXor(v, 1));
  return fmax2(v, shuffleXor(v, 2));
}
ATTNC_DEVICE float quadSum(float v) {
  v += shuffleXor(v, 1);
  return v + shuffleXor(v, 2);
}

template <int MTiles>
struct OnlineSoftmax {
  // Index [mi][r]: row g + 8 r of m-tile mi.
  float rowMax[MTiles][2];
  float rowSum[MTiles][2];  // this lane's columns only; the quad sum happens once, in finish()

  ATTNC_DEVICE OnlineSoftmax() {
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        rowMax[mi][r] = -kInfinity;
        rowSum[mi][r] = 0.0f;
      }
  }

  // Folds one score tile into the state: raises the row maxima, rescales the running sums and the
  // output accumulator `o`, and overwrites `s` with the (unnormalised) probabilities.
  template <int NTiles, int NvTiles>
  ATTNC_DEVICE void update(float (&s)[MTiles][NTiles][4], float (&o)[MTiles][NvTiles][4],
                           float log2Scale) {
    float factors[MTiles][2];
    advance(s, log2Scale, factors);
    rescale(o, factors);
  }

  // update() in two halves, for a kernel whose O accumulator is still being written by an
  // asynchronous GEMM when the next tile's scores arrive: advance() does everything but touch O
  // and returns the factors O must be multiplied by; rescale() applies them later.
  template <int NTiles>
  ATTNC_DEVICE void advance(float (&s)[MTiles][NTiles][4], float log2Scale,
                            float (&factors)[MTiles][2]) {
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float tileMax = -kInfinity;
#pragma unroll
        for (int ni = 0; ni < NTiles; ++ni)
          tileMax = fmax2(tileMax, fmax2(s[mi][ni][2 * r], s[mi][ni][2 * r + 1]));
        const float newMax = fmax2(rowMax[mi][r], quadMax(tileMax));
        // A row with nothing unmasked so far keeps max -inf; subtracting 0 instead keeps
        // exp2(-inf - (-inf)) = NaN out of it (its probabilities are exp2(-inf) = 0).
        const float maxScaled = newMax == -kInfinity ? 0.0f : newMax * log2Scale;
        const float factor = exp2Approx(rowMax[mi][r] * log2Scale - maxScaled);
        rowMax[mi][r] = newMax;

        rowSum[mi][r] = rowSum[mi][r] * factor + probabilities(s, mi, r, log2Scale, maxScaled);
        factors[mi][r] = factor;
      }
    }
  }

  // advance() with lazy maxima (the sm_90a forward): a warp keeps its row maxima while no row of
  // it grows by more than kLazyRescaleLog2 in base-2 units, so that the tile's probabilities are
  // at most 2^kLazyRescaleLog2 instead of 1 and neither O nor the sums need rescaling. Returns
  // whether the warp moved its maxima (warp-uniform), that is whether rescale() is needed at all:
  // after the first tiles, mostly not. O / l and LSE = m + log2(l) hold for whatever m the sums
  // were taken against, so only the range of the intermediate values changes (fp32 sums, P <= 256
  // in bf16 or fp16). The max over a tile is a tree rather than a chain (5 levels for 32 columns).
  static constexpr float kLazyRescaleLog2 = 8.0f;

  template <int NTiles>
  ATTNC_DEVICE bool advanceLazy(float (&s)[MTiles][NTiles][4], float log2Scale,
                                float (&factors)[MTiles][2]) {
    float tileMax[MTiles][2];
    bool grows = false;
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m[NTiles];
#pragma unroll
        for (int ni = 0; ni < NTiles; ++ni) m[ni] = fmax2(s[mi][ni][2 * r], s[mi][ni][2 * r + 1]);
#pragma unroll
        for (int stride = 1; stride < NTiles; stride *= 2)
#pragma unroll
          for (int i = 0; i + stride < NTiles; i += 2 * stride) m[i] = fmax2(m[i], m[i + stride]);
        tileMax[mi][r] = quadMax(m[0]);
        // From -inf (nothing unmasked so far) any finite maximum is growth; -inf to -inf is not
        // (NaN compares false), and such a row's probabilities are 0 either way.
        grows = grows || (tileMax[mi][r] - rowMax[mi][r]) * log2Scale > kLazyRescaleLog2;
      }
    const bool moves = __any_sync(0xffffffffu, grows);
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float newMax = moves ? fmax2(rowMax[mi][r], tileMax[mi][r]) : rowMax[mi][r];
        const float maxScaled = newMax == -kInfinity ? 0.0f : newMax * log2Scale;  // as advance()
        const float factor = moves ? exp2Approx(rowMax[mi][r] * log2Scale - maxScaled) : 1.0f;
        rowMax[mi][r] = newMax;
        const float sum = probabilities(s, mi, r, log2Scale, maxScaled);
        rowSum[mi][r] = moves ? rowSum[mi][r] * factor + sum : rowSum[mi][r] + sum;
        factors[mi][r] = factor;
      }
    return moves;
  }

  // Overwrites row r of m-tile mi of `s` with 2^(s log2Scale - maxScaled) and returns this lane's
  // sum of them.
  template <int NTiles>
  ATTNC_DEVICE static float probabilities(float (&s)[MTiles][NTiles][4], int mi, int r,
                                          float log2Scale, float maxScaled) {
    float sum = 0.0f;
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni) {
#pragma unroll
      for (int c = 2 * r; c < 2 * r + 2; ++c) {
        s[mi][ni][c] = exp2Approx(s[mi][ni][c] * log2Scale - maxScaled);
        sum += s[mi][ni][c];
      }
    }
    return sum;
  }

  template <int NvTiles>
  ATTNC_DEVICE static void rescale(float (&o)[MTiles][NvTiles][4],
                                   const float (&factors)[MTiles][2]) {
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int nv = 0; nv < NvTiles; ++nv) {
          o[mi][nv][2 * r] *= factors[mi][r];
          o[mi][nv][2 * r + 1] *= factors[mi][r];
        }
  }

  // Normalises `o` in place (times `outScale`, the dropout rescale or 1) and returns, through
  // `lse`, the natural-log log-sum-exp of each row. A row that never saw an unmasked score has
  // l == 0: its output is 0 and its LSE -inf, never NaN.
  template <int NvTiles>
  ATTNC_DEVICE void finish(float (&o)[MTiles][NvTiles][4], float log2Scale, float outScale,
                           float (&lse)[MTiles][2]) {
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = quadSum(rowSum[mi][r]);
        const bool empty = !(l > 0.0f);
        const float factor = empty ? 0.0f : outScale / l;
        lse[mi][r] = empty ? -kInfinity : (rowMax[mi][r] * log2Scale + log2Approx(l)) * kLn2;
#pragma unroll
        for (int nv = 0; nv < NvTiles; ++nv) {
          o[mi][nv][2 * r] *= factor;
          o[mi][nv][2 * r + 1] *= factor;
        }
      }
    }
  }
};

}  // namespace sm80
}  // namespace attnc
