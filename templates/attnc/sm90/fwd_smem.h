// The sm_90a forward's shared memory (config.h FwdConfig has the sizes): Q's tile per consumer,
// the ring of K/V stages, and the mbarriers and schedule slots that hand stages between the
// producer and the consumers, which one thread initializes before the block's first barrier sync.
//
// [Q: Consumers x 64 rows][K_0 V_0][K_1 V_1]...[Q full; K full, V full, K empty, V empty a stage]
// [a schedule slot a stage]
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/smem.h"

namespace attnc {
namespace sm90 {

template <class Config>
struct ForwardSmem {
  u32 base;  // 1024-byte aligned

  ATTNC_DEVICE explicit ForwardSmem(unsigned char* raw) : base(swizzleAlignedBase(raw)) {}

  ATTNC_DEVICE u32 q(int group) const { return base + u32(group * Config::kQGroupBytes); }
  ATTNC_DEVICE u32 k(int stage) const {
    return base + u32(Config::kQBytes + stage * Config::kStageBytes);
  }
  ATTNC_DEVICE u32 v(int stage) const { return k(stage) + u32(Config::kKBytes); }
  ATTNC_DEVICE u32 barrier(int i) const {
    return base + u32(Config::kQBytes + Config::kStages * Config::kStageBytes + 8 * i);
  }
  ATTNC_DEVICE u32 qFull() const { return barrier(0); }
  ATTNC_DEVICE u32 kFull(int stage) const { return barrier(1 + stage); }
  ATTNC_DEVICE u32 vFull(int stage) const { return barrier(1 + Config::kStages + stage); }
  ATTNC_DEVICE u32 kEmpty(int stage) const { return barrier(1 + 2 * Config::kStages + stage); }
  ATTNC_DEVICE u32 vEmpty(int stage) const { return barrier(1 + 3 * Config::kStages + stage); }

  // Each stage's schedule slot (KvTileSlots).
  ATTNC_DEVICE KvTileSlots slots() const { return {barrier(1 + 4 * Config::kStages)}; }
  ATTNC_DEVICE void publish(int stage, int tile, expr::Tri cls) const {
    slots().publish(stage, tile, cls);
  }
  ATTNC_DEVICE int scheduledTile(int stage) const { return slots().scheduledTile(stage); }
  ATTNC_DEVICE expr::Tri scheduledClass(int stage) const { return slots().scheduledClass(stage); }
};

// The block's mbarriers (one thread, before the block's first barrier sync).
template <class Config>
ATTNC_DEVICE void initBarriers(const ForwardSmem<Config>& smem) {
  mbarrierInit(smem.qFull(), 1);
#pragma unroll
  for (int s = 0; s < Config::kStages; ++s) {
    mbarrierInit(smem.kFull(s), 1);
    mbarrierInit(smem.vFull(s), 1);
    mbarrierInit(smem.kEmpty(s), 128 * Config::kConsumers);
    mbarrierInit(smem.vEmpty(s), 128 * Config::kConsumers);
  }
  fenceBarrierInit();
}

}  // namespace sm90
}  // namespace attnc
