// The TMA unit of the sm_90a kernels, one PTX instruction per function except tmaLoadTile: bulk
// tensor copies from global into shared memory that complete on an mbarrier (barrier.h), and bulk
// and vector reductions of fp32 from the kernels into global memory.
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

ATTNC_DEVICE void prefetchTensorMap(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// Copies the box at coordinates (c0 innermost .. c3) of a 4-D tensor map into shared memory at
// `dst` and completes `bytes` (the whole box, out-of-bounds parts zero-filled) on `bar`.
ATTNC_DEVICE void tmaLoad4d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// One K or V tile: its 64-column chunks, each a TMA box of BlockKV rows from key kv0, announced to
// and completing on `bar`.
template <int Chunks, int BlockKV>
ATTNC_DEVICE void tmaLoadTile(u32 dst, const TensorMap* map, u32 bar, u32 bytes, int kv0, int h,
                              int b) {
  mbarrierArriveExpectTx(bar, bytes);
#pragma unroll
  for (int c = 0; c < Chunks; ++c)
    tmaLoad4d(dst + u32(c * BlockKV * kSwizzleRowBytes), map, bar, c * kChunkElements, kv0, h, b);
}

// Bulk (non-tensor) reduction of `bytes` (a multiple of 16, both addresses 16-byte aligned) of fp32
// from shared memory into global memory: dst[i] += src[i], performed by the TMA unit. Completes
// as a bulk group (commit, then wait for the group's reads of shared memory or its completion).
ATTNC_DEVICE void bulkReduceAddF32(float* dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<u64>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}
// *dst += (a, b, c, d) in global memory (16-byte aligned), one vector reduction (sm_90).
ATTNC_DEVICE void reduceAddGlobalF32x4(float* dst, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}

ATTNC_DEVICE void bulkCommit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most Pending bulk groups still read their shared-memory source.
template <int Pending>
ATTNC_DEVICE void bulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(Pending) : "memory");
}
// Waits until at most Pending bulk groups are incomplete (their global writes done).
template <int Pending>
ATTNC_DEVICE void bulkWait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(Pending) : "memory");
}

}  // namespace sm90
}  // namespace attnc
