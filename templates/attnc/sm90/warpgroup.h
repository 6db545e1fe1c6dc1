// How the warpgroups of a warp-specialized sm_90a block work together: named barriers among a
// subset of warps, the consumers' ping-pong turns on them, and warpgroup register reallocation
// (setmaxnreg), by which the producer gives its registers to the consumers.
#pragma once

#include "attnc/common/types.h"

namespace attnc {
namespace sm90 {

// bar.sync on hardware barrier `id` (1..15; 0 is __syncthreads) among `threads` threads.
ATTNC_DEVICE void namedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// bar.arrive: counts this warp's threads towards barrier `id` without waiting.
ATTNC_DEVICE void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// The consumers' ping-pong turns (the forward's and the dQ kernel's loops): warpgroup g waits on
// named barrier 1 + g for its turn and then passes it on to the next one (barriers hold 2
// warpgroups).
template <class Config>
struct Turns {
  int group;
  ATTNC_DEVICE void take() const {
    if constexpr (Config::kConsumers > 1) namedBarrierSync(1 + group, 256);
  }
  ATTNC_DEVICE void pass() const {
    if constexpr (Config::kConsumers > 1)
      namedBarrierArrive(1 + (group + 1) % Config::kConsumers, 256);
  }
};

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
