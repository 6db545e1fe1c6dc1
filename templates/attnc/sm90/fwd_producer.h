// The producer warp of the sm_90a forward: its lane 0 copies Q once and then K and V of every live
// kv tile into the ring of stages with TMA, each completing on the stage's "full" mbarrier, and
// waits on the stage's "empty" mbarriers before reusing it; all 32 lanes walk the live tiles
// (kv_tiles.h), and with each K the tile's index and class go into the stage's schedule slot.
// Under a mask its first steps run before the block's first barrier sync (produceStart).
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/fwd_smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// Q's copy (the producer's lane 0), first of the block's copies: it then runs while the tile search
// reads the mask's inputs or classes. The consumers wait for Q even when no tile is live, so the
// copy has landed before the block exits or writes O through Q's tiles.
template <class Config>
ATTNC_DEVICE void issueQ(const FwdParamsTma& pt, const ForwardSmem<Config>& smem, int q0, int h,
                         int b) {
  constexpr int kChunkBytes = 64 * kSwizzleRowBytes;  // one 64-row box of Q
  prefetchTensorMap(&pt.tma_q);
  prefetchTensorMap(&pt.tma_k);
  prefetchTensorMap(&pt.tma_v);
  mbarrierArriveExpectTx(smem.qFull(), Config::kQBytes);
#pragma unroll
  for (int g = 0; g < Config::kConsumers; ++g)
#pragma unroll
    for (int c = 0; c < Config::kKChunks; ++c)
      tmaLoad4d(smem.q(g) + u32(c * kChunkBytes), &pt.tma_q, smem.qFull(), c * kChunkElements,
                q0 + 64 * g, h, b);
  timelineMark(pt.base, kTimelineQIssued);
}

// The producer's lane 0 at a stage whose slots are free: publishes tile `tile` (`live`; else -1,
// the end of the stream) and its class in the stage's schedule slot and issues its K, or ends the
// stream by completing the K barrier with a plain arrival.
template <class Config>
ATTNC_DEVICE void issueK(const FwdParamsTma& pt, const ForwardSmem<Config>& smem, int stage,
                         bool live, int tile, expr::Tri tileClass, int b, int hKv) {
  smem.publish(stage, live ? tile : -1, tileClass);
  if (live)
    tmaLoadTile<Config::kKChunks, Config::kBlockKV>(smem.k(stage), &pt.tma_k, smem.kFull(stage),
                                                    Config::kKBytes, tile * Config::kBlockKV, hKv,
                                                    b);
  else
    mbarrierArrive(smem.kFull(stage));
}

// The producer's lane 0: tile `tile`'s V into stage `stage`, whose V slot is free.
template <class Config>
ATTNC_DEVICE void issueV(const FwdParamsTma& pt, const ForwardSmem<Config>& smem, int stage,
                         int tile, int b, int hKv) {
  tmaLoadTile<Config::kVChunks, Config::kBlockKV>(smem.v(stage), &pt.tma_v, smem.vFull(stage),
                                                  Config::kVBytes, tile * Config::kBlockKV, hKv, b);
}

// The producer warp's stream from position `iteration`, whose tile is `tile` (past lastTile: the
// stream has ended) of class tileClass: lane 0 issues K and V of each live tile through the
// stages, waiting on a stage's "empty" mbarriers before reusing it. With each K it publishes the
// tile's index and class in the stage's schedule slot, so the consumers never search or classify
// whole tiles; a slot holding -1 (its K barrier completed by a plain arrival) ends the stream.
// All 32 lanes walk the tiles (nextLive), sharing the scans of declared inputs (kv_tiles.h).
template <class Config, class Variant>
ATTNC_DEVICE void produceFrom(const FwdParamsTma& pt, const ForwardSmem<Config>& smem,
                              const KvTiles<Variant, Config::kBlockKV>& tiles, int iteration,
                              int tile, int lastTile, expr::Tri tileClass, int b, int hKv) {
  const bool leader = (threadIdx.x & 31) == 0;
  for (;; ++iteration) {
    const int stage = iteration % Config::kStages;
    const u32 phase = u32(iteration / Config::kStages) & 1u;
    const bool live = tile <= lastTile;
    mbarrierWait(smem.kEmpty(stage), phase ^ 1u);
    if (leader) {
      issueK(pt, smem, stage, live, tile, tileClass, b, hKv);
      if (kTimeline && live && iteration == 0) timelineMark(pt.base, kTimelineFirstKIssued);
    }
    if (!live) return;
    mbarrierWait(smem.vEmpty(stage), phase ^ 1u);
    if (leader) issueV(pt, smem, stage, tile, b, hKv);
    tile = tiles.nextLive(tile + 1, lastTile, tileClass);
  }
}

// The producer warp after the block's barrier sync, without the early start (forward()): Q, the
// search for the live tiles, then the whole stream.
template <class Config, class Variant>
ATTNC_DEVICE void produce(const FwdParamsTma& pt, const ForwardSmem<Config>& smem,
                          const KvTiles<Variant, Config::kBlockKV>& tiles, int q0, int b, int h,
                          int hKv) {
  if ((threadIdx.x & 31) == 0) issueQ(pt, smem, q0, h, b);
  // (its timeline starts in forward(): the plain start's first instruction is the barrier init)
  int firstTile, lastTile;
  tiles.bounds(firstTile, lastTile);
  expr::Tri tileClass;
  const int tile = tiles.nextLive(firstTile, lastTile, tileClass);
  produceFrom<Config, Variant>(pt, smem, tiles, 0, tile, lastTile, tileClass, b, hKv);
}

// Where produceStart left the stream: the tile of position 0 (past lastTile: no live tile).
struct ProducerCursor {
  int tile, lastTile;
  expr::Tri tileClass;
};

// With the early start (forward(): masked specs), the producer's first warp runs this before the
// block's first barrier sync, so that the block's copies start while its other warps are still
// starting: lane 0 initializes the mbarriers and issues Q, all 32 lanes find the live kv tiles
// (TileWalk::boundsWarp; for masks that read declared inputs, the launch's precomputed classes),
// and lane 0 publishes the first live tile in stage 0's schedule slot and issues its K and V
// (stage 0 is empty: no wait). The warp continues with produceStarted after the sync.
template <class Config, class Variant>
ATTNC_DEVICE ProducerCursor produceStart(const FwdParamsTma& pt, const ForwardSmem<Config>& smem,
                                         const KvTiles<Variant, Config::kBlockKV>& tiles, int q0,
                                         int b, int h, int hKv) {
  const bool leader = (threadIdx.x & 31) == 0;
  if (leader) {
    timelineStart(pt.base);
    initBarriers(smem);
    issueQ(pt, smem, q0, h, b);
  }
  ProducerCursor cursor;
  int firstTile;
  tiles.boundsWarp(firstTile, cursor.lastTile);
  cursor.tile = tiles.nextLive(firstTile, cursor.lastTile, cursor.tileClass);
  if (leader) {
    const bool live = cursor.tile <= cursor.lastTile;
    issueK(pt, smem, 0, live, cursor.tile, cursor.tileClass, b, hKv);
    if (live) {
      issueV(pt, smem, 0, cursor.tile, b, hKv);
      timelineMark(pt.base, kTimelineFirstKIssued);
    }
  }
  return cursor;
}

// The rest of the stream after produceStart, from position 1.
template <class Config, class Variant>
ATTNC_DEVICE void produceStarted(const FwdParamsTma& pt, const ForwardSmem<Config>& smem,
                                 const KvTiles<Variant, Config::kBlockKV>& tiles,
                                 const ProducerCursor& cursor, int b, int hKv) {
  if (cursor.tile > cursor.lastTile) return;
  expr::Tri tileClass;
  const int tile = tiles.nextLive(cursor.tile + 1, cursor.lastTile, tileClass);
  produceFrom<Config, Variant>(pt, smem, tiles, 1, tile, cursor.lastTile, tileClass, b, hKv);
}

}  // namespace sm90
}  // namespace attnc
