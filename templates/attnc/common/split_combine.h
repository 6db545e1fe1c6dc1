// The combine of split-KV partials: each split s of a row's keys left a normalized output O_s and
// its log-sum-exp lse_s; the row's softmax over all keys is their weighted sum. Per row:
//   m = max_s lse_s,  w_s = exp(lse_s - m),  O = sum_s w_s O_s / sum_s w_s,
//   LSE = m + log sum_s w_s,
// and a row whose splits kept no key (every lse_s = -inf) gets O = 0, LSE = -inf, as the forward's
// OnlineSoftmax::finish gives it. Written for one row at a time, so the decode's combine kernel
// calls it per (b, h, q) row (its lanes striding over dv) and a host test calls it as it is.
#pragma once

#include "attnc/common/types.h"

namespace attnc {

// e^x and ln x: the hardware's approximations on the device (as the forward's softmax), the host
// compiler's builtins on the host.
ATTNC_HD float combineExp(float x) {
#ifdef __CUDA_ARCH__
  return exp2Approx(x * kLog2e);
#else
  return __builtin_expf(x);
#endif
}
ATTNC_HD float combineLog(float x) {
#ifdef __CUDA_ARCH__
  return log2Approx(x) * kLn2;
#else
  return __builtin_logf(x);
#endif
}

// Programmatic dependent launch (PTX griddepcontrol, sm_90 and later; nothing on older targets and
// on the host): the split grid lets its combine launch before it ends, and the combine waits for
// the split grid's completion and writes before it reads a partial. Each is a no-op where the
// launch did not ask for the overlap (the runtime's cuLaunchKernelEx attribute).
ATTNC_HD void letDependentGridLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
ATTNC_HD void waitForPrerequisiteGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The weights of one row's splits: w_s / sum w = exp(lse_s - m) * invSum.
struct SplitWeights {
  float rowMax;  // m; -inf when no split kept a key
  float invSum;  // 1 / sum_s w_s; 0 when no split kept a key
  float lse;     // m + log sum_s w_s; -inf when no split kept a key

  // The weight of a split with log-sum-exp `lse_s`; 0 for a split that kept no key, whose O_s
  // (zeros, or whatever an unused slot holds) is then never read.
  ATTNC_HD float of(float lseSplit) const {
    return lseSplit == -kInfinity ? 0.0f : combineExp(lseSplit - rowMax) * invSum;
  }
};

// The weights of the `splits` splits whose log-sum-exps are lse[0], lse[stride], ...
ATTNC_HD SplitWeights splitWeights(const float* lse, i64 stride, int splits) {
  float rowMax = -kInfinity;
  for (int s = 0; s < splits; ++s) {
    const float v = lse[s * stride];
    rowMax = v > rowMax ? v : rowMax;
  }
  if (rowMax == -kInfinity)
    return {-kInfinity, 0.0f, -kInfinity};
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float v = lse[s * stride];
    if (v != -kInfinity)
      sum += combineExp(v - rowMax);
  }
  return {rowMax, 1.0f / sum, rowMax + combineLog(sum)};
}

// Column d of the combined output: sum_s w_s O_s[d] / sum_s w_s over the partials
// o[s * oStride + d]; 0 when no split kept a key. The weights are recomputed per column (an ex2
// per split and column) rather than held: a row has up to 128 splits (split_kv.h).
ATTNC_HD float combineColumn(const SplitWeights& weights, const float* lse, i64 lseStride,
                             const float* o, i64 oStride, int splits, int d) {
  float acc = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float w = weights.of(lse[s * lseStride]);
    if (w != 0.0f)
      acc += w * o[s * oStride + d];
  }
  return acc;
}

// One row: writes the combined O's columns dFirst, dFirst + dStep, ... below dv through
// store(d, value) and returns the row's LSE. A warp per row passes (lane, 32); a host loop (0, 1).
template <class StoreO>
ATTNC_HD float combineRow(const float* lse, i64 lseStride, const float* o, i64 oStride, int splits,
                          int dv, int dFirst, int dStep, StoreO& store) {
  const SplitWeights weights = splitWeights(lse, lseStride, splits);
  for (int d = dFirst; d < dv; d += dStep)
    store(d, combineColumn(weights, lse, lseStride, o, oStride, splits, d));
  return weights.lse;
}

#ifdef __CUDA_ARCH__
// combineRow spread over a warp, for the device: lane l holds the LSEs of splits l, l + 32, ...
// (the maximum and the sum reduced across the warp), and each lane sums its own 4-column chunks of
// O over all splits, kUnroll splits' loads in flight at once. A warp walking the splits one
// dependent load at a time left a 29-split row latency-bound for tens of microseconds. `o` and
// oStride are 16-byte aligned (dv a multiple of 4); store4(d, x, y, z, w) writes columns d..d+3.
template <int Dv, int MaxSplits, class Store4>
ATTNC_DEVICE float combineRowWarp(const float* lse, i64 lseStride, const float* o, i64 oStride,
                                  int splits, int lane, const Store4& store4) {
  static_assert(Dv % 4 == 0, "whole 16-byte chunks of O");
  constexpr int kLseSlots = (MaxSplits + 31) / 32;
  constexpr int kChunks = (Dv / 4 + 31) / 32;  // a lane's chunks: columns 4 (lane + 32 c) ..
  constexpr int kUnroll = 8;                     // splits' loads in flight a lane
  float weight[kLseSlots];
  float rowMax = -kInfinity;
#pragma unroll
  for (int j = 0; j < kLseSlots; ++j) {
    const int s = lane + 32 * j;
    weight[j] = s < splits ? lse[s * lseStride] : -kInfinity;
    rowMax = fmaxf(rowMax, weight[j]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    rowMax = fmaxf(rowMax, __shfl_xor_sync(0xffffffffu, rowMax, offset));
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kLseSlots; ++j) {
    weight[j] = weight[j] == -kInfinity ? 0.0f : combineExp(weight[j] - rowMax);
    sum += weight[j];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float invSum = sum > 0.0f ? 1.0f / sum : 0.0f;

  float4 acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < kLseSlots; ++j) {
    const int n = minOf(32, splits - 32 * j);
    const float w = weight[j] * invSum;
    for (int s0 = 0; s0 < n; s0 += kUnroll) {
      // All kUnroll splits' loads first, then their sums: loads guarded by the weight were
      // issued two at a time.
      float ws[kUnroll];
      float4 x[kUnroll][kChunks];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        // Splits past n load split n - 1's slot again with weight 0: every load unconditional.
        const int s = minOf(s0 + u, n - 1);
        ws[u] = s0 + u < n ? __shfl_sync(0xffffffffu, w, s) : 0.0f;
        const float* part = o + (32 * j + s) * oStride;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = minOf(4 * (lane + 32 * c), Dv - 4);
          x[u][c] = *reinterpret_cast<const float4*>(part + d);
        }
      }
      // An unused split's slot (weight 0) may hold anything, NaN included: selected out.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const bool use = ws[u] != 0.0f;
          acc[c].x += use ? ws[u] * x[u][c].x : 0.0f;
          acc[c].y += use ? ws[u] * x[u][c].y : 0.0f;
          acc[c].z += use ? ws[u] * x[u][c].z : 0.0f;
          acc[c].w += use ? ws[u] * x[u][c].w : 0.0f;
        }
    }
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = 4 * (lane + 32 * c);
    if (Dv % 128 == 0 || d < Dv) store4(d, acc[c]);
  }
  return rowMax == -kInfinity ? -kInfinity : rowMax + combineLog(sum);
}
#endif

}  // namespace attnc
