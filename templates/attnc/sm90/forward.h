// The sm_90a forward kernel: FlashAttention with Hopper's asynchronous units. One block computes
// BlockQ = 64 x Consumers query rows of one (batch, head) with 1 + Consumers warpgroups:
//
//  - the producer warpgroup gives its registers back (setmaxnreg); its first warp finds and
//    classifies the live kv tiles (all 32 lanes) and publishes each in a stage's schedule slot, and
//    its lane 0 streams Q once and then K and V of every live tile through a ring of Stages
//    shared-memory stages with TMA copies (fwd_producer.h);
//  - each consumer warpgroup owns 64 rows: S = Q K^T with wgmma from shared memory, the Variant's
//    score hook and mask on the accumulators (fwd_mask.h), the online softmax (exp2 with the scale
//    folded in), dropout, then O += P V with P straight from registers and V from shared memory,
//    the consumers taking turns at the tensor cores so that one's softmax runs while the other's
//    GEMMs do (fwd_mainloop.h); then it normalizes O and writes O and LSE (fwd_epilogue.h).
//
// The accumulators are, per warp, the m16n8 layout of the sm80 kernels (wgmma.h), so the epilogue
// (common/epilogue.h) and the online softmax (common/softmax.h) are shared with that path. Blocks
// classify kv tiles exactly as the sm80 kernel does (kv_tiles.h); each warpgroup refines a partial
// tile for its own 64 rows (fwd_mask.h).
//
// With three consumers, a warpgroup none of whose rows is in the sequence runs idleConsumer
// instead: it keeps the stages' and turns' protocol without computing; and under a mask of
// positions a warpgroup leaves the loop after its own last live tile and idles through the rest
// of the block's (fwd_idle.h).
//
// This header is the kernel: it places the block in the grid, sets up shared memory (fwd_smem.h)
// and gives each warpgroup its role.
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/copy.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"
#include "attnc/common/softmax.h"
#include "attnc/common/types.h"
#include "attnc/sm90/config.h"
#include "attnc/sm90/fwd_idle.h"
#include "attnc/sm90/fwd_mainloop.h"
#include "attnc/sm90/fwd_mask.h"
#include "attnc/sm90/fwd_producer.h"
#include "attnc/sm90/fwd_smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/warpgroup.h"

namespace attnc {
namespace sm90 {

template <class Config, class Variant>
ATTNC_DEVICE void forward(const FwdParamsTma& pt, unsigned char* smemRaw) {
  const FwdParams& p = pt.base;

  // The grid is orderedGrid(q tiles, heads_q x batch) for a masked spec (block_order.h), else
  // (q tiles, heads_q, batch); rank 0 starts first. Q tiles in reverse order: under a causal mask
  // the last ones have the most kv tiles, and starting them first leaves the short ones to fill
  // the end of the grid.
  constexpr bool kOrdered = VariantOrderedGrid<Variant>::value;
  const BlockCoord order = kOrdered ? orderedBlock(p.heads_q, p.batch) : plainBlock();
  if (!order.live) return;
  const int b = order.b, h = order.h;
  const int qTiles = kOrdered ? int(gridDim.y) : int(gridDim.x);
  // The launch's longest-first order of the q tiles where it made one (tile_classes.h).
  const int qTileIndex =
      kOrdered && VariantTileClasses<Variant>::value && p.q_tile_order != nullptr
          ? p.q_tile_order[tileClassHeadRow<Variant>(b, h, p.heads_q) * qTiles + order.rank]
          : qTiles - 1 - order.rank;
  // The tile's rows [q0, q0 + kBlockQ), of which [qFirst, qLast] are in the sequence.
  const int q0 = qTileStart<kOrdered>(qTileIndex, p.q_len, Config::kBlockQ);
  if (q0 >= p.q_len) return;
  const int qFirst = maxOf(q0, 0), qLast = minOf(q0 + Config::kBlockQ, p.q_len) - 1;
  const int hKv = h / (p.heads_q / p.heads_kv);
  const int warpGroup = threadIdx.x / 128;
  const int groupThread = threadIdx.x % 128;
  const ForwardSmem<Config> smem(smemRaw);

  KvTiles<Variant, Config::kBlockKV> tiles(p, b, h, qFirst, qLast);
  // The launch's precomputed tile classes (tile_classes.h), when it made them.
  tiles.useTileClasses(
      tileClassRowIndex<Variant>(b, h, p.heads_q, p.q_len, Config::kBlockQ, qTileIndex));
  // Under a mask the producer's first warp initializes the mbarriers and starts the copies of Q
  // and the first live tile before the block's barrier sync (produceStart), so that neither the
  // sync nor the tile search delays them. Without a mask there is no search to hide, and the early
  // start cost more in the consumers' schedule than it saved, so those specs keep the plain start
  // (docs/design/sm90-forward.md).
  constexpr bool kEarlyStart = Variant::kHasMask;
  static_assert(!ForwardMask<Config, Variant>::kMaskAhead || kEarlyStart,
                "a mask made ahead reads stage 0's slot before its wait");
  ProducerCursor cursor{};
  if constexpr (kEarlyStart) {
    if (threadIdx.x < 32) cursor = produceStart<Config, Variant>(pt, smem, tiles, q0, b, h, hKv);
  } else {
    if (threadIdx.x == 0) {
      timelineStart(p);
      initBarriers(smem);
    }
  }
  sm80::blockSync();
  // A consumer warpgroup with no rows in the sequence gives its registers back too (idleConsumer;
  // config.h idleWarpgroups).
  constexpr bool kIdleWarpgroups = idleWarpgroups(Config::kConsumers);
  // (!rowsInSequence spelled out: the negated call changed ptxas's schedule of the hd64 kernels)
  const int firstRow = q0 + 64 * (warpGroup - 1);
  const bool idle = kIdleWarpgroups && warpGroup > 0 &&
                    unsigned(firstRow + 63) >= unsigned(p.q_len + 63);
  if (warpGroup == 0 || idle) {
    setMaxRegistersDec<Config::kProducerRegisters>();
    if constexpr (kIdleWarpgroups) {  // (not compiled where no warpgroup can idle)
      if (idle) {
        idleConsumer<Config>(smem, warpGroup - 1);
        return;
      }
    }
    if (groupThread < 32) {
      if constexpr (kEarlyStart)
        produceStarted<Config, Variant>(pt, smem, tiles, cursor, b, hKv);
      else
        produce<Config, Variant>(pt, smem, tiles, q0, b, h, hKv);
    }
    return;
  }
  setMaxRegistersInc<Config::kConsumerRegisters>();

  // This warpgroup's rows, and this lane's first accumulator row (wgmma.h).
  const int group = warpGroup - 1;
  const int lane = groupThread & 31, warp = groupThread >> 5;
  const int groupRow = q0 + 64 * group;
  const int groupLast = minOf(groupRow + 63, p.q_len - 1);
  const bool groupHasRows = rowsInSequence(groupRow, p.q_len);
  const int qRow = groupRow + 16 * warp + (lane >> 2);
  const ConsumerRows rows{group, groupThread, lane, warp, groupRow, groupLast, groupHasRows, qRow};

  consume<Config, Variant>(p, smem, tiles, rows, b, h);
}

}  // namespace sm90
}  // namespace attnc
