// The sm80 dK/dV kernel, backwardKV: one block per (kv tile, kv head, batch) keeps its K and V
// tiles in shared memory for the whole loop and streams the Q, dO, LSE and delta of every q tile
// of every query head of its GQA group through Stages buffers (bwd::QTileStream), summing dK and
// dV in registers; with WriteDQ it also adds its share of dQ into dq_accum with fp32 reductions.
// Per q tile, each warp stages its part of P^T and dS^T in shared memory (DkDvWarp::stagePart), a
// slice of q columns at a time, then adds dV += P^T dO and dK += dS^T Q, and dQ += dS K
// (DkDvWarp::accumulateDq).
#pragma once

#include "attnc/common/bwd_steps.h"
#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/layout.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm80/bwd_config.h"
#include "attnc/sm80/bwd_store.h"

namespace attnc {
namespace sm80 {
namespace bwd {

// The dropout decision of one element (philox.h): true = kept. One Philox call per element:
// the sm80 kernels' transposed fragments hold no whole group (sm90/backward.h shares calls).
template <int Rounds>
ATTNC_DEVICE bool dropoutKeep(const BwdParams& p, u32 batchHead, u32 threshold, int q, int k) {
  return dropoutKept<Rounds>(p.dropout_keys, p.dropout_offset, batchHead, threshold, u32(q),
                             u32(k));
}

// The Q, dO, LSE, delta stream of a backwardKV block: issue() starts the loads of one (head, q
// tile) into stage `stage` of the ring at stageSmem as one cp.async group, committed even when
// the stream is done (it.h == hEnd), so that the wait counts stay fixed.
template <class Config>
struct QTileLoader {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  static constexpr int kBlockQ = Config::kBlockQ;

  const BwdParams& p;
  int b, hEnd, tid;
  u32 stageSmem;

  ATTNC_DEVICE void issue(const QItem& it, int stage) const {
    if (it.h < hEnd) {
      const u32 base = stageSmem + u32(stage * Config::kStageBytes);
      const int q0 = it.tile * kBlockQ;
      const int rows = minOf(kBlockQ, p.q_len - q0);
      const Element* qG = static_cast<const Element*>(p.q) + b * p.q_stride_b +
                          it.h * p.q_stride_h + q0 * p.q_stride_s;
      const Element* doG = static_cast<const Element*>(p.do_) + b * p.do_stride_b +
                           it.h * p.do_stride_h + q0 * p.do_stride_s;
      block::loadTileAsync<QTile, Element, kBlockQ, Config::kHeadDim, Config::kHeadDimPadded,
                           Config::kThreads>(base, qG, p.q_stride_s, rows, tid);
      block::loadTileAsync<DoTile, Element, kBlockQ, Config::kHeadDimV, Config::kHeadDimVPadded,
                           Config::kThreads>(base + u32(QTile::kBytes), doG, p.do_stride_s, rows,
                                             tid);
      const u32 stats = base + u32(QTile::kBytes + DoTile::kBytes);
      const i64 rowBase = (i64(b) * p.heads_q + it.h) * p.q_len + q0;
      if (tid < kBlockQ) {
        cpAsync4(stats + 4 * tid, p.lse + (tid < rows ? rowBase + tid : 0), tid < rows);
      } else if (tid < 2 * kBlockQ) {
        const int i = tid - kBlockQ;
        cpAsync4(stats + 4 * (kBlockQ + i), p.delta + (i < rows ? rowBase + i : 0), i < rows);
      }
    }
    cpAsyncCommit();
  }
};

// One warp of a backwardKV block: its steps on a (q tile, kv tile) pair, over what every step
// reads (the block's and the warp's coordinates, the shared tiles, the launch's constants), named
// as in backwardKV, which fills them in. The accumulators that live across q tiles (dK, dV) are
// the kernel's, passed in; a slice's S^T and dP^T live in stagePart.
template <class Config, class Variant>
struct DkDvWarp {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using PTile = typename Config::PTile;
  using Tri = expr::Tri;
  static constexpr int kM = Config::kMTiles;
  static constexpr int kN = Config::kNTiles;
  static_assert(Config::kWarpsM * Config::kWarpsN == Config::kWarps && Config::kWarpRows % 16 == 0,
                "backwardKV: warps tile the kv rows in whole m16 blocks");
  static_assert(Config::kBlockQ % Config::kWarpsN == 0 && Config::kWarpCols % 16 == 0,
                "backwardKV: each warp's q columns are whole k16 steps");
  static_assert(Config::kDKTiles % 2 == 0 && Config::kDVTiles % 2 == 0,
                "backwardKV: dK/dV columns split in pairs of n8 tiles (padded: bwd_config.h)");
  static_assert(Config::kDqWarpsM * Config::kDqWarpsN == Config::kWarps &&
                    Config::kBlockQ % (16 * Config::kDqWarpsM) == 0 &&
                    Config::kDqTiles % 2 == 0,
                "backwardKV: dQ warp layout");

  const BwdParams& p;
  int b, hKv, kv0, kvRows;
  int tid, lane, warp, wn, rowInWarp, colInQuad;
  int warpRow;  // kv row of the warp inside the tile
  int warpCol;  // q column of the warp inside the q tile
  u32 kSmem, vSmem, pSmem, dsSmem;
  float log2Scale;
  u32 dropThreshold;
  float dropScale;

  // Nothing of this warp's part is kept: its P^T and dS^T are zero (other warps read them).
  ATTNC_DEVICE void zeroPart() const {
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int ni = 0; ni < kN; ++ni)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int tileRow = warpRow + 16 * mi + 8 * r + rowInWarp;
          const u32 offset = PTile::chunkOffset(tileRow, warpCol / 8 + ni) + 4 * (lane & 3);
          storeShared32(pSmem + offset, 0u);
          storeShared32(dsSmem + offset, 0u);
        }
  }

  // P^T and dS^T of the warp's part of q tile q0 of head h (its Q, dO, LSE and delta at qSmem,
  // doSmem, lseS, deltaS; cls the part's class) into the P^T and dS^T tiles. The warp's q columns
  // go in slices of kSliceTiles n8 tiles: S^T and dP^T of one slice are live at a time (next to
  // dK and dV), at the price of re-reading K's and V's A fragments.
  ATTNC_DEVICE void stagePart(u32 qSmem, u32 doSmem, const float* lseS, const float* deltaS, int h,
                              int q0, Tri cls, bool checkBounds) const {
    constexpr int kSlice = Config::kSliceTiles;
    constexpr int kBitWords = ceilDiv(kM * kSlice * 4, 32);
    const u32 batchHead = u32(b * p.heads_q + h);
#pragma unroll
    for (int slice = 0; slice < kN / kSlice; ++slice) {
      const int sliceCol = warpCol + slice * 8 * kSlice;
      // S^T = K Q^T.
      float s[kM][kSlice][4];
      warp::zero(s);
      warp::gemm<Element, Config::kQKSteps>(s, warp::SmemA<KTile>(kSmem, lane, warpRow, 0),
                                            warp::SmemB<QTile>(qSmem, lane, sliceCol, 0));
      // P^T (dropped and rescaled into the P^T tile); s keeps P * score'(s) for dS.
      u32 keepBits[kBitWords];
#pragma unroll
      for (int i = 0; i < kBitWords; ++i) keepBits[i] = 0u;
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kSlice; ++ni)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int tileRow = warpRow + 16 * mi + 8 * r + rowInWarp;
            const int kv = kv0 + tileRow;
            const int qLocal = sliceCol + 8 * ni + colInQuad;
            float pd[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float& x = s[mi][ni][2 * r + j];
              const int q = q0 + qLocal + j;
              const float grad = bwd::scoreWithGrad<Variant>(p, x, b, h, q, kv);
              bool keep = true;
              if (checkBounds) keep = q < p.q_len && kv < p.kv_len;
              if constexpr (Variant::kHasMask) {
                if (cls == Tri::Unknown && keep) keep = Variant::mask(p, b, h, q, kv);
              }
              const float prob =
                  keep ? exp2Approx(x * log2Scale - bwd::lseLog2(lseS[qLocal + j])) : 0.0f;
              pd[j] = prob;
              if constexpr (Variant::kHasDropout) {
                const int e = ((mi * kSlice + ni) * 2 + r) * 2 + j;
                const bool kept = keep && bwd::dropoutKeep<Variant::kDropoutRounds>(
                                                 p, batchHead, dropThreshold, q, kv);
                if (kept) keepBits[e / 32] |= 1u << (e % 32);
                pd[j] = kept ? prob * dropScale : 0.0f;
              }
              x = prob * grad;
            }
            storeShared32(pSmem + PTile::chunkOffset(tileRow, sliceCol / 8 + ni) + 4 * (lane & 3),
                          Convert<Element>::pack2(pd[0], pd[1]));
          }
      // dP^T = V dO^T; dS^T = P score' (dP dropped and rescaled - delta), into the dS^T tile.
      float dp[kM][kSlice][4];
      warp::zero(dp);
      warp::gemm<Element, Config::kVSteps>(dp, warp::SmemA<VTile>(vSmem, lane, warpRow, 0),
                                           warp::SmemB<DoTile>(doSmem, lane, sliceCol, 0));
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kSlice; ++ni)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int tileRow = warpRow + 16 * mi + 8 * r + rowInWarp;
            const int qLocal = sliceCol + 8 * ni + colInQuad;
            float ds[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float d = dp[mi][ni][2 * r + j];
              if constexpr (Variant::kHasDropout) {
                const int e = ((mi * kSlice + ni) * 2 + r) * 2 + j;
                d = (keepBits[e / 32] >> (e % 32)) & 1u ? d * dropScale : 0.0f;
              }
              ds[j] = s[mi][ni][2 * r + j] * (d - deltaS[qLocal + j]);
            }
            storeShared32(
                dsSmem + PTile::chunkOffset(tileRow, sliceCol / 8 + ni) + 4 * (lane & 3),
                Convert<Element>::pack2(ds[0], ds[1]));
          }
    }
  }

  // dQ += dS K (unscaled) into dq_accum, kDqChunk n8 tiles at a time through acc, for q tile q0
  // of head h.
  ATTNC_DEVICE void accumulateDq(float (&acc)[Config::kDqMTiles][Config::kDqChunk][4], int h,
                                 int q0) const {
    const int wmq = warp / Config::kDqWarpsN, wnq = warp % Config::kDqWarpsN;
    const int qRow0 = wmq * Config::kDqMTiles * 16;
    float* dqRows = p.dq_accum + (i64(b) * p.heads_q + h) * p.q_len * Config::kHeadDim;
#pragma unroll 1
    for (int chunk = 0; chunk < Config::kDqTiles / Config::kDqChunk; ++chunk) {
      const int n0 = wnq * Config::kDqTiles + chunk * Config::kDqChunk;
      warp::zero(acc);
      warp::gemm<Element, Config::kKSteps, Config::kPUnroll>(
          acc, warp::SmemAT<PTile>(dsSmem, lane, 0, qRow0 / 8),
          warp::SmemBT<KTile>(kSmem, lane, 0, n0));
#pragma unroll
      for (int mi = 0; mi < Config::kDqMTiles; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int q = q0 + qRow0 + 16 * mi + 8 * r + rowInWarp;
#pragma unroll
          for (int ni = 0; ni < Config::kDqChunk; ++ni) {
            const int col = (n0 + ni) * 8 + colInQuad;
            if (q < p.q_len && col < Config::kHeadDim)
              redAddF32x2(dqRows + i64(q) * Config::kHeadDim + col, acc[mi][ni][2 * r],
                          acc[mi][ni][2 * r + 1]);
          }
        }
    }
  }

  // dK (times the softmax scale) and dV through the K and V tiles: whole 16-byte stores.
  ATTNC_DEVICE void writeDkDv(const float (&dK)[kM][Config::kDKTiles][4],
                              const float (&dV)[kM][Config::kDVTiles][4]) const {
    bwd::storeFragment<KTile, Element>(kSmem, dK, p.scale, warpRow, wn * Config::kDKTiles, lane);
    bwd::storeFragment<VTile, Element>(vSmem, dV, 1.0f, warpRow, wn * Config::kDVTiles, lane);
    blockSync();
    bwd::storeTile<KTile, Element, Config::kBlockKV, Config::kHeadDim, Config::kThreads>(
        static_cast<Element*>(p.dk) + b * p.dk_stride_b + hKv * p.dk_stride_h + kv0 * p.dk_stride_s,
        p.dk_stride_s, kSmem, kvRows, tid);
    bwd::storeTile<VTile, Element, Config::kBlockKV, Config::kHeadDimV, Config::kThreads>(
        static_cast<Element*>(p.dv) + b * p.dv_stride_b + hKv * p.dv_stride_h + kv0 * p.dv_stride_s,
        p.dv_stride_s, vSmem, kvRows, tid);
  }
};

}  // namespace bwd

// dK, dV of one kv tile (and, with WriteDQ, its share of dQ into dq_accum).
// Grid (ceil(kv_len / BlockKV), heads_kv, batch), block kThreads, dynamic smem kSmemBytes.
template <class Config, class Variant, bool WriteDQ = true>
ATTNC_DEVICE void backwardKV(const BwdParams& p, unsigned char* smem) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using PTile = typename Config::PTile;
  using Tri = expr::Tri;
  constexpr int kM = Config::kMTiles;
  constexpr int kBlockQ = Config::kBlockQ;
  constexpr int kStages = Config::kStages;

  const int b = blockIdx.z, hKv = blockIdx.y, kv0 = blockIdx.x * Config::kBlockKV;
  if (kv0 >= p.kv_len) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / Config::kWarpsN, wn = warp % Config::kWarpsN;
  const int kvRows = minOf(Config::kBlockKV, p.kv_len - kv0);
  const int group = p.heads_q / p.heads_kv;
  const int hFirst = hKv * group, hEnd = hFirst + group;

  const u32 kSmem = smemAddress(smem);
  const u32 vSmem = kSmem + u32(KTile::kBytes);
  const u32 pSmem = vSmem + u32(VTile::kBytes);
  const u32 dsSmem = pSmem + u32(PTile::kBytes);
  const u32 stageSmem = dsSmem + u32(PTile::kBytes);

  // K and V of the block: loaded once, their own cp.async group.
  const Element* kG =
      static_cast<const Element*>(p.k) + b * p.k_stride_b + hKv * p.k_stride_h + kv0 * p.k_stride_s;
  const Element* vG =
      static_cast<const Element*>(p.v) + b * p.v_stride_b + hKv * p.v_stride_h + kv0 * p.v_stride_s;
  block::loadTileAsync<KTile, Element, Config::kBlockKV, Config::kHeadDim, Config::kHeadDimPadded,
                       Config::kThreads>(kSmem, kG, p.k_stride_s, kvRows, tid);
  block::loadTileAsync<VTile, Element, Config::kBlockKV, Config::kHeadDimV, Config::kHeadDimVPadded,
                       Config::kThreads>(vSmem, vG, p.v_stride_s, kvRows, tid);
  cpAsyncCommit();

  // The Q, dO, LSE, delta stream: one group per (head, q tile), committed even when empty.
  const bwd::QTileStream<Config, Variant> stream{p, b, kv0, kv0 + kvRows - 1, hEnd};
  const bwd::QTileLoader<Config> loader{p, b, hEnd, tid, stageSmem};

  bwd::QItem cur = stream.start(hFirst);
  bwd::QItem ahead = cur;
  loader.issue(cur, 0);
  if constexpr (kStages == 2) {
    ahead = stream.next(cur);
    loader.issue(ahead, 1);
  }

  float dK[kM][Config::kDKTiles][4];
  float dV[kM][Config::kDVTiles][4];
  warp::zero(dK);
  warp::zero(dV);
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  const int rowInWarp = lane >> 2, colInQuad = 2 * (lane & 3);
  const int warpRow = wm * Config::kWarpRows;   // kv row of the warp inside the tile
  const int warpCol = wn * Config::kWarpCols;   // q column of the warp inside the q tile
  const bwd::DkDvWarp<Config, Variant> steps{p, b, hKv, kv0, kvRows, tid, lane, warp, wn,
                                             rowInWarp, colInQuad, warpRow, warpCol, kSmem,
                                             vSmem, pSmem, dsSmem, log2Scale, dropThreshold,
                                             dropScale};

  int stage = 0;
  while (cur.h < hEnd) {
    cpAsyncWait<kStages - 1>();
    blockSync();  // this item's Q, dO, LSE, delta (and, the first time, K, V) are visible
    const u32 qSmem = stageSmem + u32(stage * Config::kStageBytes);
    const u32 doSmem = qSmem + u32(QTile::kBytes);
    // Plain shared loads (not asm): the compiler must see them ordered by the barriers.
    const float* lseS = reinterpret_cast<const float*>(smem + (stageSmem - kSmem) +
                                                       stage * Config::kStageBytes + QTile::kBytes +
                                                       DoTile::kBytes);
    const float* deltaS = lseS + kBlockQ;
    const int h = cur.h, q0 = cur.tile * kBlockQ;
    // The warp's part of the tile: kv rows kvW0.., q columns qW0..; it may be empty or full alone.
    const int kvW0 = kv0 + warpRow, qW0 = q0 + warpCol;
    const bool warpLive = kvW0 < p.kv_len && qW0 < p.q_len;
    Tri cls = cur.cls;
    if constexpr (Variant::kHasMask) {
      if (cls == Tri::Unknown && warpLive) {
        const QTiles<Variant, kBlockQ, BwdParams> tiles(p, b, h, kv0, kv0 + kvRows - 1);
        cls = tiles.classify(qW0, minOf(qW0 + Config::kWarpCols, p.q_len) - 1, kvW0,
                             minOf(kvW0 + Config::kWarpRows, p.kv_len) - 1);
      }
    }
    const bool checkBounds = q0 + kBlockQ > p.q_len || kv0 + Config::kBlockKV > p.kv_len;

    if (warpLive && cls != Tri::False) {
      steps.stagePart(qSmem, doSmem, lseS, deltaS, h, q0, cls, checkBounds);
    } else {
      steps.zeroPart();
    }
    blockSync();  // P^T and dS^T of the whole tile are in shared memory

    // dV += P^T dO, dK += dS^T Q over the whole q tile (the warp's kv rows, its head-dim columns).
    warp::gemm<Element, Config::kPSteps, Config::kPUnroll>(
        dV, warp::SmemA<PTile>(pSmem, lane, warpRow, 0),
        warp::SmemBT<DoTile>(doSmem, lane, 0, wn * Config::kDVTiles));
    warp::gemm<Element, Config::kPSteps, Config::kPUnroll>(
        dK, warp::SmemA<PTile>(dsSmem, lane, warpRow, 0),
        warp::SmemBT<QTile>(qSmem, lane, 0, wn * Config::kDKTiles));

    if constexpr (WriteDQ) {
      float acc[Config::kDqMTiles][Config::kDqChunk][4];
      steps.accumulateDq(acc, h, q0);
    }
    blockSync();  // everyone is done with this stage's buffers and the P^T / dS^T tiles

    const bwd::QItem following = stream.next(ahead);
    loader.issue(following, stage);
    cur = kStages == 1 ? following : ahead;
    ahead = following;
    stage = kStages == 1 ? 0 : stage ^ 1;
  }

  // Write dK (times the softmax scale) and dV through the K and V tiles: whole 16-byte stores.
  cpAsyncWait<0>();
  blockSync();
  steps.writeDkDv(dK, dV);
}

}  // namespace sm80
}  // namespace attnc
