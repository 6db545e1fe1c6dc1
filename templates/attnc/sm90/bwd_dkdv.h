// The sm_90a backward dK/dV kernel: the sm80 backwardKV (sm80/backward.h) with Hopper's
// asynchronous units. One block keeps BlockKV = 64 x Consumers keys of one (batch, kv head) and
// visits every live q tile of every query head of its GQA group, with 1 + Consumers warpgroups:
//
//  - the producer warpgroup gives its registers back; its first warp walks the (head, q tile)
//    pairs (sm80 QTileStream: all 32 lanes classify, or read the launch's precomputed classes for
//    masks that read declared inputs, tile_classes.h) and publishes each in a stage's schedule
//    slot, lane 0 copies K and V once and then Q and dO of each pair with TMA, and the 32 lanes
//    write the pair's LSE (log2 domain) and delta rows; all of it completes on the stage's "full"
//    mbarrier (bwd_producer.h);
//  - each consumer warpgroup owns 64 kv rows, in the transposed frame of the sm80 kernel
//    (bwd_dkdv_steps.h):
//      S^T  = K Q^T            wgmma, both from shared memory
//      dP^T = V dO^T           wgmma, both from shared memory
//      P^T, dS^T               recomputed on the accumulators (score hook, mask, dropout)
//      dV  += P^T dO           wgmma, P^T from registers, dO from shared memory (MN-major)
//      dK  += dS^T Q           wgmma, dS^T from registers, Q from shared memory (MN-major)
//      dQ  = dS K              wgmma, dS^T of both consumers staged in shared memory (two
//                              buffers) and read transposed, K MN-major; each consumer takes half
//                              the head dim, one q tile late (bwd_dkdv_dq.h)
//    each consumer writes its dQ columns into its own shared fp32 tile, which TMA bulk
//    reductions, one per warp and q tile, add to dq_accum (TiledDqLayout; no per-element
//    atomics).
//
// With the head-dim split (Config::kSplit, bwd_config.h: hd256, whose dK and dV do not fit a
// consumer whole) both consumers keep the same 64 kv rows and each its share of dK's and dV's
// columns; each computes S^T, dP^T and dS^T for half of the q tile (wgmma N = 32), both halves of
// P^T and dS^T meet in shared memory, from where the dV and dK GEMMs read their A operand (and dQ
// its dS), and each adds its dQ columns to dq_accum with vector reductions from registers, in
// parts of 64 columns.
//
// The probabilities are recomputed exactly as in sm80/backward.h. Rows past q_len read Q = dO = 0
// (TMA zero fill) and LSE = +inf, so their P is 0; rows past kv_len are masked and never stored.
// Shared memory: bwd_smem.h BackwardSmem.
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/copy.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/bwd_dkdv_dq.h"
#include "attnc/sm90/bwd_dkdv_steps.h"
#include "attnc/sm90/bwd_epilogue.h"
#include "attnc/sm90/bwd_producer.h"
#include "attnc/sm90/bwd_smem.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// A consumer warpgroup of the dK/dV kernel (warpGroup 1 or 2 of the block whose first key is
// kv0): every (head, q tile) pair the producer publishes, then its dK and dV.
template <class Config, class Variant, bool WriteDQ>
ATTNC_DEVICE void consumeKV(const BwdParams& p, const BackwardSmem<Config>& smem, int kv0,
                            int warpGroup, int groupThread) {
  using C = KvConsumer<Config, Variant, WriteDQ>;
  using Tri = expr::Tri;
  constexpr int kStages = Config::kStages;
  const C c(p, smem, kv0, warpGroup, groupThread);
  const int group = c.group;

  float dk[1][Config::kDkTiles][4];
  float dv[1][Config::kDvTiles][4];
  sm80::warp::zero(dk);
  sm80::warp::zero(dv);
  // (The scales are made here, after the accumulators are zeroed, not in KvConsumer: the machine
  // code depends on it.)
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  static_assert(C::kN * 4 <= 32, "one word of dropout keep bits per q tile");
  static_assert(!(WriteDQ && Config::kSplit) || splitDqFits(Config::kHeadDim, Config::kConsumers),
                "the split's own dQ needs whole chunks of dQ columns a consumer");
  float dq[1][C::kDqPartN / 8][4];
  float dqLate[1][C::kDqPartN / 8][4];  // the second part's (C::kLateDq)
  const u32 kColumns = c.dqKColumns();
  int previousHead = -1, previousQ0 = 0;  // the q tile whose dQ is still to be done
  // Ping-pong: the consumers take turns from the stage wait to the issue of S^T and dP^T, so that
  // one's elementwise steps run while the other's GEMMs occupy the tensor cores. The second
  // consumer starts by passing the first turn, and the first takes the last one after the loop,
  // so no barrier is left half-arrived.
  const KvTurns<C::kPingPong> turns{group};
  if (group == 1) turns.pass();

  // This consumer's timeline marks (timeline.h): each consumer's first thread.
  const bool marks = kTimeline && groupThread == 0;
  int stage = 0;  // the stage the consumer holds
  // The block's batch where the steps need it: on the ordered grid (KvConsumer::kOrdered) from
  // the slot of the stage the consumer holds (computed from the block index, kept copies
  // spilled), else the block index. (A lambda over `stage`, as the steps take it: passing them the
  // stage's value instead changed the machine code.)
  const auto batchNow = [&]() {
    return C::kOrdered ? smem.scheduledBatch(stage) : kvBlockCoord<false>(p).b;
  };
  int iteration = 0;
  for (;; ++iteration) {
    stage = iteration % kStages;
    const u32 phase = u32(iteration / kStages) & 1u;
    turns.take();
    mbarrierWait(smem.full(stage), phase);
    const int h = smem.scheduledHead(stage);
    if (h < 0) {
      turns.pass();
      break;
    }
    if (iteration == 0) mbarrierWait(smem.kvFull(), 0);
    if (marks && group == 0 && iteration == 0) timelineMark(p, kBwdTimelineKv);
    const int q0 = smem.scheduledTile(stage) * Config::kBlockQ;
    const Tri tileClass = smem.scheduledClass(stage);
    const u32 qTile = smem.q(stage), doTile = smem.dO(stage), stats = smem.stats(stage);
    const u32 batchHead = u32(batchNow() * p.heads_q + h);

    // (The tile's register arrays live in the loop's scope, not in the steps': the machine code
    // then stays that of the kernel written as one function.)
    float s[1][C::kSN][4], dp[1][C::kSN][4];
    issueScoreGemms(c, s, dp, qTile, doTile);
    turns.pass();
    // While they run: the dropout decisions of this lane's elements, bit (ni * 2 + r) * 2 + j.
    const u32 keepBits = Variant::kHasDropout
                             ? dropoutKeepBits<Variant::kDropoutRounds, C::kSN>(
                                   p, batchHead, dropThreshold, q0 + c.sCol0, c.kvRow,
                                   c.colInQuad, c.lane)
                             : 0u;
    const Tri groupClass = groupClassOf(c, batchNow, tileClass, h, q0);

    wgmmaWait<1>();
    fenceRegisters(flat(s));
    float pd[1][C::kSN][4];
    const bool rowKept[2] = {groupClass != Tri::False && c.kvRow < p.kv_len,
                             groupClass != Tri::False && c.kvRow + 8 < p.kv_len};
    if (Variant::kHasMask && groupClass == Tri::Unknown)
      recomputeProbabilities<Variant::kHasMask>(c, batchNow, h, q0, stats, log2Scale, dropScale,
                                                rowKept, keepBits, s, pd);
    else
      recomputeProbabilities<false>(c, batchNow, h, q0, stats, log2Scale, dropScale, rowKept,
                                    keepBits, s, pd);
    u32 pA[1][C::kSN / 2][4], dsA[1][C::kSN / 2][4];  // P^T and dS^T, packed as A fragments
    if constexpr (Config::kSplit)
      splitDvDkGemms(c, iteration, qTile, doTile, stats, keepBits, dropScale, s, dp, pd, pA, dsA,
                     dk, dv);
    else
      dvDkGemms(c, iteration, qTile, doTile, stats, keepBits, dropScale, s, dp, pd, pA, dsA, dk,
                     dv);
    if constexpr (WriteDQ) issuePreviousDq(c, smem, kColumns, iteration, dq, dqLate);
    if constexpr (C::kLateDq)
      wgmmaWait<1>();  // dV, dK and dQ's first part (the second may still run)
    else
      wgmmaWait<0>();
    fenceRegisters(flat(dk));
    fenceRegisters(flat(dv));
    // (the deterministic kernel's split: the buffer's tiles are read; with WriteDQ its dQ GEMM
    // releases it, a tile later)
    if constexpr (Config::kSplit && !WriteDQ) mbarrierArrive(smem.dsEmpty(iteration & 1));
    if (marks && group == 0 && iteration == 0) timelineMark(p, kBwdTimelineFirstTile);
    const int batch = batchNow();  // read while the stage's slot is still held
    mbarrierArrive(smem.empty(stage));  // Q, dO and the stats of this stage are read
    if constexpr (WriteDQ) {
      reducePreviousDq(c, smem, kColumns, iteration, batch, previousHead, previousQ0, dq, dqLate);
      previousHead = h;
      previousQ0 = q0;
    }
  }
  if (group == 0) turns.take();  // the turn the second consumer passed after its last GEMMs
  if (marks) {
    timelineMark(p, group == 0 ? kBwdTimelineLoopEnd : kBwdTimelineLoopEnd1);
    if (group == 0) timelineWrite(p, kBwdTimelineTiles, u32(iteration));
  }
  if constexpr (WriteDQ)
    lastTileDq(c, batchNow, kColumns, iteration, previousHead, previousQ0, dq);
  if (marks && group == 0) timelineMark(p, kBwdTimelineDq);

  if (!c.groupHasRows) return;
  storeDkDv(c, kv0, groupThread, dk, dv);
  if (marks) timelineMark(p, group == 0 ? kBwdTimelineEnd : kBwdTimelineEnd1);
}

// dK, dV of one block's keys and, with WriteDQ, their share of dQ (unscaled, into dq_accum).
// Grid (ceil(kv_len / BlockKV), heads_kv, batch), block kThreads, dynamic smem kSmemBytes.
template <class Config, class Variant, bool WriteDQ>
ATTNC_DEVICE void backwardKV(const BwdParamsTma& pt, unsigned char* smemRaw) {
  static_assert(!(WriteDQ && Config::kSeparateDq), "a SeparateDq layout has no room for dQ");
  const BwdParams& p = pt.base;
  // On the ordered grid (KvConsumer::kOrdered) (batch, kv head) are computed from the block index,
  // and the compiler spilled kept ones rather than compute them again (document): the consumers
  // read the batch from the slot of the stage they hold where they use it, and compute both again
  // at the end; the plain grid's are the block index itself.
  constexpr bool kOrdered = VariantKvOrderedGrid<Variant>::value;
  const BlockCoord at = kvBlockCoord<kOrdered, kOrdered>(p);
  if (!at.live) return;
  const int kv0 = at.rank * Config::kBlockKV;
  if (kv0 >= p.kv_len) return;
  const BackwardSmem<Config> smem(smemRaw);
  const int warpGroup = threadIdx.x / 128;
  const int groupThread = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    timelineStart(p);
    initBarriers(smem);
  }
  if constexpr (Config::kKChunks > Config::kKLoadChunks ||
                Config::kVChunks > Config::kVLoadChunks) {
    // The head-dim split's padding chunk (bwd_config.h splitChunks) of K, V and every stage's Q
    // and dO, which TMA never writes: zeros, so the last consumer's GEMMs over it add nothing.
    zeroPaddingChunks(smem);
    fenceProxyAsync();  // the wgmma (async proxy) read them
  }
  sm80::blockSync();

  if (warpGroup == 0) {
    setMaxRegistersDec<Config::kProducerRegisters>();
    if (groupThread < 32)
      produceBackward<Config, Variant>(pt, smem,
                                       [&]() { return kvBlockCoord<kOrdered, true>(p); });
    return;
  }
  setMaxRegistersInc<Config::kConsumerRegisters>();
  consumeKV<Config, Variant, WriteDQ>(p, smem, kv0, warpGroup, groupThread);
}

}  // namespace sm90
}  // namespace attnc
