// Shared-memory layouts of the sm_90a backward kernels (sizes in bwd_config.h): the dK/dV
// kernel's (BackwardSmem) with its one-time setup (mbarriers, padding chunks) and the block
// coordinates its roles read, and the dQ kernel's (DqSmem).
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// The dK/dV kernel's: [K][V][Q_0 dO_0][Q_1 dO_1]...[dS^T: 2 buffers x consumers]
// [dQ fp32 per consumer][stats per stage][mbarriers, slots].
template <class Config>
struct BackwardSmem {
  u32 base;  // 1024-byte aligned

  ATTNC_DEVICE explicit BackwardSmem(unsigned char* raw) : base(swizzleAlignedBase(raw)) {}

  ATTNC_DEVICE u32 k() const { return base; }
  ATTNC_DEVICE u32 v() const { return base + u32(Config::kKBytes); }
  ATTNC_DEVICE u32 q(int stage) const {
    return base + u32(Config::kKBytes + Config::kVBytes + stage * Config::kStageBytes);
  }
  ATTNC_DEVICE u32 dO(int stage) const { return q(stage) + u32(Config::kQBytes); }
  // dS^T buffer `buffer` of consumer `group`: the consumers' tiles of one buffer are adjacent, so
  // they form dS^T over all the block's keys. (With the head-dim split, whose consumers share the
  // block's 64 keys: group 0's is the block's dS^T, group 1's its P^T.)
  ATTNC_DEVICE u32 dsT(int buffer, int group) const {
    return q(Config::kStages) + u32((buffer * Config::kConsumers + group) * Config::kDsBytes);
  }
  ATTNC_DEVICE u32 dq(int group) const {
    return dsT(2, 0) + u32(group * Config::kDqTileBytes);
  }
  // A q tile's log2-domain LSE (kBlockQ floats), then its delta (kBlockQ floats).
  ATTNC_DEVICE u32 stats(int stage) const {
    return dq(Config::kConsumers) + u32(stage * Config::kStatsBytes);
  }
  ATTNC_DEVICE u32 barrier(int i) const { return stats(Config::kStages) + u32(8 * i); }
  ATTNC_DEVICE u32 kvFull() const { return barrier(0); }
  ATTNC_DEVICE u32 full(int stage) const { return barrier(1 + stage); }
  ATTNC_DEVICE u32 empty(int stage) const { return barrier(1 + Config::kStages + stage); }
  // dS^T buffer written by every consumer / read by every consumer's dQ GEMM.
  ATTNC_DEVICE u32 dsFull(int buffer) const { return barrier(1 + 2 * Config::kStages + buffer); }
  ATTNC_DEVICE u32 dsEmpty(int buffer) const { return barrier(3 + 2 * Config::kStages + buffer); }

  // Each stage's schedule slot: query head (-1: the stream has ended), q tile, class, and the
  // block's batch (on the ordered grid the consumers read it here instead of computing it,
  // kvBlockCoord; like the rest of the slot, only while they hold the stage).
  ATTNC_DEVICE u32 slot(int stage) const {
    return barrier(5 + 2 * Config::kStages) + u32(16 * stage);
  }
  ATTNC_DEVICE void publish(int stage, int head, int tile, expr::Tri cls, int batch) const {
    sm80::storeShared32(slot(stage), u32(head));
    sm80::storeShared32(slot(stage) + 4, u32(tile));
    sm80::storeShared32(slot(stage) + 8, u32(cls));
    sm80::storeShared32(slot(stage) + 12, u32(batch));
  }
  ATTNC_DEVICE int scheduledHead(int stage) const { return int(loadShared32(slot(stage))); }
  ATTNC_DEVICE int scheduledTile(int stage) const { return int(loadShared32(slot(stage) + 4)); }
  ATTNC_DEVICE expr::Tri scheduledClass(int stage) const {
    return expr::Tri(loadShared32(slot(stage) + 8));
  }
  ATTNC_DEVICE int scheduledBatch(int stage) const { return int(loadShared32(slot(stage) + 12)); }
};

// The dK/dV kernel's mbarriers (one thread, before the block's first barrier sync).
template <class Config>
ATTNC_DEVICE void initBarriers(const BackwardSmem<Config>& smem) {
  mbarrierInit(smem.kvFull(), 2);  // the K and the V copy each announce their bytes
#pragma unroll
  for (int s = 0; s < Config::kStages; ++s) {
    mbarrierInit(smem.full(s), 1 + 32);  // lane 0's copies + every producer lane's stats
    mbarrierInit(smem.empty(s), 128 * Config::kConsumers);
  }
#pragma unroll
  for (int buffer = 0; buffer < 2; ++buffer) {
    mbarrierInit(smem.dsFull(buffer), 128 * Config::kConsumers);
    mbarrierInit(smem.dsEmpty(buffer), 128 * Config::kConsumers);
  }
  fenceBarrierInit();
}

// Zeroes the chunks past a padded tile's loaded ones (bwd_config.h splitChunks) in K, V and each
// stage's Q and dO, with every thread of the block: tiles of `rows` rows are chunk after chunk of
// rows x 128 bytes.
template <class Config>
ATTNC_DEVICE void zeroPaddingChunks(const BackwardSmem<Config>& smem) {
  const auto zero = [](u32 tile, int rows, int firstChunk, int chunks) {
    const u32 begin = tile + u32(firstChunk * rows * kSwizzleRowBytes);
    const u32 end = tile + u32(chunks * rows * kSwizzleRowBytes);
    for (u32 at = begin + 16u * threadIdx.x; at < end; at += 16u * Config::kThreads)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(at), "r"(0u) : "memory");
  };
  zero(smem.k(), Config::kBlockKV, Config::kKLoadChunks, Config::kKChunks);
  zero(smem.v(), Config::kBlockKV, Config::kVLoadChunks, Config::kVChunks);
  for (int stage = 0; stage < Config::kStages; ++stage) {
    zero(smem.q(stage), Config::kBlockQ, Config::kKLoadChunks, Config::kKChunks);
    zero(smem.dO(stage), Config::kBlockQ, Config::kVLoadChunks, Config::kVChunks);
  }
}

// The dK/dV kernel's block: (kv tile rank, kv head, batch) of an orderedGrid over kv heads x batch
// (block_order.h) where the Variant takes it, else of the grid (kv tiles, heads_kv, batch). With
// Fresh, from volatile reads of the special registers, which the compiler makes again at each call
// instead of keeping the result in a register.
template <bool Ordered, bool Fresh = false>
ATTNC_DEVICE BlockCoord kvBlockCoord(const BwdParams& p) {
  if constexpr (!Ordered)
    return plainBlock();
  else if constexpr (Fresh)
    return orderedBlockAgain(p.heads_kv, p.batch);
  else
    return orderedBlock(p.heads_kv, p.batch);
}

// The dQ kernel's: [Q: 2 x 64 rows][dO: 2 x 64 rows][K_0 V_0][K_1 V_1]...[mbarriers, slots].
template <class Config>
struct DqSmem {
  u32 base;  // 1024-byte aligned

  ATTNC_DEVICE explicit DqSmem(unsigned char* raw) : base(swizzleAlignedBase(raw)) {}

  ATTNC_DEVICE u32 q(int group) const { return base + u32(group * Config::kQGroupBytes); }
  ATTNC_DEVICE u32 dO(int group) const {
    return base + u32(Config::kQBytes + group * Config::kDoGroupBytes);
  }
  ATTNC_DEVICE u32 k(int stage) const {
    return base + u32(Config::kQBytes + Config::kDoBytes + stage * Config::kStageBytes);
  }
  ATTNC_DEVICE u32 v(int stage) const { return k(stage) + u32(Config::kKBytes); }
  ATTNC_DEVICE u32 barrier(int i) const { return k(Config::kStages) + u32(8 * i); }
  ATTNC_DEVICE u32 qFull() const { return barrier(0); }
  ATTNC_DEVICE u32 full(int stage) const { return barrier(1 + stage); }
  ATTNC_DEVICE u32 empty(int stage) const { return barrier(1 + Config::kStages + stage); }
  // Each stage's schedule slot (smem.h KvTileSlots).
  ATTNC_DEVICE KvTileSlots slots() const { return {barrier(1 + 2 * Config::kStages)}; }
};

}  // namespace sm90
}  // namespace attnc
