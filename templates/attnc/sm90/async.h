// Hopper's asynchronous machinery, one PTX instruction per function: mbarriers (the phase-counting
// barriers TMA copies complete on), TMA bulk tensor copies from global to shared memory, named
// barriers among a subset of warps, and warpgroup register reallocation (setmaxnreg).
//
// An mbarrier counts arrivals and, with expect_tx, bytes. A phase completes when every expected
// arrival and byte has come; its parity (0, 1, 0, ...) is what waiters test: waiting on parity P
// returns once the phase with that parity has completed, so a fresh barrier (phase 0 running) lets
// a wait on parity 1 through at once. Producers wait on "empty" barriers with the opposite parity
// to the consumers' "full" ones for that reason.
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm90 {

ATTNC_DEVICE void mbarrierInit(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals));
}

// Makes initialised mbarriers visible to the async proxy (TMA) and the other threads.
ATTNC_DEVICE void fenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) access.
ATTNC_DEVICE void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

ATTNC_DEVICE void mbarrierArrive(u32 bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}" ::"r"(bar)
               : "memory");
}

// One arrival that also announces `bytes` of TMA traffic for the current phase.
ATTNC_DEVICE void mbarrierArriveExpectTx(u32 bar, u32 bytes) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}" ::"r"(bar),
      "r"(bytes)
      : "memory");
}

ATTNC_DEVICE void mbarrierWait(u32 bar, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

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

ATTNC_DEVICE u32 loadShared32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
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

ATTNC_DEVICE float loadSharedF32(u32 addr) { return __builtin_bit_cast(float, loadShared32(addr)); }

ATTNC_DEVICE void storeSharedF32x2(u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
ATTNC_DEVICE void loadSharedF32x2(u32 addr, float& a, float& b) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(a), "=f"(b) : "r"(addr) : "memory");
}

// bar.sync on hardware barrier `id` (1..15; 0 is __syncthreads) among `threads` threads.
ATTNC_DEVICE void namedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// bar.arrive: counts this warp's threads towards barrier `id` without waiting.
ATTNC_DEVICE void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Warpgroup register reallocation: every warp of the warpgroup must execute the same one.
template <int Registers>
ATTNC_DEVICE void setMaxRegistersInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Registers));
}
template <int Registers>
ATTNC_DEVICE void setMaxRegistersDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Registers));
}

}  // namespace sm90
}  // namespace attnc
