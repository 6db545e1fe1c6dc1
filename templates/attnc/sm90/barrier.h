// The mbarrier protocol of the sm_90a kernels, one PTX instruction per function: the phase-counting
// shared-memory barriers that TMA copies complete on and that producers and consumers hand stages
// over with.
//
// An mbarrier counts arrivals and, with expect_tx, bytes. A phase completes when every expected
// arrival and byte has come; its parity (0, 1, 0, ...) is what waiters test: waiting on parity P
// returns once the phase with that parity has completed, so a fresh barrier (phase 0 running) lets
// a wait on parity 1 through at once. Producers wait on "empty" barriers with the opposite parity
// to the consumers' "full" ones for that reason.
#pragma once

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

}  // namespace sm90
}  // namespace attnc
