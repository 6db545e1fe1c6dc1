// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; constants
// as in Random123) and the exact mapping from an attention element to its dropout decision.
// Host-compilable on purpose: the host reference and the backward kernels regenerate the same
// mask bit for bit from this header, so nothing here may change without changing all of them.
//
// The mapping, for element (b, h, q, k) of a forward or backward pass with launch arguments
// seed = p.dropout_seed (u64), offset = p.dropout_offset (u64), p = p.dropout_p (float):
//   key     = { lo32(seed), hi32(seed) ^ hi32(offset) }
//   counter = { u32(k >> 2), u32(q), u32(b * heads_q + h), lo32(offset) }
//   r       = philox4x32_10(counter, key)[k & 3]
//   dropped = r < threshold,  threshold = u32(min(double(p) * 2^32, 2^32 - 1))  (truncating)
// Kept probabilities are scaled by 1 / (1 - p); the softmax normaliser l and the LSE are computed
// from the probabilities before dropout.
#pragma once

#include "attnc/common/types.h"

namespace attnc {

namespace philox {

constexpr u32 kM0 = 0xD2511F53u;
constexpr u32 kM1 = 0xCD9E8D57u;
constexpr u32 kW0 = 0x9E3779B9u;  // golden ratio
constexpr u32 kW1 = 0xBB67AE85u;  // sqrt(3) - 1

// One round: two 32x32->64 multiplies, the high halves mixed with the other words and the key.
ATTNC_HD u32x4 round(u32x4 c, u32 k0, u32 k1) {
  const u64 p0 = u64(kM0) * c.x;
  const u64 p1 = u64(kM1) * c.z;
  const u32 hi0 = u32(p0 >> 32), lo0 = u32(p0);
  const u32 hi1 = u32(p1 >> 32), lo1 = u32(p1);
  return u32x4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
}

}  // namespace philox

// Philox4x32 with 10 rounds; the key is bumped by the Weyl constants between rounds.
ATTNC_HD u32x4 philox4x32_10(u32x4 counter, u32 k0, u32 k1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < 10; ++i) {
    counter = philox::round(counter, k0, k1);
    k0 += philox::kW0;
    k1 += philox::kW1;
  }
  return counter;
}

// The four random words for keys 4 * (k >> 2) .. 4 * (k >> 2) + 3 of row q of head (b, h);
// `batchHead` is b * heads_q + h.
ATTNC_HD u32x4 dropoutRandom(u64 seed, u64 offset, u32 batchHead, u32 q, u32 kGroup) {
  const u32 k0 = u32(seed);
  const u32 k1 = u32(seed >> 32) ^ u32(offset >> 32);
  return philox4x32_10(u32x4{kGroup, q, batchHead, u32(offset)}, k0, k1);
}

// Random words below this value drop their element: P(drop) = threshold / 2^32 ~= p.
ATTNC_HD u32 dropoutThreshold(float p) {
  const double t = double(p) * 4294967296.0;
  if (!(t > 0.0)) return 0u;  // also p == NaN: drop nothing
  return t >= 4294967295.0 ? 4294967295u : u32(t);
}

}  // namespace attnc
