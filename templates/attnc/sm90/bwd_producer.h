// The producers of the sm_90a backward kernels, TMA copies through the stages' mbarriers: the
// dK/dV kernel's warp (K and V once, then Q, dO, LSE and delta of every (query head, q tile) pair
// it visits) and the dQ kernel's (Q and dO once, then K and V of every live kv tile).
#pragma once

#include "attnc/common/bwd_steps.h"
#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_smem.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// The dK/dV kernel's producer warp: K and V once, then for every (query head, q tile) pair of the
// stream Q, dO (TMA, lane 0), and the LSE and delta rows (all lanes), through the stages. A slot
// holding head -1 (its barrier completed by plain arrivals) ends the stream. The block's (kv tile,
// kv head, batch) come from `coord` (fresh reads of the block index, kvBlockCoord) wherever they
// are needed, and the stream is made again in every iteration, so that none of them is kept in
// one of the warp's 24 registers through the loop (on the ordered grid they are computed, and
// kept ones spilled: document, prefix-LM, sliding window).
template <class Config, class Variant, class Coord>
ATTNC_DEVICE void produceBackward(const BwdParamsTma& pt, const BackwardSmem<Config>& smem,
                                  const Coord& coord) {
  using Stream = sm80::bwd::QTileStream<Config, Variant>;
  const BwdParams& p = pt.base;
  const int lane = threadIdx.x & 31;
  const bool leader = lane == 0;
  const auto streamOf = [&](const BlockCoord& at) {
    const int kv0 = at.rank * Config::kBlockKV;
    const int groupSize = p.heads_q / p.heads_kv;
    return Stream{p, at.b, kv0, minOf(kv0 + Config::kBlockKV, p.kv_len) - 1,
                  (at.h + 1) * groupSize};
  };
  sm80::bwd::QItem item;
  {
    const BlockCoord at = coord();
    const Stream stream = streamOf(at);
    item = stream.start(at.h * (p.heads_q / p.heads_kv));
    if (leader && item.h < stream.hEnd) {
      prefetchTensorMap(&pt.tma_q);
      prefetchTensorMap(&pt.tma_do);
      tmaLoadTile<Config::kKLoadChunks, Config::kBlockKV>(
          smem.k(), &pt.tma_k, smem.kvFull(), Config::kKLoadBytes, stream.kLo, at.h, at.b);
      tmaLoadTile<Config::kVLoadChunks, Config::kBlockKV>(
          smem.v(), &pt.tma_v, smem.kvFull(), Config::kVLoadBytes, stream.kLo, at.h, at.b);
      timelineMark(p, kBwdTimelineKvIssued);
    }
  }
  constexpr int kChunkBytes = Config::kBlockQ * kSwizzleRowBytes;  // one box of Q or dO
  for (int iteration = 0;; ++iteration) {
    const int stage = iteration % Config::kStages;
    const u32 phase = u32(iteration / Config::kStages) & 1u;
    const BlockCoord at = coord();
    const Stream stream = streamOf(at);
    const bool live = item.h < stream.hEnd;
    const int q0 = item.tile * Config::kBlockQ;
    mbarrierWait(smem.empty(stage), phase ^ 1u);
    if (leader) {
      smem.publish(stage, live ? item.h : -1, item.tile, item.cls, at.b);
      if (live) {
        mbarrierArriveExpectTx(smem.full(stage), Config::kStageLoadBytes);
#pragma unroll
        for (int c = 0; c < Config::kKLoadChunks; ++c)
          tmaLoad4d(smem.q(stage) + u32(c * kChunkBytes), &pt.tma_q, smem.full(stage),
                    c * kChunkElements, q0, item.h, at.b);
#pragma unroll
        for (int c = 0; c < Config::kVLoadChunks; ++c)
          tmaLoad4d(smem.dO(stage) + u32(c * kChunkBytes), &pt.tma_do, smem.full(stage),
                    c * kChunkElements, q0, item.h, at.b);
        if (kTimeline && iteration == 0) timelineMark(p, kBwdTimelineStageIssued);
      } else {
        mbarrierArrive(smem.full(stage));
      }
    }
    if (live) {
      const i64 rowBase = (i64(at.b) * p.heads_q + item.h) * p.q_len;
      const u32 stats = smem.stats(stage);
#pragma unroll
      for (int r = lane; r < Config::kBlockQ; r += 32) {
        const int q = q0 + r;
        const bool inside = q < p.q_len;
        const float lse2 = inside ? sm80::bwd::lseLog2(p.lse[rowBase + q]) : kInfinity;
        const float delta = inside ? p.delta[rowBase + q] : 0.0f;
        sm80::storeShared32(stats + u32(4 * r), __builtin_bit_cast(u32, lse2));
        sm80::storeShared32(stats + u32(4 * (Config::kBlockQ + r)), __builtin_bit_cast(u32, delta));
      }
    }
    mbarrierArrive(smem.full(stage));  // every lane: its LSE and delta rows are written
    if (!live) return;
    item = stream.next(item);
  }
}

// The dQ kernel's setup (one thread, before the block's barrier sync): its mbarriers, then the
// copies of Q and dO of both consumers; rows past q_len are TMA's zero fill (their P is 0: LSE =
// +inf).
template <class Config>
ATTNC_DEVICE void startDqBlock(const BwdParamsTma& pt, const DqSmem<Config>& smem, int q0, int h,
                               int b) {
  mbarrierInit(smem.qFull(), 1);
#pragma unroll
  for (int s = 0; s < Config::kStages; ++s) {
    mbarrierInit(smem.full(s), 1);
    mbarrierInit(smem.empty(s), 128 * Config::kConsumers);
  }
  fenceBarrierInit();
  prefetchTensorMap(&pt.tma_q);
  prefetchTensorMap(&pt.tma_do);
  prefetchTensorMap(&pt.tma_k);
  prefetchTensorMap(&pt.tma_v);
  mbarrierArriveExpectTx(smem.qFull(), Config::kQBytes + Config::kDoBytes);
#pragma unroll
  for (int g = 0; g < Config::kConsumers; ++g) {
#pragma unroll
    for (int c = 0; c < Config::kKChunks; ++c)
      tmaLoad4d(smem.q(g) + u32(c * 64 * kSwizzleRowBytes), &pt.tma_q, smem.qFull(),
                c * kChunkElements, q0 + 64 * g, h, b);
#pragma unroll
    for (int c = 0; c < Config::kVChunks; ++c)
      tmaLoad4d(smem.dO(g) + u32(c * 64 * kSwizzleRowBytes), &pt.tma_do, smem.qFull(),
                c * kChunkElements, q0 + 64 * g, h, b);
  }
}

// The dQ kernel's producer warp: every live kv tile of `tiles` through the stages (the schedule
// slot, then K and V with TMA from lane 0), then a -1 slot.
template <class Config, class Tiles>
ATTNC_DEVICE void produceKvTiles(const BwdParamsTma& pt, const DqSmem<Config>& smem,
                                 Tiles& tiles, int hKv, int b, int groupThread) {
  constexpr int kStages = Config::kStages;
  constexpr int kBlockKV = Config::kBlockKV;
  const bool leader = groupThread == 0;
  const int lastTile = tiles.last();
  expr::Tri tileClass;
  int tile = tiles.nextLive(tiles.first(), lastTile, tileClass);
  for (int iteration = 0;; ++iteration) {
    const int stage = iteration % kStages;
    const bool live = tile <= lastTile;
    mbarrierWait(smem.empty(stage), (u32(iteration / kStages) & 1u) ^ 1u);
    if (leader) {
      smem.slots().publish(stage, live ? tile : -1, tileClass);
      if (live) {
        mbarrierArriveExpectTx(smem.full(stage), Config::kKBytes + Config::kVBytes);
#pragma unroll
        for (int c = 0; c < Config::kKChunks; ++c)
          tmaLoad4d(smem.k(stage) + u32(c * kBlockKV * kSwizzleRowBytes), &pt.tma_k,
                    smem.full(stage), c * kChunkElements, tile * kBlockKV, hKv, b);
#pragma unroll
        for (int c = 0; c < Config::kVChunks; ++c)
          tmaLoad4d(smem.v(stage) + u32(c * kBlockKV * kSwizzleRowBytes), &pt.tma_v,
                    smem.full(stage), c * kChunkElements, tile * kBlockKV, hKv, b);
      } else {
        mbarrierArrive(smem.full(stage));
      }
    }
    if (!live) return;
    tile = tiles.nextLive(tile + 1, lastTile, tileClass);
  }
}

}  // namespace sm90
}  // namespace attnc
