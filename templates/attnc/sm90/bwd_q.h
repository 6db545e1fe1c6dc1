// The sm_90a dQ kernel: dQ of one block of 128 query rows (one (batch, head)) without atomics, the
// kv tiles streamed as in the forward (forward.h), with 1 + 2 warpgroups:
//
//  - the producer warpgroup gives its registers back; its first thread copies the block's Q and
//    dO (two 64-row boxes each) before the block's barrier sync, then its first warp walks the
//    live kv tiles (KvTiles, as the sm80 backwardQ; under a mask that reads declared inputs the
//    launch's precomputed classes of them) and publishes each in a stage's schedule slot,
//    and lane 0 copies the tile's K and V into the stage with TMA;
//  - each consumer warpgroup owns 64 query rows and, per kv tile j:
//      S  = Q K^T          wgmma, both from shared memory
//      dP = dO V^T         wgmma, both from shared memory
//      P, dS               recomputed on the accumulators exactly as the sm80 backwardQ does
//                          (score hook and its derivative, mask, dropout on dP)
//      dQ += dS K          wgmma, dS from registers, K MN-major from shared memory
//    dQ_j is issued together with S_{j+1} and dP_{j+1}, the probabilities of tile j + 1 are
//    computed while its dP GEMM still runs, and the two consumers take turns issuing (forward.h
//    Turns), so that one's elementwise step runs under the other's GEMMs.
//
// With the dK/dV kernel's `_kv_nodq` entry (backward.h with WriteDQ false) this makes the
// backward without dq_accum: chosen where the dK/dV kernel's own dQ (fp32 reductions into
// dq_accum, then a conversion) is what limits it, the head-dim split (bwd_config.h
// separateDqKernel), and always for the deterministic backward, whose dQ is the same in every run.
//
// Shared memory (dqKernelSmemBytes): [Q: 2 x 64 rows][dO: 2 x 64 rows][K_0 V_0][K_1 V_1]...
// [mbarriers, slots].
#pragma once

#include "attnc/sm90/backward.h"

namespace attnc {
namespace sm90 {

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
  // Each stage's schedule slot (forward.h KvTileSlots).
  ATTNC_DEVICE KvTileSlots slots() const { return {barrier(1 + 2 * Config::kStages)}; }
};

// dQ of 128 query rows. Grid (ceil(q_len / 128), heads_q, batch), the q tiles in reverse order
// (under a causal mask the last ones have the most kv tiles: they start first); block kThreads;
// dynamic shared memory kSmemBytes.
template <class Config, class Variant>
ATTNC_DEVICE void backwardQ(const BwdParamsTma& pt, unsigned char* smemRaw) {
  using Element = typename Config::Element;
  using Tri = expr::Tri;
  constexpr int kN = Config::kNTiles;
  constexpr int kStages = Config::kStages;
  constexpr int kBlockKV = Config::kBlockKV;
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
  KvTiles<Variant, kBlockKV, BwdParams> tiles(p, b, h, q0, qLast);
  tiles.useTileClasses(tileClassRowIndex<Variant>(b, h, p.heads_q, p.q_len, Config::kBlockQ,
                                                 q0 / Config::kBlockQ));

  if (threadIdx.x == 0) {
    mbarrierInit(smem.qFull(), 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrierInit(smem.full(s), 1);
      mbarrierInit(smem.empty(s), 128 * Config::kConsumers);
    }
    fenceBarrierInit();
    prefetchTensorMap(&pt.tma_q);
    prefetchTensorMap(&pt.tma_do);
    prefetchTensorMap(&pt.tma_k);
    prefetchTensorMap(&pt.tma_v);
    // Q and dO of both consumers: rows past q_len are TMA's zero fill (their P is 0: LSE = +inf).
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
  sm80::blockSync();

  if (warpGroup == 0) {
    setMaxRegistersDec<Config::kProducerRegisters>();
    if (groupThread >= 32) return;
    // The producer warp: every live kv tile through the stages, then a -1 slot.
    const bool leader = groupThread == 0;
    const int lastTile = tiles.last();
    Tri tileClass;
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
  setMaxRegistersInc<Config::kConsumerRegisters>();

  // This warpgroup's rows, and this lane's first accumulator row (wgmma.h).
  const int group = warpGroup - 1;
  const int lane = groupThread & 31, warp = groupThread >> 5;
  const int groupRow = q0 + 64 * group;
  const bool groupHasRows = groupRow < p.q_len;
  const int groupLast = minOf(groupRow + 63, p.q_len - 1);
  const int qRow = groupRow + 16 * warp + (lane >> 2);
  const int colInQuad = 2 * (lane & 3);

  // Per-row LSE (log2 domain) and delta of this lane's two rows; rows past q_len get P = 0.
  float lse2[2], delta[2];
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
  constexpr int kBitWords = ceilDiv(kN * 4, 32);

  float dq[1][Config::kDqTiles][4];
  sm80::warp::zero(dq);
  float s[1][kN][4], dp[1][kN][4];
  u32 dsA[1][Config::kDsSteps][4];  // dS of the tile, the A operand of its dQ GEMM
  const u32 qTile = __shfl_sync(0xffffffffu, smem.q(group), 0);    // (warp-uniform to ptxas)
  const u32 doTile = __shfl_sync(0xffffffffu, smem.dO(group), 0);
  const Turns<Config> turns{group};

  const auto issueSdP = [&](int stage) {
    gemmKMajor<Element, kBlockKV, Config::kQKSteps>(flat(s), qTile, 64, smem.k(stage), kBlockKV);
    gemmKMajor<Element, kBlockKV, Config::kVSteps>(flat(dp), doTile, 64, smem.v(stage), kBlockKV);
  };
  const auto issueDq = [&](int stage) {
    gemmRegsMNMajor<Element, Config::kHeadDim>(flat(dq), dsA[0], smem.k(stage), kBlockKV);
  };
  // P and dS of tile `tile` (stage `stage`) on the accumulators, exactly as sm80 backwardQ: dS
  // packed into dsA.
  const auto gradStep = [&](int tile, int stage, auto waitForDp) {
    const int kv0 = tile * kBlockKV;
    const int kCol = kv0 + colInQuad;
    Tri groupClass = smem.slots().scheduledClass(stage);
    if constexpr (Variant::kHasMask) {
      if (groupClass == Tri::Unknown && groupHasRows)
        groupClass = tiles.classify(groupRow, groupLast, kv0, tiles.tileEnd(tile));
    }
    const bool none = !groupHasRows || groupClass == Tri::False;
    const bool checkBounds = tiles.isTail(tile) || groupRow + 64 > p.q_len;
    u32 keepBits[kBitWords];
#pragma unroll
    for (int i = 0; i < kBitWords; ++i) keepBits[i] = 0u;
    if constexpr (Variant::kHasDropout)
      sm80::forEachDropoutDecision<Variant::kDropoutRounds, 1, kN>(
          p, batchHead, dropThreshold, qRow, kCol, [&](int, int ni, int c, bool kept) {
            const int e = ((c / 2) * kN + ni) * 2 + c % 2;
            keepBits[e / 32] |= u32(kept) << (e % 32);
          });
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int ni = 0; ni < kN; ++ni) {
        const int q = qRow + 8 * r;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float& x = s[0][ni][2 * r + j];
          const int k = kCol + 8 * ni + j;
          const float grad = sm80::bwd::scoreWithGrad<Variant>(p, x, b, h, q, k);
          bool keep = !none;
          if (checkBounds) keep = keep && q < p.q_len && k < p.kv_len;
          if constexpr (Variant::kHasMask) {
            if (groupClass == Tri::Unknown && keep) keep = Variant::mask(p, b, h, q, k);
          }
          x = keep ? exp2Approx(x * log2Scale - lse2[r]) * grad : 0.0f;
        }
      }
    waitForDp();
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int ni = 0; ni < kN; ++ni)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float d = dp[0][ni][2 * r + j];
          if constexpr (Variant::kHasDropout) {
            const int e = (r * kN + ni) * 2 + j;
            d = (keepBits[e / 32] >> (e % 32)) & 1u ? d * dropScale : 0.0f;
          }
          dp[0][ni][2 * r + j] = s[0][ni][2 * r + j] * (d - delta[r]);
        }
    sm80::warp::packP<Element>(dsA, dp);
  };

  // S and dP are two commit groups (issueSdP): the probabilities are computed while dP's GEMM
  // still runs, its wait held below them (wgmmaWaitAfter; ptxas would hoist a plain one). With
  // the consumers' turns this measured 1-2% faster on the H200 than waiting for both first
  // (hd256 full and causal, hd192 causal, softcap hd256; dropout hd256 0.5% slower, within noise)
  // and than the same without turns (which lost 7% with dropout; docs/perf/H200-backward.md).
  const auto waitForS = [&]() {
    wgmmaWait<1>();
    fenceRegisters(flat(s));
  };
  const auto waitForDp = [&]() {
    wgmmaWaitAfter<0>(s[0][kN - 1][1], s[0][kN - 1][3], qTile, p.batch < 0);
    fenceRegisters(flat(dp));
  };

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
    issueSdP(0);
    turns.pass();
    waitForS();
    gradStep(tile, 0, waitForDp);
    for (int iteration = 1;; ++iteration) {
      const int nextStage = iteration % kStages;
      mbarrierWait(smem.full(nextStage), u32(iteration / kStages) & 1u);
      const int next = smem.slots().scheduledTile(nextStage);
      if (next < 0) break;
      turns.take();
      wgmmaFence();
      issueDq(stage);
      issueSdP(nextStage);
      turns.pass();
      waitForS();
      fenceRegisters(flat(dq));
      mbarrierArrive(smem.empty(stage));
      stage = nextStage;
      tile = next;
      gradStep(tile, stage, waitForDp);
    }
    turns.take();
    wgmmaFence();
    issueDq(stage);
    turns.pass();
    if (group == 0) turns.take();
    wgmmaWait<0>();
    fenceRegisters(flat(dq));
    mbarrierArrive(smem.empty(stage));
  }

  if (!groupHasRows) return;
  Element* dqG = static_cast<Element*>(p.dq) + b * p.dq_stride_b + h * p.dq_stride_h;
  storeAccumulatorRows(dqG, p.dq_stride_s, dq, p.scale, qRow, p.q_len, colInQuad,
                       Config::kHeadDim);
}

}  // namespace sm90
}  // namespace attnc
