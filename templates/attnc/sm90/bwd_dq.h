// The sm_90a dQ kernel: dQ of one block of 128 query rows (one (batch, head)) without atomics, the
// kv tiles streamed as in the forward (forward.h), with 1 + 2 warpgroups:
//
//  - the producer warpgroup gives its registers back; its first thread copies the block's Q and
//    dO (two 64-row boxes each) before the block's barrier sync, then its first warp walks the
//    live kv tiles (KvTiles, as the sm80 backwardQ; under a mask that reads declared inputs the
//    launch's precomputed classes of them) and publishes each in a stage's schedule slot,
//    and lane 0 copies the tile's K and V into the stage with TMA (bwd_producer.h);
//  - each consumer warpgroup owns 64 query rows and, per kv tile j:
//      S  = Q K^T          wgmma, both from shared memory
//      dP = dO V^T         wgmma, both from shared memory
//      P, dS               recomputed on the accumulators exactly as the sm80 backwardQ does
//                          (score hook and its derivative, mask, dropout on dP)
//      dQ += dS K          wgmma, dS from registers, K MN-major from shared memory
//    dQ_j is issued together with S_{j+1} and dP_{j+1}, the probabilities of tile j + 1 are
//    computed while its dP GEMM still runs, and the two consumers take turns issuing (warpgroup.h
//    Turns), so that one's elementwise step runs under the other's GEMMs.
//
// With the dK/dV kernel's `_kv_nodq` entry (bwd_dkdv.h with WriteDQ false) this makes the
// backward without dq_accum: chosen where the dK/dV kernel's own dQ (fp32 reductions into
// dq_accum, then a conversion) is what limits it, the head-dim split (bwd_config.h
// separateDqKernel), and always for the deterministic backward, whose dQ is the same in every run.
//
// Shared memory: bwd_smem.h DqSmem.
#pragma once

#include "attnc/common/bwd_steps.h"
#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/bwd_epilogue.h"
#include "attnc/sm90/bwd_producer.h"
#include "attnc/sm90/bwd_smem.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// A consumer warpgroup of the dQ kernel: its shape, its 64 query rows of the block's (batch b,
// head h), this lane's two accumulator rows with their LSE and delta, and its Q and dO tiles.
template <class Config_, class Variant_>
struct QConsumer {
  using Config = Config_;
  using Variant = Variant_;
  using Element = typename Config::Element;
  static constexpr int kN = Config::kNTiles;
  static constexpr int kBlockKV = Config::kBlockKV;
  static constexpr int kBitWords = ceilDiv(kN * 4, 32);  // words of dropout keep bits a kv tile

  const BwdParams& p;
  DqSmem<Config> smem;
  int b, h;
  int group, lane, warp;
  int groupRow;  // the first of the warpgroup's rows
  bool groupHasRows;
  int groupLast;
  int qRow;  // this lane's first accumulator row (wgmma.h)
  int colInQuad;
  float log2Scale;
  u32 batchHead;
  u32 dropThreshold;
  float dropScale;

  // (Built by make(), in the order the kernel computes them.)
  static ATTNC_DEVICE QConsumer make(const BwdParams& p, const DqSmem<Config>& smem, int b, int h,
                                     int q0, int warpGroup, int groupThread, float (&lse2)[2],
                                     float (&delta)[2]) {
    const int group = warpGroup - 1;
    const int lane = groupThread & 31, warp = groupThread >> 5;
    const int groupRow = q0 + 64 * group;
    const bool groupHasRows = groupRow < p.q_len;
    const int groupLast = minOf(groupRow + 63, p.q_len - 1);
    const int qRow = groupRow + 16 * warp + (lane >> 2);
    const int colInQuad = 2 * (lane & 3);
    const i64 rowBase = (i64(b) * p.heads_q + h) * p.q_len;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = qRow + 8 * r;
      lse2[r] = q < p.q_len ? sm80::bwd::lseLog2(p.lse[rowBase + q]) : kInfinity;
      delta[r] = q < p.q_len ? p.delta[rowBase + q] : 0.0f;
    }
    const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
    const u32 batchHead = u32(b * p.heads_q + h);
    const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
    const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
    return {p, smem, b, h, group, lane, warp, groupRow, groupHasRows, groupLast, qRow, colInQuad,
            log2Scale, batchHead, dropThreshold,
            dropScale};
  }
};

// S = Q K^T and dP = dO V^T of the kv tile in stage `stage`: two commit groups.
template <class C>
ATTNC_DEVICE void issueSdP(const C& c, float (&s)[1][C::kN][4], float (&dp)[1][C::kN][4],
                           u32 qTile, u32 doTile, int stage) {
  using Config = typename C::Config;
  gemmKMajor<typename C::Element, C::kBlockKV, Config::kQKSteps>(flat(s), qTile, 64,
                                                                 c.smem.k(stage), C::kBlockKV);
  gemmKMajor<typename C::Element, C::kBlockKV, Config::kVSteps>(flat(dp), doTile, 64,
                                                                c.smem.v(stage), C::kBlockKV);
}

// dQ += dS K of the kv tile in stage `stage`, dS from registers (dsA).
template <class C>
ATTNC_DEVICE void issueDq(const C& c, float (&dq)[1][C::Config::kDqTiles][4],
                          const u32 (&dsA)[1][C::Config::kDsSteps][4], int stage) {
  gemmRegsMNMajor<typename C::Element, C::Config::kHeadDim>(flat(dq), dsA[0], c.smem.k(stage),
                                                           C::kBlockKV);
}

// S and dP are two commit groups (issueSdP): the probabilities are computed while dP's GEMM still
// runs, its wait held below them (wgmmaWaitAfter; ptxas would hoist a plain one). This beat
// waiting for both first, and the same without the consumers' turns (docs/design/sm90-backward.md).
template <class C>
ATTNC_DEVICE void waitForS(float (&s)[1][C::kN][4]) {
  wgmmaWait<1>();
  fenceRegisters(flat(s));
}
template <class C>
ATTNC_DEVICE void waitForDp(const C& c, const float (&s)[1][C::kN][4], float (&dp)[1][C::kN][4],
                            u32 qTile) {
  wgmmaWaitAfter<0>(s[0][C::kN - 1][1], s[0][C::kN - 1][3], qTile, c.p.batch < 0);
  fenceRegisters(flat(dp));
}

// P and dS of kv tile `tile` (stage `stage`) on the accumulators, exactly as sm80 backwardQ: dS
// packed into dsA.
template <class C, class Tiles>
ATTNC_DEVICE void dsOfTile(const C& c, const Tiles& tiles, int tile, int stage,
                           const float (&lse2)[2], const float (&delta)[2], u32 qTile,
                           float (&s)[1][C::kN][4], float (&dp)[1][C::kN][4],
                           u32 (&dsA)[1][C::Config::kDsSteps][4]) {
  using Variant = typename C::Variant;
  using Tri = expr::Tri;
  constexpr int kN = C::kN;
  const BwdParams& p = c.p;
  const int kv0 = tile * C::kBlockKV;
  const int kCol = kv0 + c.colInQuad;
  Tri groupClass = c.smem.slots().scheduledClass(stage);
  if constexpr (Variant::kHasMask) {
    if (groupClass == Tri::Unknown && c.groupHasRows)
      groupClass = tiles.classify(c.groupRow, c.groupLast, kv0, tiles.tileEnd(tile));
  }
  const bool none = !c.groupHasRows || groupClass == Tri::False;
  const bool checkBounds = tiles.isTail(tile) || c.groupRow + 64 > p.q_len;
  u32 keepBits[C::kBitWords];
#pragma unroll
  for (int i = 0; i < C::kBitWords; ++i) keepBits[i] = 0u;
  if constexpr (Variant::kHasDropout)
    sm80::forEachDropoutDecision<Variant::kDropoutRounds, 1, kN>(
        p, c.batchHead, c.dropThreshold, c.qRow, kCol, [&](int, int ni, int col, bool kept) {
          const int e = ((col / 2) * kN + ni) * 2 + col % 2;
          keepBits[e / 32] |= u32(kept) << (e % 32);
        });
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int ni = 0; ni < kN; ++ni) {
      const int q = c.qRow + 8 * r;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float& x = s[0][ni][2 * r + j];
        const int k = kCol + 8 * ni + j;
        const float grad = sm80::bwd::scoreWithGrad<Variant>(p, x, c.b, c.h, q, k);
        bool keep = !none;
        if (checkBounds) keep = keep && q < p.q_len && k < p.kv_len;
        if constexpr (Variant::kHasMask) {
          if (groupClass == Tri::Unknown && keep) keep = Variant::mask(p, c.b, c.h, q, k);
        }
        x = keep ? exp2Approx(x * c.log2Scale - lse2[r]) * grad : 0.0f;
      }
    }
  waitForDp(c, s, dp, qTile);
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int ni = 0; ni < kN; ++ni)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float d = dp[0][ni][2 * r + j];
        if constexpr (Variant::kHasDropout) {
          const int e = (r * kN + ni) * 2 + j;
          d = (keepBits[e / 32] >> (e % 32)) & 1u ? d * c.dropScale : 0.0f;
        }
        dp[0][ni][2 * r + j] = s[0][ni][2 * r + j] * (d - delta[r]);
      }
  sm80::warp::packP<typename C::Element>(dsA, dp);
}

// A consumer warpgroup of the dQ kernel (warpGroup 1 or 2): dQ of its rows over every kv tile the
// producer publishes, then its store.
template <class Config, class Variant, class Tiles>
ATTNC_DEVICE void consumeQ(const BwdParams& p, const DqSmem<Config>& smem, const Tiles& tiles,
                           int b, int h, int q0, int warpGroup, int groupThread) {
  using C = QConsumer<Config, Variant>;
  using Element = typename Config::Element;
  constexpr int kStages = Config::kStages;
  // Per-row LSE (log2 domain) and delta of this lane's two rows; rows past q_len get P = 0.
  float lse2[2], delta[2];
  const C c = C::make(p, smem, b, h, q0, warpGroup, groupThread, lse2, delta);
  const int group = c.group;

  float dq[1][Config::kDqTiles][4];
  sm80::warp::zero(dq);
  float s[1][C::kN][4], dp[1][C::kN][4];
  u32 dsA[1][Config::kDsSteps][4];  // dS of the tile, the A operand of its dQ GEMM
  const u32 qTile = __shfl_sync(0xffffffffu, smem.q(group), 0);  // (warp-uniform to ptxas)
  const u32 doTile = __shfl_sync(0xffffffffu, smem.dO(group), 0);
  const Turns<Config> turns{group};

  int stage = 0;
  mbarrierWait(smem.full(0), 0);
  int tile = smem.slots().scheduledTile(0);
  mbarrierWait(smem.qFull(), 0);  // (also when no tile is live: the copy lands before the exit)
  if (tile >= 0) {
    // The last consumer passes the first turn to warpgroup 0; each tile takes one turn a consumer
    // (its S and dP with the previous tile's dQ), and one more ends the stream. A stage is released
    // once its tile's dQ GEMM is done (with the next tile's S).
    if (group == Config::kConsumers - 1) turns.pass();
    turns.take();
    wgmmaFence();
    issueSdP(c, s, dp, qTile, doTile, 0);
    turns.pass();
    waitForS<C>(s);
    dsOfTile(c, tiles, tile, 0, lse2, delta, qTile, s, dp, dsA);
    for (int iteration = 1;; ++iteration) {
      const int nextStage = iteration % kStages;
      mbarrierWait(smem.full(nextStage), u32(iteration / kStages) & 1u);
      const int next = smem.slots().scheduledTile(nextStage);
      if (next < 0) break;
      turns.take();
      wgmmaFence();
      issueDq(c, dq, dsA, stage);
      issueSdP(c, s, dp, qTile, doTile, nextStage);
      turns.pass();
      waitForS<C>(s);
      fenceRegisters(flat(dq));
      mbarrierArrive(smem.empty(stage));
      stage = nextStage;
      tile = next;
      dsOfTile(c, tiles, tile, stage, lse2, delta, qTile, s, dp, dsA);
    }
    turns.take();
    wgmmaFence();
    issueDq(c, dq, dsA, stage);
    turns.pass();
    if (group == 0) turns.take();
    wgmmaWait<0>();
    fenceRegisters(flat(dq));
    mbarrierArrive(smem.empty(stage));
  }

  if (!c.groupHasRows) return;
  Element* dqG = static_cast<Element*>(p.dq) + b * p.dq_stride_b + h * p.dq_stride_h;
  storeAccumulatorRows(dqG, p.dq_stride_s, dq, p.scale, c.qRow, p.q_len, c.colInQuad,
                       Config::kHeadDim);
}

// dQ of 128 query rows. Grid (ceil(q_len / 128), heads_q, batch), the q tiles in reverse order
// (under a causal mask the last ones have the most kv tiles: they start first); block kThreads;
// dynamic shared memory kSmemBytes.
template <class Config, class Variant>
ATTNC_DEVICE void backwardQ(const BwdParamsTma& pt, unsigned char* smemRaw) {
  const BwdParams& p = pt.base;
  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * Config::kBlockQ;
  if (q0 >= p.q_len) return;
  const int qLast = minOf(q0 + Config::kBlockQ, p.q_len) - 1;
  const int hKv = h / (p.heads_q / p.heads_kv);
  const int warpGroup = threadIdx.x / 128;
  const int groupThread = threadIdx.x % 128;
  const DqSmem<Config> smem(smemRaw);
  // Under a mask that reads declared inputs the walk reads the launch's classes of this kernel's
  // tiles (BwdParams::kv_tile_*, `<name>_bwd_q_tile_classes`) rather than the inputs' summaries.
  KvTiles<Variant, Config::kBlockKV, BwdParams> tiles(p, b, h, q0, qLast);
  tiles.useTileClasses(tileClassRowIndex<Variant>(b, h, p.heads_q, p.q_len, Config::kBlockQ,
                                                 q0 / Config::kBlockQ));

  if (threadIdx.x == 0) startDqBlock(pt, smem, q0, h, b);
  sm80::blockSync();

  if (warpGroup == 0) {
    setMaxRegistersDec<Config::kProducerRegisters>();
    if (groupThread >= 32) return;
    produceKvTiles(pt, smem, tiles, hKv, b, groupThread);
    return;
  }
  setMaxRegistersInc<Config::kConsumerRegisters>();
  consumeQ<Config, Variant>(p, smem, tiles, b, h, q0, warpGroup, groupThread);
}

}  // namespace sm90
}  // namespace attnc
