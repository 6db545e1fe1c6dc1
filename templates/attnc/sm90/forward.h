// The sm_90a forward kernel: FlashAttention with Hopper's asynchronous units. One block computes
// BlockQ = 64 x Consumers query rows of one (batch, head) with 1 + Consumers warpgroups:
//
//  - the producer warpgroup gives its registers back (setmaxnreg); its first warp finds and
//    classifies the live kv tiles (all 32 lanes) and publishes each in a stage's schedule slot, and
//    its lane 0 streams Q once and then K and V of every live tile through a ring of Stages
//    shared-memory stages with TMA copies, each completing on its stage's "full" mbarrier; before
//    reusing a stage it waits on the stage's "empty" mbarriers (under a mask its first steps run
//    before the block's first barrier sync: produceStart);
//  - each consumer warpgroup owns 64 rows: S = Q K^T with wgmma from shared memory, the Variant's
//    score hook and mask on the accumulators, the online softmax (exp2 with the scale folded in),
//    dropout, then O += P V with P straight from registers and V from shared memory, the
//    consumers taking turns at the tensor cores so that one's softmax runs while the other's GEMMs
//    do (see the loop); it arrives on a stage's empty barriers as soon as it is done with its K and
//    with its V.
//
// The accumulators are, per warp, the m16n8 layout of the sm80 kernels (wgmma.h), so the epilogue
// (sm80/epilogue.h) and the online softmax (sm80/softmax.h) are shared with that path. Blocks
// classify kv tiles exactly as the sm80 kernel does (kv_tiles.h); each warpgroup refines a partial
// tile for its own 64 rows (a tile empty for them is multiplied and masked, not skipped: see the
// loop).
//
// With three consumers, a warpgroup none of whose rows is in the sequence runs idleConsumer
// instead: it keeps the stages' and turns' protocol without computing; and under a mask of
// positions a warpgroup leaves the loop after its own last live tile and idles through the rest
// of the block's (kGroupTail).
//
// Shared memory (config.h): [Q: Consumers x 64 rows][K_0 V_0][K_1 V_1]...[mbarriers, slots].
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/copy.h"
#include "attnc/common/epilogue.h"
#include "attnc/common/expr.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/softmax.h"
#include "attnc/common/types.h"
#include "attnc/sm90/async.h"
#include "attnc/sm90/config.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// The first 1024-byte aligned address of the dynamic shared memory: 128-byte-swizzled TMA boxes
// and wgmma operands start on swizzle atoms (wgmma.h).
ATTNC_DEVICE u32 swizzleAlignedBase(unsigned char* raw) {
  return (sm80::smemAddress(raw) + u32(kSwizzleAtomBytes - 1)) & ~u32(kSwizzleAtomBytes - 1);
}

// A ring of schedule slots, one a stage from `base`: the kv tile the stage holds (-1: the stream
// has ended) and its class. The forward's and the dQ kernel's producers publish, their consumers
// read while they hold the stage.
struct KvTileSlots {
  u32 base;
  ATTNC_DEVICE u32 slot(int stage) const { return base + u32(8 * stage); }
  ATTNC_DEVICE void publish(int stage, int tile, expr::Tri cls) const {
    sm80::storeShared32(slot(stage), u32(tile));
    sm80::storeShared32(slot(stage) + 4, u32(cls));
  }
  ATTNC_DEVICE int scheduledTile(int stage) const { return int(loadShared32(slot(stage))); }
  ATTNC_DEVICE expr::Tri scheduledClass(int stage) const {
    return expr::Tri(loadShared32(slot(stage) + 4));
  }
};

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
                                                    Config::kKBytes, tile * Config::kBlockKV, hKv, b);
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

// The consumers' ping-pong turns (forward()'s loop): warpgroup g waits on named barrier 1 + g
// for its turn and then passes it on to the next one (barriers hold 2 warpgroups).
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

// A consumer warpgroup that computes nothing more keeps the block's protocol from stream position
// `iteration` on, whose K it has waited for (`tile`, -1 at the end of the stream): for each tile
// it takes and passes the turn the tile's GEMMs would take and releases the stage's K and V (V
// once its copy has landed, so that the release counts for this tile's phase).
template <class Config>
ATTNC_DEVICE void idleThrough(const ForwardSmem<Config>& smem, Turns<Config> turns, int iteration,
                              int tile) {
  constexpr int kStages = Config::kStages;
  while (tile >= 0) {
    const int stage = iteration % kStages;
    turns.take();
    turns.pass();
    mbarrierArrive(smem.kEmpty(stage));
    mbarrierWait(smem.vFull(stage), u32(iteration / kStages) & 1u);
    mbarrierArrive(smem.vEmpty(stage));
    ++iteration;
    mbarrierWait(smem.kFull(iteration % kStages), u32(iteration / kStages) & 1u);
    tile = smem.scheduledTile(iteration % kStages);
  }
}

// A consumer warpgroup none of whose 64 rows is in the sequence (in the last q tile of a
// sequence that does not fill it, or an end-aligned first tile: block_order.h) computes nothing,
// but keeps the block's protocol as forward()'s loop does (idleThrough), so the other
// warpgroups' GEMMs run without its share of the tensor cores (at hd64, N = 4096 the last of 22
// tiles of 192 rows has 64 rows in the sequence).
template <class Config>
ATTNC_DEVICE void idleConsumer(const ForwardSmem<Config>& smem, int group) {
  const Turns<Config> turns{group};
  mbarrierWait(smem.kFull(0), 0);
  mbarrierWait(smem.qFull(), 0);  // Q's copy lands before the block can exit
  const int tile = smem.scheduledTile(0);
  if (tile < 0) return;
  if (group == Config::kConsumers - 1) turns.pass();
  idleThrough<Config>(smem, turns, 0, tile);
  turns.take();  // the turn of the last tile's P V
  turns.pass();
  if (group == 0) turns.take();
}

// Whether any of the 64 rows from firstRow is in the sequence: -64 < firstRow < q_len (rows below
// 0 are padding of an end-aligned first tile, block_order.h).
ATTNC_DEVICE bool rowsInSequence(int firstRow, int qLen) {
  return unsigned(firstRow + 63) < unsigned(qLen + 63);
}

template <int A, int B, int C>
ATTNC_DEVICE float (&flat(float (&x)[A][B][C]))[A * B * C] {
  return reinterpret_cast<float(&)[A * B * C]>(x);
}

template <class Config, class Variant>
ATTNC_DEVICE void forward(const FwdParamsTma& pt, unsigned char* smemRaw) {
  using Element = typename Config::Element;
  using Tri = expr::Tri;
  constexpr int kN = Config::kNTiles;
  constexpr int kNv = Config::kNvTiles;
  constexpr int kStages = Config::kStages;
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
  // sync nor the tile search delays them: measured on the H200 (bench/ab_mix.py, 2026-12-02,
  // docs/perf/H200.md) window +2%, document +3.5%, GQA +1%. Without a mask there is no search to
  // hide, and the same start ran hd64 full 2% slower (ptxas scheduled its consumers differently),
  // so those specs keep the plain start.
  constexpr bool kEarlyStart = Variant::kHasMask;
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

  float o[1][kNv][4];
  sm80::warp::zero(o);
  sm80::OnlineSoftmax<1> softmax;
  // Without a score hook the scale folds into the base-2 exponent: one FFMA per probability.
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 batchHead = u32(b * p.heads_q + h);
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const u32 qTile = __shfl_sync(0xffffffffu, smem.q(group), 0);  // (warp-uniform to ptxas)

  // The loop is software-pipelined as FlashAttention-3's intra-warpgroup overlap: iteration j
  // issues S_j = Q K_j^T and then O += P_{j-1} V_{j-1}, waits for S_j only, runs the score hook,
  // the mask and the softmax of tile j, and waits for P_{j-1} V_{j-1} before rescaling O. K_j's
  // stage is released as soon as S_j is done, V_{j-1}'s when P_{j-1} V_{j-1} is. A plain second
  // wait would be moved up to the first by ptxas, so it is held below the softmax
  // (wgmmaWaitAfter), except with dropout (config.h softmaxOverlapsPV has the measurements).
  // No wgmma is issued under a condition: ptxas then serializes every one of them. A warpgroup
  // whose rows a tile masks entirely (or that has no rows) still multiplies and masks every element
  // of it instead of skipping it.
  u32 pA[1][Config::kPVSteps][4];  // P of the previous tile, the A operand of its P V
  float s[1][kN][4];
  // Dropout's keep tests: where B_c is not a multiple of 32 keys (a Philox call's bytes split
  // between two pairs of n8 tiles at a position known only at run time) they are made with the
  // tile's softmax as whole words and applied to P once packed (sm80::dropoutKeptWords /
  // applyDropoutKept), else on the floats, where ptxas interleaves the hashes with the
  // exponentials (the packed form ran hd128 3% slower, hd256 19% faster: docs/perf/H200.md).
  constexpr bool kDropoutPacked = Variant::kHasDropout && dropoutGroupTiles(kN) == 2;
  u32 dropKept[1][sm80::dropoutGroups<kDropoutPacked ? kN : 4>()][4];
  int stage = 0;
  u32 phase = 0;
  // Ping-pong (FlashAttention-3): the consumer warpgroups take turns issuing their GEMMs (Turns),
  // so that one's softmax runs while the other's GEMMs occupy the tensor cores; the last one
  // starts by passing the first turn to warpgroup 0.
  const Turns<Config> turns{group};
  const auto takeTurn = [&]() { turns.take(); };
  const auto passTurn = [&]() { turns.pass(); };
  // Q's A fragments in registers (config.h qInRegisters): S = Q K^T then reads only K from shared
  // memory.
  constexpr bool kQInRegisters = qInRegisters(Config::kConsumers, Config::kHeadDim,
                                              Config::kHeadDimV, Config::kBlockKV);
  u32 qA[kQInRegisters ? Config::kQKSteps : 1][4];
  const auto issueQK = [&]() {
    wgmmaFence();
    if constexpr (kQInRegisters)
      gemmRegsKMajor<Element, Config::kBlockKV, Config::kQKSteps>(flat(s), qA, smem.k(stage),
                                                                   Config::kBlockKV);
    else
      gemmKMajor<Element, Config::kBlockKV, Config::kQKSteps>(flat(s), qTile, 64, smem.k(stage),
                                                               Config::kBlockKV);
  };
  const auto issuePV = [&](int vStage) {
    gemmRegsMNMajor<Element, Config::kHeadDimV>(flat(o), pA[0], smem.v(vStage), Config::kBlockKV);
  };
  // Which elements of tile `tile` this warpgroup's rows keep. For a mask that reads declared
  // inputs (kMaskAhead: a document mask reads an id per key) the decisions are made as bits before
  // the tile's GEMMs are issued (the first tile's before its K has landed), since they do not
  // depend on the scores, so that the loads' round trips run during the waits for the stage, the
  // turn and S, off the path from S to the softmax; other masks are a few integer operations per
  // element, made on the scores after the wait (as bits ahead, causal_hd64 spilled).
  constexpr bool kMaskAhead = VariantTileClasses<Variant>::value;
  static_assert(!kMaskAhead || kEarlyStart, "a mask made ahead reads stage 0's slot before its wait");
  struct TileMask {
    bool masked;      // false: the tile keeps every element of this warpgroup's rows
    bool perElement;  // the mask decides per element (else only the kv_len tail is masked)
    sm80::KeepBits<1, kN> keep;  // kMaskAhead: the decisions
  };
  // What a tile of this warpgroup's class needs masked (the decisions themselves come after).
  const auto maskOfClass = [&](int tile, Tri groupClass) {
    TileMask mask{};
    mask.perElement = groupClass != Tri::True;
    mask.masked = mask.perElement || tiles.isTail(tile);
    return mask;
  };
  const auto tileMask = [&](int tile, Tri tileClass) {
    // A partial tile can still be empty or full for this warpgroup's rows alone.
    Tri groupClass = tileClass;
    if constexpr (Variant::kHasMask) {
      // From groupRow even when it is negative: a class over more rows holds for the group's own.
      if (tileClass == Tri::Unknown && groupHasRows)
        groupClass = tiles.groupClass(tile, group, groupRow, groupLast);
    }
    TileMask mask = maskOfClass(tile, groupClass);
    if constexpr (kMaskAhead) {
      if (mask.masked)
        mask.keep = sm80::maskKeepBitsWarp<Variant, 1, kN>(p, b, h, qRow, tile * Config::kBlockKV,
                                                            lane, mask.perElement);
    }
    return mask;
  };
  // A tile's mask in two steps where the mask is split (kReadsAhead): maskReads reads the tile's
  // class and, for a partial tile, issues together the loads of this warpgroup's class word and of
  // the mask's key parts (for a document mask, the ids of the tile's keys); maskFromReads decodes
  // and joins them. Made in one step (maskAhead), a partial tile waited for two round trips in a
  // row, the class word's and then the ids'.
  constexpr bool kReadsAhead = kMaskAhead && sm80::MaskSplitOf<Variant>::value;
  struct MaskReads {
    Tri tileClass;
    u32 groupWord;
    sm80::MaskPartReads<Variant, 1, kN> parts;
  };
  const auto maskReads = [&](int tile, int tileStage) {
    MaskReads reads{};
    if constexpr (kReadsAhead) {
      reads.tileClass = smem.scheduledClass(tileStage);
      if (reads.tileClass == Tri::Unknown) {
        if (groupHasRows) reads.groupWord = tiles.groupClassWord(tile);
        reads.parts = sm80::readMaskParts<Variant, 1, kN>(p, b, h, qRow, tile * Config::kBlockKV, lane);
      }
    }
    return reads;
  };
  const auto maskFromReads = [&](int tile, const MaskReads& reads) {
    TileMask mask{};
    if constexpr (kReadsAhead) {
      // A partial tile can still be empty or full for this warpgroup's rows alone (tileMask).
      Tri groupClass = reads.tileClass;
      if (reads.tileClass == Tri::Unknown && groupHasRows)
        groupClass = tiles.groupClassOf(reads.groupWord, tile, group);
      mask = maskOfClass(tile, groupClass);
      if (mask.perElement)
        mask.keep = sm80::keepBitsFromParts<Variant, 1, kN>(p, b, h, qRow, tile * Config::kBlockKV,
                                                            lane, reads.parts);
      else if (mask.masked)
        mask.keep = sm80::maskKeepBits<Variant, 1, kN>(
            p, b, h, qRow, tile * Config::kBlockKV + 2 * (lane & 3), /*perElement=*/false);
    }
    return mask;
  };
  // From head_dim_v 128 the row maxima are lazy (OnlineSoftmax::advanceLazy, config.h
  // lazyRowMaxima): after the first tiles O is mostly not rescaled.
  constexpr bool kLazyRescale = Config::kLazyRowMaxima;
  // The epilogue and softmax of S (tile `tile`), once S is in registers; returns whether O must be
  // rescaled.
  const auto softmaxStep = [&](int tile, const TileMask& mask, float (&factors)[1][2]) {
    fenceRegisters(flat(s));
    mbarrierArrive(smem.kEmpty(stage));
    const int kCol = tile * Config::kBlockKV + 2 * (lane & 3);
    if constexpr (Variant::kHasScore)
      sm80::applyScore<Variant, /*Positions=*/true>(s, p, b, h, qRow, kCol);
    if (mask.masked) {
      if constexpr (kMaskAhead)
        sm80::applyKeepBits(s, mask.keep);
      else
        sm80::applyMask<Variant, /*BranchFree=*/true>(s, p, b, h, qRow, kCol, mask.perElement);
    }
    bool rescales = true;
    if constexpr (kLazyRescale)
      rescales = softmax.advanceLazy(s, log2Scale, factors);
    else
      softmax.advance(s, log2Scale, factors);
    // (The packed form's keep tests made here, after the exponentials, ran hd256 5% faster than
    // made before the score hook: docs/perf/H200.md.)
    if constexpr (kDropoutPacked)
      sm80::dropoutKeptWords<Variant::kDropoutRounds, 1, kN>(dropKept, p, batchHead, dropThreshold,
                                                             qRow, kCol);
    else if constexpr (Variant::kHasDropout)
      sm80::applyDropout<Variant::kDropoutRounds>(s, p, batchHead, dropThreshold, qRow, kCol);
    return rescales;
  };

  // P of tile `tile` packed as its P V's A operand, then dropout's keep tests made with the
  // tile's softmax (softmaxStep) applied to the packed pairs (sm80::applyDropoutKept).
  const auto packAndDrop = [&](int tile) {
    sm80::warp::packP<Element>(pA, s);
    if constexpr (kDropoutPacked)
      sm80::applyDropoutKept(pA, dropKept, tile * Config::kBlockKV + 2 * (lane & 3));
  };

  // Waits for S = Q K^T (with pvPending, P V of the previous tile may still run) and returns the
  // tile's mask: for kMaskAhead the one made before the tile's S = Q K^T was waited for (`ahead`),
  // so that its reads of the mask's inputs run during the waits for the stage, the turn and S, else
  // made after the wait. (A position mask's first tile made ahead, as bits while K and Q are in
  // flight, ran window and prefix-LM 1% slower: docs/perf/H200.md, 2026-12-04.)
  const auto waitForS = [&](int tile, auto pvPending, const TileMask& ahead) {
    TileMask mask;
    if constexpr (kMaskAhead) mask = ahead;
    wgmmaWait<decltype(pvPending)::value ? 1 : 0>();
    if constexpr (!kMaskAhead) mask = tileMask(tile, smem.scheduledClass(stage));
    return mask;
  };
  const auto maskAhead = [&](int tile, int tileStage) {
    TileMask mask{};
    if constexpr (kMaskAhead) mask = tileMask(tile, smem.scheduledClass(tileStage));
    return mask;
  };

  // With three consumers and a mask of positions (config.h warpgroupLastTile), the kv tiles past
  // this warpgroup's own last live one (under a causal mask, the block's last tiles for its first
  // rows) are not computed: the warpgroup leaves the loop there and idles through the rest of the
  // stream.
  constexpr bool kGroupTail = warpgroupLastTile(
      Config::kConsumers, Variant::kHasMask && !VariantTileClasses<Variant>::value);
  int groupLastTile = 1 << 30;
  if constexpr (kGroupTail) {
    const KvTiles<Variant, Config::kBlockKV> own(p, b, h, maxOf(groupRow, 0), groupLast);
    groupLastTile = own.last();
  }
  int iteration = 0;
  // With the early start stage 0's slot was published before the block's barrier sync
  // (produceStart), so for kMaskAhead the first tile's mask is made while its K and Q are still in
  // flight. (Other specs wait first, as the loop does.)
  if constexpr (!kMaskAhead) mbarrierWait(smem.kFull(stage), phase);
  int tile = smem.scheduledTile(stage);
  // This consumer's timeline marks (timeline.h): the first two consumers' first threads.
  const bool marks = kTimeline && groupThread == 0 && group < 2;
  if (tile >= 0) {
    // The first tile's mask: where it is split, its loads are issued now, while K and Q are in
    // flight, and joined once S = Q K^T is issued, so that neither the loads nor the join delay
    // the block's first GEMM (they held it up to about 1 us: docs/perf/H200.md, 2026-12-04).
    const MaskReads firstReads = maskReads(tile, stage);
    TileMask firstMask{};
    if constexpr (!kReadsAhead) firstMask = maskAhead(tile, stage);
    if constexpr (kMaskAhead) mbarrierWait(smem.kFull(stage), phase);
    if (marks) timelineMark(p, group == 0 ? kTimelineFirstK : kTimelineFirstK1);
    if (group == Config::kConsumers - 1) passTurn();
    mbarrierWait(smem.qFull(), 0);
    if (marks && group == 0) timelineMark(p, kTimelineQ);
    if constexpr (kQInRegisters) loadKMajorFragments(qA, qTile, 64, warp, lane);
    takeTurn();
    issueQK();
    passTurn();
    if constexpr (kReadsAhead) firstMask = maskFromReads(tile, firstReads);
    float factors[1][2];
    // The timeline's count of the tiles masked per element (compiled only with ATTNC_TIMELINE).
    u32 partials = 0;
    // O is still zero: nothing to rescale.
    {
      const TileMask mask = waitForS(tile, /*pvPending=*/Flag<false>(), firstMask);
      if constexpr (kTimeline) partials = mask.perElement ? 1u << 16 : 0u;
      softmaxStep(tile, mask, factors);
    }
    if (marks) timelineMark(p, group == 0 ? kTimelineFirstTile : kTimelineFirstTile1);
    packAndDrop(tile);
    for (iteration = 1;; ++iteration) {
      const int prevStage = stage;
      const u32 prevPhase = phase;
      const int nextStage = iteration % kStages;
      const u32 nextPhase = u32(iteration / kStages) & 1u;
      mbarrierWait(smem.kFull(nextStage), nextPhase);
      tile = smem.scheduledTile(nextStage);
      if (tile < 0 || (kGroupTail && tile > groupLastTile)) break;
      stage = nextStage;
      phase = nextPhase;
      // The mask's reads and decisions before the turn (joined after the GEMMs instead, as the
      // first tile's are above, the values the loads bring stayed live across the GEMMs and the
      // kernel spilled).
      const TileMask mask = kReadsAhead ? maskFromReads(tile, maskReads(tile, stage))
                                        : maskAhead(tile, stage);
      mbarrierWait(smem.vFull(prevStage), prevPhase);
      takeTurn();
      issueQK();
      issuePV(prevStage);
      passTurn();
      // S_j is done; P_{j-1} V_{j-1} may still run
      const TileMask held = waitForS(tile, /*pvPending=*/Flag<true>(), mask);
      if constexpr (kTimeline) partials += held.perElement ? 1u : 0u;
      const bool rescales = softmaxStep(tile, held, factors);
      // P_{j-1} V_{j-1} is done; the softmax above ran while it did (config.h softmaxOverlapsPV)
      if constexpr (softmaxOverlapsPV(Variant::kHasDropout))
        wgmmaWaitAfter<0>(softmax.rowSum[0][0], softmax.rowSum[0][1], qTile, p.batch < 0);
      else
        wgmmaWait<0>();
      fenceRegisters(flat(o));
      mbarrierArrive(smem.vEmpty(prevStage));
      if (rescales) sm80::OnlineSoftmax<1>::rescale(o, factors);
      packAndDrop(tile);
    }
    // The last tile's O += P V. Warpgroup 0 then takes the turn the last one passed it at the end,
    // so no named barrier is left half-arrived.
    mbarrierWait(smem.vFull(stage), phase);
    takeTurn();
    wgmmaFence();
    issuePV(stage);
    passTurn();
    if (!kGroupTail && group == 0) takeTurn();
    wgmmaWait<0>();
    fenceRegisters(flat(o));
    if (marks) {
      timelineMark(p, group == 0 ? kTimelineLoopEnd : kTimelineLoopEnd1);
      if (group == 0) {
        timelineWrite(p, kTimelineTiles, u32(iteration));
        timelineWrite(p, kTimelinePartials, partials);
      }
    }
    mbarrierArrive(smem.vEmpty(stage));
    if constexpr (kGroupTail) {
      // The rest of the stream: tile is the one the loop stopped at, at position `iteration`.
      idleThrough<Config>(smem, turns, iteration, tile);
      if (group == 0) takeTurn();
    }
  } else {
    mbarrierWait(smem.qFull(), 0);  // no live tile: Q's copy (produce) must still land first
  }

  // Normalize O, write LSE and O.
  float lse[1][2];
  const float outScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  softmax.finish(o, log2Scale, outScale, lse);
  if (!groupHasRows) return;
  // (b, h) again, not kept live through the loop
  const BlockCoord at = kOrdered ? orderedBlockAgain(p.heads_q, p.batch) : plainBlock();
  if (!kTimeline && p.lse != nullptr && (lane & 3) == 0) {  // (the timeline's record holds the LSE)
    float* lseRow = p.lse + (i64(at.b) * p.heads_q + at.h) * p.q_len;
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (unsigned(qRow + 8 * r) < unsigned(p.q_len)) lseRow[qRow + 8 * r] = lse[0][r];
  }
  Element* oG = static_cast<Element*>(p.o) + at.b * p.o_stride_b + at.h * p.o_stride_h;
  if constexpr (Config::kOutputThroughSmem) {
    // O goes through this warpgroup's Q tile (its GEMMs are done), rows of head_dim_v elements
    // whose 16-byte chunks are XOR-swizzled within groups of 8 so that neither the 4-byte writes
    // of a quad's rows nor the 16-byte reads conflict on banks; then whole 16-byte global stores.
    constexpr int kChunks = Config::kHeadDimV / 8;
    // With the ordered grid, Q's tile address again from a fresh read of the thread index, so
    // that it is not kept in a register through the loop (it spilled in causal_hd64).
    unsigned tid = threadIdx.x;
    if constexpr (kOrdered) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
    const u32 outTile = kOrdered ? smem.q(int(tid / 128) - 1) : qTile;
    const auto chunkAt = [&](int row, int chunk) {
      const int swizzled = chunk < kChunks / 8 * 8 ? (chunk ^ (row & 7)) : chunk;
      return outTile + u32(row * Config::kHeadDimV * 2 + swizzled * 16);
    };
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * warp + (lane >> 2) + 8 * r;
#pragma unroll
      for (int nv = 0; nv < kNv; ++nv)
        sm80::storeShared32(chunkAt(row, nv) + 4 * (lane & 3),
                            Convert<Element>::pack2(o[0][nv][2 * r], o[0][nv][2 * r + 1]));
    }
    namedBarrierSync(Config::kOutputBarrier + group, 128);
#pragma unroll
    for (int i = 0; i < ceilDiv(64 * kChunks, 128); ++i) {
      const int idx = groupThread + 128 * i;
      if ((64 * kChunks) % 128 != 0 && idx >= 64 * kChunks) break;
      const int row = idx / kChunks, chunk = idx % kChunks;
      const int q = groupRow + row;
      if (unsigned(q) < unsigned(p.q_len))  // 0 <= q < q_len
        sm80::storeGlobal128(oG + q * p.o_stride_s + chunk * 8, sm80::loadShared128(chunkAt(row, chunk)));
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = qRow + 8 * r;
      if (unsigned(q) >= unsigned(p.q_len)) continue;  // q < 0 or q >= q_len
      u32* row = reinterpret_cast<u32*>(oG + q * p.o_stride_s + 2 * (lane & 3));
#pragma unroll
      for (int nv = 0; nv < kNv; ++nv)
        row[4 * nv] = Convert<Element>::pack2(o[0][nv][2 * r], o[0][nv][2 * r + 1]);
    }
  }
  if (kTimeline && groupThread == 0 && warpGroup <= 2)
    timelineMark(p, warpGroup == 1 ? kTimelineEnd : kTimelineEnd1);
}

}  // namespace sm90
}  // namespace attnc
