// The sm_90a backward dK/dV kernel: the sm80 backwardKV (sm80/backward.h) with Hopper's
// asynchronous units. One block keeps BlockKV = 64 x Consumers keys of one (batch, kv head) and
// visits every live q tile of every query head of its GQA group, with 1 + Consumers warpgroups:
//
//  - the producer warpgroup gives its registers back; its first warp walks the (head, q tile)
//    pairs (sm80 QTileStream: all 32 lanes classify, or read the launch's precomputed classes for
//    masks that read declared inputs, tile_classes.h) and publishes each in a stage's schedule
//    slot, lane 0 copies K and V once and then Q and dO of each pair with TMA, and the 32 lanes
//    write the pair's LSE (log2 domain) and delta rows; all of it completes on the stage's "full"
//    mbarrier;
//  - each consumer warpgroup owns 64 kv rows, in the transposed frame of the sm80 kernel:
//      S^T  = K Q^T            wgmma, both from shared memory
//      dP^T = V dO^T           wgmma, both from shared memory
//      P^T, dS^T               recomputed on the accumulators (score hook, mask, dropout)
//      dV  += P^T dO           wgmma, P^T from registers, dO from shared memory (MN-major)
//      dK  += dS^T Q           wgmma, dS^T from registers, Q from shared memory (MN-major)
//      dQ  = dS K              wgmma, dS^T of both consumers staged in shared memory (two
//                              buffers) and read transposed, K MN-major; each consumer takes half
//                              the head dim, one q tile late (see the loop)
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
//
// Shared memory (bwd_config.h): [K][V][Q_0 dO_0][Q_1 dO_1]...[dS^T: 2 buffers x consumers]
// [dQ fp32 per consumer][stats per stage][mbarriers, slots].
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/bwd_steps.h"
#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm90/async.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/forward.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

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

// Writes a warpgroup accumulator (times `factor`) to global rows: this lane's rows `row` and
// `row + 8` below `rows`, its pairs of columns below `width`.
template <class Element, int Tiles>
ATTNC_DEVICE void storeAccumulatorRows(Element* gmem, i64 stride, const float (&acc)[1][Tiles][4],
                                       float factor, int row, int rows, int colInQuad, int width) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row + 8 * r >= rows) continue;
#pragma unroll
    for (int n = 0; n < Tiles; ++n)
      if (8 * n + colInQuad < width)
        *reinterpret_cast<u32*>(gmem + (row + 8 * r) * stride + 8 * n + colInQuad) =
            Convert<Element>::pack2(acc[0][n][2 * r] * factor, acc[0][n][2 * r + 1] * factor);
  }
}

// Writes a warpgroup accumulator (times `factor`) of 64 rows to global rows 0 .. rows - 1, columns
// below `width`, through shared memory at `stage`: each lane puts its pairs there (in the
// StagedRows layout, bwd_config.h), then the 128 threads copy whole 16-byte chunks, a warp two or
// more consecutive rows at a time (from the accumulator layout, storeAccumulatorRows, every store
// instruction writes 4 bytes to each of 8 rows). `groupThread`: the thread's index in the
// warpgroup; `barrier`: a named barrier of the warpgroup's 128 threads; the stage is free again on
// return.
template <class Element, int Tiles>
ATTNC_DEVICE void storeRowsStaged(Element* gmem, i64 stride, const float (&acc)[1][Tiles][4],
                                  float factor, int rows, int width, u32 stage, int groupThread,
                                  int barrier) {
  constexpr int kChunks = Tiles;  // an n8 tile is one 16-byte chunk of a row
  using Layout = StagedRows<kChunks>;
  const int lane = groupThread & 31;
  const int tileRow = 16 * (groupThread >> 5) + (lane >> 2);  // the lane's first accumulator row
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = tileRow + 8 * r;
#pragma unroll
    for (int n = 0; n < Tiles; ++n)
      sm80::storeShared32(stage + u32(Layout::offset(row, n) + 4 * (lane & 3)),
                          Convert<Element>::pack2(acc[0][n][2 * r] * factor,
                                                  acc[0][n][2 * r + 1] * factor));
  }
  namedBarrierSync(barrier, 128);
#pragma unroll
  for (int idx = groupThread; idx < 64 * kChunks; idx += 128) {
    const int row = idx / kChunks, c = idx % kChunks;
    if (row < rows && 8 * c < width)
      sm80::storeGlobal128(gmem + row * stride + 8 * c,
                           sm80::loadShared128(stage + u32(Layout::offset(row, c))));
  }
  namedBarrierSync(barrier, 128);
}

// The dropout decisions (philox.h) of a consumer lane's elements of one q tile: bit
// (ni * 2 + r) * 2 + j for key kvRow + 8 r and query q0 + 8 ni + colInQuad + j. The keys kvRow and
// kvRow ^ 1 (this lane and lane ^ 4) share every Philox group (with kvRow ^ 16, ^ 17, in the warp
// beside this one, which makes the same call), so each lane makes the call of j = kvRow & 1 for
// both and the two swap the other byte: one call per 8 elements.
template <int Rounds, int NTiles>
ATTNC_DEVICE u32 dropoutKeepBits(const BwdParams& p, u32 batchHead, u32 threshold, int q0,
                                 int kvRow, int colInQuad, int lane) {
  const int half = (lane >> 2) & 1;  // kvRow & 1: kvRow is 0..7 past a multiple of 16
  static_assert(NTiles <= 8, "32 keep bits");
  const DropoutKeepBitsLane bits = dropoutKeepBitsLane((u32(kvRow) >> 4) & 1u, u32(half));
  const DropoutKeptBytesConstants c = dropoutKeptBytesConstants(threshold);
  u32 mine = 0u, theirs = 0u;
#pragma unroll
  for (int m = 0; m < NTiles / 2; ++m)
    dropoutKeepBitsOfGroup(dropoutRandom<Rounds>(p.dropout_keys, p.dropout_offset, batchHead,
                                                 u32(q0 + 16 * m + colInQuad + half), u32(kvRow)),
                           m, bits, c, mine, theirs);
  return mine | __shfl_xor_sync(0xffffffffu, theirs, 4);
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

// Each consumer's turn at issuing its S^T and dP^T GEMMs (ping-pong, as the forward's): named
// barrier kTurnBarrier + consumer.
constexpr int kTurnBarrier = 3;
// Each consumer's barrier of its 128 threads around the staged dK and dV stores (storeRowsStaged):
// kStoreBarrier + consumer; with the head-dim split or a separate dQ, which stage them in the
// stages' Q tiles, kStoreBarrier holds the consumers until neither reads a stage, and each then
// uses kStoreBarrier + 1 + consumer.
constexpr int kStoreBarrier = 5;

// The producer warp: K and V once, then for every (query head, q tile) pair of the stream Q, dO
// (TMA, lane 0), and the LSE and delta rows (all lanes), through the stages. A slot holding head
// -1 (its barrier completed by plain arrivals) ends the stream. The block's (kv tile, kv head,
// batch) come from `coord` (fresh reads of the block index, kvBlockCoord) wherever they are
// needed, and the stream is made again in every iteration, so that none of them is kept in one of
// the warp's 24 registers through the loop (on the ordered grid they are computed, and kept ones
// spilled: document, prefix-LM, sliding window).
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

// dK, dV of one block's keys and, with WriteDQ, their share of dQ (unscaled, into dq_accum).
// Grid (ceil(kv_len / BlockKV), heads_kv, batch), block kThreads, dynamic smem kSmemBytes.
template <class Config, class Variant, bool WriteDQ>
ATTNC_DEVICE void backwardKV(const BwdParamsTma& pt, unsigned char* smemRaw) {
  static_assert(!(WriteDQ && Config::kSeparateDq), "a SeparateDq layout has no room for dQ");
  using Element = typename Config::Element;
  using Tri = expr::Tri;
  constexpr int kN = Config::kNTiles;
  constexpr int kBlockQ = Config::kBlockQ;
  constexpr int kStages = Config::kStages;
  // The q tile's columns of S^T and dP^T a consumer computes (n8 tiles): all, or with the
  // head-dim split its half (the consumers share the kv rows; bwd_config.h).
  constexpr int kSN = Config::kSplit ? kN / 2 : kN;
  constexpr int kDkN = 8 * Config::kDkTiles;  // wgmma N of this consumer's dK (and dV below)
  constexpr int kDvN = 8 * Config::kDvTiles;
  const BwdParams& p = pt.base;

  // The grid is orderedGrid(kv tiles, heads_kv x batch) for a masked spec
  // (Variant::kKvOrderedGrid, block_order.h): under a causal mask the first kv tiles meet the most
  // q tiles, and with the rank the slower index inside each group of (kv head, batch) pairs the
  // grid starts them first and ends each group on its shortest tiles, while the blocks running at
  // once share a few heads' Q, dO and dq_accum tiles in L2. Else (kv tiles, heads_kv, batch).
  constexpr bool kOrdered = VariantKvOrderedGrid<Variant>::value;
  // On the ordered grid (batch, kv head) are computed from the block index, and the compiler
  // spilled kept ones rather than compute them again (document): the consumers read the batch
  // from the slot of the stage they hold where they use it, and compute both again at the end;
  // the plain grid's are the block index itself.
  const BlockCoord at = kvBlockCoord<kOrdered, kOrdered>(p);
  if (!at.live) return;
  const int kv0 = at.rank * Config::kBlockKV;
  if (kv0 >= p.kv_len) return;
  const BackwardSmem<Config> smem(smemRaw);
  int stage = 0;  // the stage the consumers hold (the loop's)
  const auto batchNow = [&]() {
    return kOrdered ? smem.scheduledBatch(stage) : kvBlockCoord<false>(p).b;
  };
  const int warpGroup = threadIdx.x / 128;
  const int groupThread = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    timelineStart(p);
    mbarrierInit(smem.kvFull(), 2);  // the K and the V copy each announce their bytes
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
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

  // This warpgroup's 64 kv rows (with the head-dim split, the block's 64 that every consumer
  // shares), and this lane's first accumulator row (wgmma.h).
  const int group = warpGroup - 1;
  const int lane = groupThread & 31, warp = groupThread >> 5;
  const int rowGroup = Config::kSplit ? 0 : group;
  const int groupKv = kv0 + 64 * rowGroup;
  const bool groupHasRows = groupKv < p.kv_len;
  const int groupLast = minOf(groupKv + 63, p.kv_len - 1);
  const int kvRow = groupKv + 16 * warp + (lane >> 2);
  const int tileRow = 16 * warp + (lane >> 2);  // the same row inside the warpgroup's 64
  const int colInQuad = 2 * (lane & 3);
  // The first of this consumer's q columns of S^T (kSN).
  const int sCol0 = Config::kSplit ? 8 * kSN * group : 0;
  // (Shuffled from lane 0, which ptxas takes as warp-uniform: the descriptors built from them are
  // then made in uniform registers rather than moved there by R2UR at every wgmma step.)
  const u32 kTile = __shfl_sync(0xffffffffu, smem.k() + u32(64 * rowGroup * kSwizzleRowBytes), 0);
  const u32 vTile = __shfl_sync(0xffffffffu, smem.v() + u32(64 * rowGroup * kSwizzleRowBytes), 0);
  // The first of this consumer's dK and dV columns, and their offsets in the Q and dO tiles (whole
  // 64-column chunks: bwd_config.h splitColumns): 0 without the split.
  const int dkCol0 = Config::kSplit ? group * kDkN : 0;
  const int dvCol0 = Config::kSplit ? group * kDvN : 0;
  const u32 qColumns = u32((dkCol0 / kChunkElements) * kBlockQ * kSwizzleRowBytes);
  const u32 doColumns = u32((dvCol0 / kChunkElements) * kBlockQ * kSwizzleRowBytes);

  float dk[1][Config::kDkTiles][4];
  float dv[1][Config::kDvTiles][4];
  sm80::warp::zero(dk);
  sm80::warp::zero(dv);
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  static_assert(kN * 4 <= 32, "one word of dropout keep bits per q tile");

  // dQ = dS K for this consumer's kDqN head-dim columns over all the block's keys: A is dS^T of
  // both consumers (one buffer), read transposed, or with the split this consumer's own copy of
  // the block's dS^T; B the K tile's columns, MN-major.
  // With the split, the kDqN columns go in parts of 64 (one K chunk each), one after another:
  // hd256's 128 at once did not fit beside dK and dV (ptxas serialized every wgmma).
  static_assert(!(WriteDQ && Config::kSplit) || splitDqFits(Config::kHeadDim, Config::kConsumers),
                "the split's own dQ needs whole chunks of dQ columns a consumer");
  constexpr int kDqParts = Config::kSplit ? maxOf(1, Config::kDqN / kChunkElements) : 1;
  constexpr int kDqPartN = Config::kDqN / kDqParts;
  float dq[1][kDqPartN / 8][4];
  // With the split in two parts (hd160-256 with WriteDQ): the second part's accumulators, whose
  // GEMM is issued beside the first's, so that it runs while the first part's reductions do.
  constexpr bool kLateDq = WriteDQ && Config::kSplit && kDqParts == 2;
  float dqLate[1][kDqPartN / 8][4];
  const int dqCol0 = group * Config::kDqN;
  const u32 kColumns = __shfl_sync(
      0xffffffffu,
      smem.k() + u32((dqCol0 / kChunkElements) * Config::kBlockKV * kSwizzleRowBytes +
                     (dqCol0 % kChunkElements) * 2),
      0);
  // The ping-pong below (bwdPingPong, bwd_config.h): not with the head-dim split, dropout, masks
  // that read declared inputs or a score hook.
  constexpr bool kPingPong = bwdPingPong(Config::kSplit, Variant::kHasDropout,
                                         VariantTileClasses<Variant>::value, Variant::kHasScore);
  const auto issueDQ = [&](auto& acc, int buffer, int part) {
    // K's descriptors from a laundered base, made again at each call: hoisted out of the loop they
    // stayed live through it and spilled with the ping-pong's barriers.
    u32 kBase = kColumns;
    if constexpr (kPingPong) asm volatile("" : "+r"(kBase));
    wgmmaFence();
#pragma unroll
    for (int kk = 0; kk < Config::kDqSteps; ++kk)
      WgmmaSS<Element, kDqPartN>::template run<1, 1>(
          flat(acc), mnMajorDescriptor(smem.dsT(buffer, 0), 64, kk),
          mnMajorDescriptor(kBase + u32(part * Config::kBlockKV * kSwizzleRowBytes),
                            Config::kBlockKV, kk),
          kk > 0);
    wgmmaCommit();
  };
  // This consumer's dQ columns of one q tile into its shared tile (TiledDqLayout), then TMA bulk
  // reductions into dq_accum, one per warp over the warp's own 16 rows (a row's floats stay in the
  // row, so 16 rows are 16 x kDqN consecutive floats in the tile and in dq_accum): the warp's rows
  // are free again once its previous reduction has read them, which its lane 0 waits for, so the
  // warps never wait for each other.
  using DqLayout = TiledDqLayout<Config>;
  const auto reduceDQ = [&](int batch, int head, int tileQ0) {
    const u32 dqTile = smem.dq(group);
    const u32 warpRows = dqTile + u32(16 * warp * Config::kDqN * 4);
    if (lane == 0) bulkWaitRead<0>();
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int n = 0; n < Config::kDqTiles; ++n)
        storeSharedF32x2(dqTile + u32(4 * DqLayout::swizzled(tileRow + 8 * r, 8 * n + colInQuad)),
                         dq[0][n][2 * r], dq[0][n][2 * r + 1]);
    fenceProxyAsync();
    __syncwarp();
    const int rows = minOf(16, p.q_len - tileQ0 - 16 * warp);
    if (lane == 0 && rows > 0) {
      float* dst = p.dq_accum + DqLayout::tileOffset(p.q_len, p.heads_q, batch, head, tileQ0) +
                   group * 64 * Config::kDqN + 16 * warp * Config::kDqN;
      bulkReduceAddF32(dst, warpRows, u32(rows * Config::kDqN * 4));
      bulkCommit();
    }
  };
  // With the split: the same columns added to dq_accum straight from the registers, one vector
  // reduction of 4 floats per n8 tile, lane pairs swapping halves (bwd_config.h DqPairReduction).
  const auto reduceDQFromRegisters = [&](const auto& dq, int batch, int head, int tileQ0,
                                         int part) {
    using Pair = DqPairReduction;
    const bool odd = Pair::odd(lane);
    const int row = 16 * warp + Pair::row(lane);
    const bool inside = tileQ0 + row < p.q_len;  // every lane swaps; rows past q_len add nothing
    float* block = p.dq_accum + DqLayout::tileOffset(p.q_len, p.heads_q, batch, head, tileQ0) +
                   group * 64 * Config::kDqN;
#pragma unroll
    for (int n = 0; n < kDqPartN / 8; ++n) {
      // (the selects are of values: an index chosen at run time would put dq in local memory)
      const bool sendsLow = Pair::sent(lane) == 0;
      const float x = __shfl_xor_sync(0xffffffffu, sendsLow ? dq[0][n][0] : dq[0][n][2], 1);
      const float y = __shfl_xor_sync(0xffffffffu, sendsLow ? dq[0][n][1] : dq[0][n][3], 1);
      float* dst = block + DqLayout::swizzled(row, part * kDqPartN + Pair::column(lane, n));
      if (!inside) continue;
      if (odd)
        reduceAddGlobalF32x4(dst, x, y, dq[0][n][2], dq[0][n][3]);
      else
        reduceAddGlobalF32x4(dst, dq[0][n][0], dq[0][n][1], x, y);
    }
  };
  int previousHead = -1, previousQ0 = 0;  // the q tile whose dQ is still to be done
  // Ping-pong: the consumers take turns from the stage wait to the issue of S^T and dP^T, so that
  // one's elementwise steps run while the other's GEMMs occupy the tensor cores. Consumer g waits
  // on named barrier kTurnBarrier + g and passes the turn to the other; the second consumer starts
  // by passing the first turn, and the first takes the last one after the loop, so no barrier is
  // left half-arrived.
  const auto takeTurn = [&]() {
    if constexpr (kPingPong) namedBarrierSync(kTurnBarrier + group, 256);
  };
  const auto passTurn = [&]() {
    if constexpr (kPingPong) namedBarrierArrive(kTurnBarrier + (group ^ 1), 256);
  };
  if (group == 1) passTurn();

  // This consumer's timeline marks (timeline.h): each consumer's first thread.
  const bool marks = kTimeline && groupThread == 0;
  int iteration = 0;
  for (;; ++iteration) {
    stage = iteration % kStages;
    const u32 phase = u32(iteration / kStages) & 1u;
    takeTurn();
    mbarrierWait(smem.full(stage), phase);
    const int h = smem.scheduledHead(stage);
    if (h < 0) {
      passTurn();
      break;
    }
    if (iteration == 0) mbarrierWait(smem.kvFull(), 0);
    if (marks && group == 0 && iteration == 0) timelineMark(p, kBwdTimelineKv);
    const int q0 = smem.scheduledTile(stage) * kBlockQ;
    const Tri tileClass = smem.scheduledClass(stage);
    const u32 qTile = smem.q(stage), doTile = smem.dO(stage), stats = smem.stats(stage);
    const u32 batchHead = u32(batchNow() * p.heads_q + h);

    // S^T = K Q^T and dP^T = V dO^T, two groups: this consumer's rows of K (V) against the q
    // tile's rows of Q (dO), both K-major.
    // With the split, this consumer's half of the q tile's rows (sCol0, an atom boundary).
    float s[1][kSN][4], dp[1][kSN][4];
    const u32 sRows = u32(sCol0 * kSwizzleRowBytes);
    wgmmaFence();
    gemmKMajor<Element, 8 * kSN, Config::kQKSteps>(flat(s), kTile, Config::kBlockKV, qTile + sRows,
                                                   kBlockQ);
    gemmKMajor<Element, 8 * kSN, Config::kVSteps>(flat(dp), vTile, Config::kBlockKV,
                                                  doTile + sRows, kBlockQ);
    passTurn();
    // While they run: the dropout decisions of this lane's elements, bit (ni * 2 + r) * 2 + j.
    const u32 keepBits = Variant::kHasDropout
                             ? dropoutKeepBits<Variant::kDropoutRounds, kSN>(
                                   p, batchHead, dropThreshold, q0 + sCol0, kvRow, colInQuad, lane)
                             : 0u;

    // The warpgroup's part of the tile may be empty or full for its 64 rows alone.
    Tri groupClass = groupHasRows ? tileClass : Tri::False;
    if constexpr (Variant::kHasMask) {
      if (groupClass == Tri::Unknown) {
        const QTiles<Variant, kBlockQ, BwdParams> tiles(p, batchNow(), h, groupKv, groupLast);
        groupClass = tiles.classify(q0, minOf(q0 + kBlockQ, p.q_len) - 1, groupKv, groupLast);
      }
    }

    // P^T (dropped and rescaled: the A operand of dV += P^T dO); s keeps P * score'(s) for dS.
    // Branch-free per element: a dropped element's exponent becomes -inf (2^-inf = 0). Rows past
    // q_len need nothing (their LSE is +inf); keys past kv_len are masked per row. The mask hook
    // runs only on tiles it cuts (a warp-uniform choice between two copies of the loop).
    wgmmaWait<1>();
    fenceRegisters(flat(s));
    float pd[1][kSN][4];
    const bool rowKept[2] = {groupClass != Tri::False && kvRow < p.kv_len,
                             groupClass != Tri::False && kvRow + 8 < p.kv_len};
    const auto probabilities = [&](auto masked) {
      const int b = batchNow();
      // A split mask (sm80::forEachKeep): the key parts of this thread's two kv rows once, each
      // query's row part once for both.
      // (The outer `if constexpr` on the Variant alone discards the split's calls for a Variant
      // without one when the kernel is instantiated; one on `masked` would not.)
      using SplitOf = sm80::MaskSplitOf<Variant>;
      constexpr bool kHasSplit = SplitOf::value;
      constexpr bool kMasked = decltype(masked)::value;
      [[maybe_unused]] typename SplitOf::template Parts<kHasSplit>::Col maskCol[2];
      if constexpr (kHasSplit) {
        if constexpr (kMasked) {
#pragma unroll
          for (int r = 0; r < 2; ++r) maskCol[r] = Variant::mask_col(p, b, h, kvRow + 8 * r);
        }
      }
#pragma unroll
      for (int ni = 0; ni < kSN; ++ni)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int qLocal = sCol0 + 8 * ni + colInQuad + j;
          const int q = q0 + qLocal;
          const float lse2 = loadSharedF32(stats + u32(4 * qLocal));
          [[maybe_unused]] typename SplitOf::template Parts<kHasSplit>::Row maskRow;
          if constexpr (kHasSplit) {
            if constexpr (kMasked) maskRow = Variant::mask_row(p, b, h, q);
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int kv = kvRow + 8 * r;
            float& x = s[0][ni][2 * r + j];
            float grad;
            if constexpr (sm80::bwd::BackwardPositions<Variant>::value)
              grad = sm80::bwd::scoreWithGrad<Variant>(p, x, b, h,
                                                       expr::Pos{q0 + sCol0 + colInQuad, 8 * ni + j},
                                                       expr::Pos{kvRow, 8 * r});
            else
              grad = sm80::bwd::scoreWithGrad<Variant>(p, x, b, h, q, kv);
            bool keep = rowKept[r];
            if constexpr (kHasSplit) {
              if constexpr (kMasked) keep = keep & Variant::mask_join(p, b, h, q, kv, maskRow, maskCol[r]);
            } else if constexpr (kMasked) {
              keep = keep & bool(Variant::mask(p, b, h, q, kv));
            }
            const float prob = exp2Approx(keep ? x * log2Scale - lse2 : -kInfinity);
            float dropped = prob;
            if constexpr (Variant::kHasDropout) {
              const int e = (ni * 2 + r) * 2 + j;
              dropped = (keepBits >> e) & 1u ? prob * dropScale : 0.0f;
            }
            pd[0][ni][2 * r + j] = dropped;
            x = prob * grad;
          }
        }
    };
    if (Variant::kHasMask && groupClass == Tri::Unknown)
      probabilities(Flag<Variant::kHasMask>());
    else
      probabilities(Flag<false>());
    // dS^T = P score' (dP^T dropped and rescaled - delta), into dp: the A operand of dK += dS^T Q
    // (and, through shared memory, of dQ = dS K).
    // Where word i of this lane's packed A fragment (packP) of step kk goes in a shared 64 x 64
    // tile of this consumer's S^T columns, K-major in the 128-byte swizzle (16-byte chunk c of row
    // r at c ^ (r % 8)), from chunk sCol0 / 8: the word holds n8 tile 2 kk + i / 2, row half i % 2.
    const auto fragmentOffset = [&](int kk, int i) {
      const int row = tileRow + 8 * (i & 1), ni = sCol0 / 8 + 2 * kk + (i >> 1);
      return u32(row * kSwizzleRowBytes + ((ni ^ (row & 7)) * 16) + 4 * (lane & 3));
    };
    const auto dsFromDp = [&]() {
#pragma unroll
      for (int ni = 0; ni < kSN; ++ni)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int qLocal = sCol0 + 8 * ni + colInQuad + j;
          const float delta = loadSharedF32(stats + u32(4 * (kBlockQ + qLocal)));
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float d = dp[0][ni][2 * r + j];
            if constexpr (Variant::kHasDropout) {
              const int e = (ni * 2 + r) * 2 + j;
              d = (keepBits >> e) & 1u ? d * dropScale : 0.0f;
            }
            dp[0][ni][2 * r + j] = s[0][ni][2 * r + j] * (d - delta);
          }
        }
    };
    if constexpr (Config::kSplit) {
      // The head-dim split: each consumer has P^T and dS^T of its half of the q tile; both halves
      // go into the buffer's shared tiles (P^T in the second consumer's dS^T slot, unused with the
      // split), and dV and dK read them from there once the other consumer's half is in.
      wgmmaWait<0>();  // dP^T too
      fenceRegisters(flat(dp));
      u32 pA[1][kSN / 2][4];
      sm80::warp::packP<Element>(pA, pd);
      dsFromDp();
      u32 dsA[1][kSN / 2][4];
      sm80::warp::packP<Element>(dsA, dp);
      const int buffer = iteration & 1;
      mbarrierWait(smem.dsEmpty(buffer), (u32(iteration >> 1) & 1u) ^ 1u);
      const u32 dsTile = smem.dsT(buffer, 0), pTile = smem.dsT(buffer, 1);
#pragma unroll
      for (int kk = 0; kk < kSN / 2; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const u32 at = fragmentOffset(kk, i);
          sm80::storeShared32(pTile + at, pA[0][kk][i]);
          sm80::storeShared32(dsTile + at, dsA[0][kk][i]);
        }
      fenceProxyAsync();
      mbarrierArrive(smem.dsFull(buffer));
      mbarrierWait(smem.dsFull(buffer), u32(iteration >> 1) & 1u);
      // dV += P^T dO and dK += dS^T Q over the whole q tile: A K-major from the shared tiles, B
      // this consumer's columns, MN-major.
      wgmmaFence();
#pragma unroll
      for (int kk = 0; kk < Config::kPSteps; ++kk)
        WgmmaSS<Element, kDvN>::template run<0, 1>(
            flat(dv), kMajorDescriptor(pTile, 64, kk),
            mnMajorDescriptor(doTile + doColumns, kBlockQ, kk), 1);
#pragma unroll
      for (int kk = 0; kk < Config::kPSteps; ++kk)
        WgmmaSS<Element, kDkN>::template run<0, 1>(
            flat(dk), kMajorDescriptor(dsTile, 64, kk),
            mnMajorDescriptor(qTile + qColumns, kBlockQ, kk), 1);
      wgmmaCommit();
    } else {
      u32 pA[1][Config::kPSteps][4];
      sm80::warp::packP<Element>(pA, pd);
      wgmmaFence();
      gemmRegsMNMajor<Element, kDvN>(flat(dv), pA[0], doTile + doColumns, kBlockQ);

      wgmmaWait<1>();  // dP^T is done; dV's GEMM may still run
      fenceRegisters(flat(dp));
      dsFromDp();
      u32 dsA[1][kSN / 2][4];
      sm80::warp::packP<Element>(dsA, dp);
      if constexpr (WriteDQ) {
        // dS^T into this consumer's tile of buffer iteration % 2, once every consumer's dQ GEMM of
        // two tiles ago is done with it.
        const int buffer = iteration & 1;
        mbarrierWait(smem.dsEmpty(buffer), (u32(iteration >> 1) & 1u) ^ 1u);
        const u32 dsTile = smem.dsT(buffer, group);
#pragma unroll
        for (int kk = 0; kk < kSN / 2; ++kk)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            sm80::storeShared32(dsTile + fragmentOffset(kk, i), dsA[0][kk][i]);
        fenceProxyAsync();
        mbarrierArrive(smem.dsFull(buffer));
      }
      wgmmaFence();
      gemmRegsMNMajor<Element, kDkN>(flat(dk), dsA[0], qTile + qColumns, kBlockQ);
    }

    if constexpr (WriteDQ) {
      // dQ of the previous q tile (issued a tile late so that the consumers need not wait for each
      // other's dS^T: each runs up to a tile ahead of the other), while dK's GEMM runs. The first
      // iteration multiplies whatever buffer 1 holds and drops the result (no wgmma is issued
      // under a condition: ptxas would serialize them all).
      if (iteration > 0)
        mbarrierWait(smem.dsFull((iteration - 1) & 1), u32((iteration - 1) >> 1) & 1u);
      issueDQ(dq, (iteration - 1) & 1, 0);
      if constexpr (kLateDq) issueDQ(dqLate, (iteration - 1) & 1, 1);
    }
    if constexpr (kLateDq)
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
      fenceRegisters(flat(dq));
      if constexpr (kLateDq) {
        if (iteration > 0) reduceDQFromRegisters(dq, batch, previousHead, previousQ0, 0);
        wgmmaWait<0>();
        fenceRegisters(flat(dqLate));
        if (iteration > 0) {
          mbarrierArrive(smem.dsEmpty((iteration - 1) & 1));
          reduceDQFromRegisters(dqLate, batch, previousHead, previousQ0, 1);
        }
      } else if constexpr (Config::kSplit) {
        if (iteration > 0) reduceDQFromRegisters(dq, batch, previousHead, previousQ0, 0);
#pragma unroll
        for (int part = 1; part < kDqParts; ++part) {
          issueDQ(dq, (iteration - 1) & 1, part);
          wgmmaWait<0>();
          fenceRegisters(flat(dq));
          if (iteration > 0) reduceDQFromRegisters(dq, batch, previousHead, previousQ0, part);
        }
        if (iteration > 0) mbarrierArrive(smem.dsEmpty((iteration - 1) & 1));
      } else if (iteration > 0) {
        mbarrierArrive(smem.dsEmpty((iteration - 1) & 1));
        reduceDQ(batch, previousHead, previousQ0);
      }
      previousHead = h;
      previousQ0 = q0;
    }
  }
  if (group == 0) takeTurn();  // the turn the second consumer passed after its last GEMMs
  if (marks) {
    timelineMark(p, group == 0 ? kBwdTimelineLoopEnd : kBwdTimelineLoopEnd1);
    if (group == 0) timelineWrite(p, kBwdTimelineTiles, u32(iteration));
  }
  if constexpr (WriteDQ) {
    // The last q tile's dQ (none when the block had no q tile: then K was never loaded and the
    // product is dropped).
    const int last = iteration - 1;
    if (previousHead >= 0) mbarrierWait(smem.dsFull(last & 1), u32(last >> 1) & 1u);
#pragma unroll
    for (int part = 0; part < kDqParts; ++part) {
      issueDQ(dq, last & 1, part);
      wgmmaWait<0>();
      fenceRegisters(flat(dq));
      if (previousHead >= 0) {
        if constexpr (Config::kSplit)
          reduceDQFromRegisters(dq, batchNow(), previousHead, previousQ0, part);
        else
          reduceDQ(batchNow(), previousHead, previousQ0);
      }
    }
    // Every warp's reductions have read the shared dQ tile (with the split, there are none); their
    // writes to dq_accum complete on their own before the grid does.
    if (lane == 0) bulkWaitRead<0>();
  }
  if (marks && group == 0) timelineMark(p, kBwdTimelineDq);

  // dK (times the softmax scale) and dV: this consumer's columns of them.
  if (!groupHasRows) return;
  const BlockCoord end = kvBlockCoord<kOrdered, kOrdered>(p);
  const int b = end.b, hKv = end.h;
  Element* dkRows = static_cast<Element*>(p.dk) + b * p.dk_stride_b + hKv * p.dk_stride_h + dkCol0;
  Element* dvRows = static_cast<Element*>(p.dv) + b * p.dv_stride_b + hKv * p.dv_stride_h + dvCol0;
  if constexpr (StagedRowsFit<Config>::value || QStagedRowsFit<Config>::value) {
    // Through shared memory, so that the global stores are whole rows: the consumer's dQ tile, free
    // once every warp's dQ reductions have read it; with the split or a separate dQ (no dQ tile),
    // the Q tile of the stage with the consumer's index, once neither consumer reads any stage
    // (the split's share the 64 kv rows, so both are here; without the split the second consumer
    // has returned above if none of its rows is in the sequence: its GEMMs' results are dropped,
    // so the first one need not wait for them).
    constexpr bool kThroughQ = QStagedRowsFit<Config>::value;
    const int storers = Config::kSplit || kv0 + 64 < p.kv_len ? 128 * Config::kConsumers : 128;
    const u32 staging = [&] {
      if constexpr (kThroughQ)
        return smem.q(group);
      else
        return smem.dq(group);
    }();
    const int barrier = kThroughQ ? kStoreBarrier + 1 + group : kStoreBarrier + group;
    if constexpr (kThroughQ)
      namedBarrierSync(kStoreBarrier, storers);
    else
      namedBarrierSync(barrier, 128);
    storeRowsStaged(dkRows + i64(groupKv) * p.dk_stride_s, p.dk_stride_s, dk, p.scale,
                    p.kv_len - groupKv, Config::kHeadDim - dkCol0, staging, groupThread, barrier);
    storeRowsStaged(dvRows + i64(groupKv) * p.dv_stride_s, p.dv_stride_s, dv, 1.0f,
                    p.kv_len - groupKv, Config::kHeadDimV - dvCol0, staging, groupThread, barrier);
  } else {
    storeAccumulatorRows(dkRows, p.dk_stride_s, dk, p.scale, kvRow, p.kv_len, colInQuad,
                         Config::kHeadDim - dkCol0);
    storeAccumulatorRows(dvRows, p.dv_stride_s, dv, 1.0f, kvRow, p.kv_len, colInQuad,
                         Config::kHeadDimV - dvCol0);
  }
  if (marks) timelineMark(p, group == 0 ? kBwdTimelineEnd : kBwdTimelineEnd1);
}

}  // namespace sm90
}  // namespace attnc
