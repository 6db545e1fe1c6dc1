// The sm80 dQ kernel, backwardQ: the deterministic dQ, one block per (q tile, q head, batch), the
// kv tiles streamed like the forward, dQ accumulated in registers and written once, no atomics:
// bit-identical from run to run. Per kv tile, each warp recomputes S and P of its rows, dP and
// dS, and adds dS K to dQ (DqWarp::addTile).
#pragma once

#include "attnc/common/bwd_steps.h"
#include "attnc/common/copy.h"
#include "attnc/common/dropout.h"
#include "attnc/common/expr.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm80/bwd_config.h"
#include "attnc/sm80/bwd_store.h"

namespace attnc {
namespace sm80 {

namespace bwd {

// The K, V stream of a backwardQ block: issue() starts the loads of kv tile `tile` into stage
// `stage` of the ring at kvSmem as one cp.async group, committed even past the last tile, so that
// the wait counts stay fixed.
template <class Config>
struct KvTileLoader {
  using Element = typename Config::Element;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;

  const BwdParams& p;
  const Element* kG;  // K and V of the block's (batch, kv head)
  const Element* vG;
  int lastTile, tid;
  u32 kvSmem;

  ATTNC_DEVICE void issue(int tile, int stage) const {
    if (tile <= lastTile) {
      const u32 base = kvSmem + u32(stage * Config::kKvStageBytes);
      const int kv0 = tile * Config::kBlockKV;
      const int rows = minOf(Config::kBlockKV, p.kv_len - kv0);
      block::loadTileAsync<KTile, Element, Config::kBlockKV, Config::kHeadDim,
                           Config::kHeadDimPadded, Config::kThreads>(base, kG + kv0 * p.k_stride_s,
                                                                     p.k_stride_s, rows, tid);
      block::loadTileAsync<VTile, Element, Config::kBlockKV, Config::kHeadDimV,
                           Config::kHeadDimVPadded, Config::kThreads>(
          base + u32(KTile::kBytes), vG + kv0 * p.v_stride_s, p.v_stride_s, rows, tid);
    }
    cpAsyncCommit();
  }
};

// One warp of a backwardQ block: its steps on a (q tile, kv tile) pair, over what every step reads
// (the block's and the warp's coordinates, the Q and dO tiles, the launch's constants), named as in
// backwardQ, which fills them in. The arrays that live across kv tiles (dQ, the rows' LSE and
// delta) are the kernel's, passed in; S, dP and dS live in addTile.
template <class Config, class Variant>
struct DqWarp {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using Tri = expr::Tri;
  static constexpr int kM = Config::kQMTiles;
  static constexpr int kN = Config::kQNTiles;
  static constexpr int kD = Config::kQDqTiles;

  const BwdParams& p;
  int b, h, q0;
  int lane;
  int warpRow;  // q row of the warp inside the tile
  int qRow;     // the lane's first query
  int colInQuad;
  u32 qSmem, doSmem;
  float log2Scale;
  u32 batchHead, dropThreshold;
  float dropScale;

  // dQ += dS K of the kv tile at kv0 (its K and V at kSmem, vSmem) on the warp's rows, whose class
  // in the tile is warpClass: S = Q K^T and P recomputed, dP = dO V^T, dS = P score'(S) (dP dropped
  // and rescaled - delta).
  ATTNC_DEVICE void addTile(float (&dq)[kM][kD][4], const float (&lse2)[kM][2],
                            const float (&delta)[kM][2], u32 kSmem, u32 vSmem, int kv0,
                            Tri warpClass, bool checkBounds) const {
    constexpr int kBitWords = ceilDiv(kM * kN * 4, 32);
    const int kCol = kv0 + colInQuad;
    float s[kM][kN][4];
    warp::zero(s);
    warp::gemm<Element, Config::kQKSteps>(s, warp::SmemA<QTile>(qSmem, lane, warpRow, 0),
                                          warp::SmemB<KTile>(kSmem, lane, 0, 0));
    // Dropout keep bits, bit ((mi * 2 + r) * kN + ni) * 2 + j (this frame is the forward's).
    u32 keepBits[kBitWords];
#pragma unroll
    for (int i = 0; i < kBitWords; ++i) keepBits[i] = 0u;
    if constexpr (Variant::kHasDropout)
      forEachDropoutDecision<Variant::kDropoutRounds, kM, kN>(
          p, batchHead, dropThreshold, qRow, kCol, [&](int mi, int ni, int c, bool kept) {
            const int e = ((mi * 2 + c / 2) * kN + ni) * 2 + c % 2;
            keepBits[e / 32] |= u32(kept) << (e % 32);
          });
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int ni = 0; ni < kN; ++ni) {
          const int q = qRow + 16 * mi + 8 * r;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float& x = s[mi][ni][2 * r + j];
            const int k = kCol + 8 * ni + j;
            const float grad = bwd::scoreWithGrad<Variant>(p, x, b, h, q, k);
            bool keep = true;
            if (checkBounds) keep = q < p.q_len && k < p.kv_len;
            if constexpr (Variant::kHasMask) {
              if (warpClass == Tri::Unknown && keep) keep = Variant::mask(p, b, h, q, k);
            }
            const float prob = keep ? exp2Approx(x * log2Scale - lse2[mi][r]) : 0.0f;
            x = prob * grad;
          }
        }

    float dp[kM][kN][4];
    warp::zero(dp);
    warp::gemm<Element, Config::kVSteps>(dp, warp::SmemA<DoTile>(doSmem, lane, warpRow, 0),
                                         warp::SmemB<VTile>(vSmem, lane, 0, 0));
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int ni = 0; ni < kN; ++ni)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float d = dp[mi][ni][2 * r + j];
            if constexpr (Variant::kHasDropout) {
              const int e = ((mi * 2 + r) * kN + ni) * 2 + j;
              d = (keepBits[e / 32] >> (e % 32)) & 1u ? d * dropScale : 0.0f;
            }
            dp[mi][ni][2 * r + j] = s[mi][ni][2 * r + j] * (d - delta[mi][r]);
          }
    // dQ += dS K, dS packed straight from the accumulators.
    u32 dsA[kM][kN / 2][4];
    warp::packP<Element>(dsA, dp);
    warp::gemm<Element, kN / 2>(dq, warp::RegsA<kM, kN / 2>{dsA},
                                warp::SmemBT<KTile>(kSmem, lane, 0, 0));
  }

  // dQ (times the softmax scale) through the warp's own rows of the Q tile, 16-byte stores.
  ATTNC_DEVICE void writeDq(const float (&dq)[kM][kD][4]) const {
    bwd::storeFragment<QTile, Element>(qSmem, dq, p.scale, warpRow, 0, lane);
    warpSync();
    constexpr int kRowChunks = Config::kHeadDim / 8;
    constexpr int kWarpChunks = Config::kQWarpRows * kRowChunks;
    Element* dqG = static_cast<Element*>(p.dq) + b * p.dq_stride_b + h * p.dq_stride_h;
#pragma unroll
    for (int i = 0; i < ceilDiv(kWarpChunks, 32); ++i) {
      const int idx = lane + 32 * i;
      if (kWarpChunks % 32 != 0 && idx >= kWarpChunks) break;
      const int row = idx / kRowChunks, chunk = idx % kRowChunks;
      const int q = q0 + warpRow + row;
      if (q < p.q_len)
        storeGlobal128(dqG + q * p.dq_stride_s + chunk * 8,
                       loadShared128(qSmem + QTile::chunkOffset(warpRow + row, chunk)));
    }
  }
};

}  // namespace bwd

// Deterministic dQ: one block per (q tile, q head, batch), the kv tiles streamed like the forward,
// dQ accumulated in registers and written once. Bit-identical from run to run.
// Grid (ceil(q_len / BlockQ), heads_q, batch), block kThreads, dynamic smem kSmemBytesQ.
template <class Config, class Variant>
ATTNC_DEVICE void backwardQ(const BwdParams& p, unsigned char* smem) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  using KTile = typename Config::KTile;
  using Tri = expr::Tri;
  constexpr int kM = Config::kQMTiles;
  constexpr int kD = Config::kQDqTiles;
  constexpr int kStages = Config::kStages;
  static_assert(Config::kBlockQ % Config::kWarps == 0 && Config::kQWarpRows % 16 == 0,
                "backwardQ: each warp owns whole m16 tiles of queries");

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * Config::kBlockQ;
  if (q0 >= p.q_len) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qRows = minOf(Config::kBlockQ, p.q_len - q0);
  const int hKv = h / (p.heads_q / p.heads_kv);
  const int warpRow = warp * Config::kQWarpRows;
  const int qRow = q0 + warpRow + (lane >> 2);
  const int colInQuad = 2 * (lane & 3);
  const bool warpHasRows = q0 + warpRow < p.q_len;

  const u32 qSmem = smemAddress(smem);
  const u32 doSmem = qSmem + u32(QTile::kBytes);
  const u32 kvSmem = doSmem + u32(DoTile::kBytes);

  const Element* qG =
      static_cast<const Element*>(p.q) + b * p.q_stride_b + h * p.q_stride_h + q0 * p.q_stride_s;
  const Element* doG = static_cast<const Element*>(p.do_) + b * p.do_stride_b + h * p.do_stride_h +
                       q0 * p.do_stride_s;
  block::loadTileAsync<QTile, Element, Config::kBlockQ, Config::kHeadDim, Config::kHeadDimPadded,
                       Config::kThreads>(qSmem, qG, p.q_stride_s, qRows, tid);
  block::loadTileAsync<DoTile, Element, Config::kBlockQ, Config::kHeadDimV, Config::kHeadDimVPadded,
                       Config::kThreads>(doSmem, doG, p.do_stride_s, qRows, tid);
  cpAsyncCommit();

  // (BwdParams::kv_tile_* are the sm_90a dQ kernel's, of other tiles: this walk searches.)
  const KvTiles<Variant, Config::kBlockKV, BwdParams, false> tiles(p, b, h, q0, q0 + qRows - 1);
  const int lastTile = tiles.last();
  const Element* kG = static_cast<const Element*>(p.k) + b * p.k_stride_b + hKv * p.k_stride_h;
  const Element* vG = static_cast<const Element*>(p.v) + b * p.v_stride_b + hKv * p.v_stride_h;
  const bwd::KvTileLoader<Config> loader{p, kG, vG, lastTile, tid, kvSmem};
  Tri curClass, aheadClass;
  int cur = tiles.nextLive(tiles.first(), lastTile, curClass);
  int ahead = cur;
  aheadClass = curClass;
  loader.issue(cur, 0);
  if constexpr (kStages == 2) {
    ahead = tiles.nextLive(cur + 1, lastTile, aheadClass);
    loader.issue(ahead, 1);
  }

  // Per-row LSE (log2 domain) and delta of this lane's rows; rows past q_len get P = 0.
  float lse2[kM][2], delta[kM][2];
  const i64 rowBase = (i64(b) * p.heads_q + h) * p.q_len;
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = qRow + 16 * mi + 8 * r;
      lse2[mi][r] = q < p.q_len ? bwd::lseLog2(p.lse[rowBase + q]) : kInfinity;
      delta[mi][r] = q < p.q_len ? p.delta[rowBase + q] : 0.0f;
    }

  float dq[kM][kD][4];
  warp::zero(dq);
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 batchHead = u32(b * p.heads_q + h);
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  const bwd::DqWarp<Config, Variant> steps{p, b, h, q0, lane, warpRow, qRow, colInQuad, qSmem,
                                           doSmem, log2Scale, batchHead, dropThreshold, dropScale};

  int stage = 0;
  while (cur <= lastTile) {
    cpAsyncWait<kStages - 1>();
    blockSync();
    const u32 kSmem = kvSmem + u32(stage * Config::kKvStageBytes);
    const u32 vSmem = kSmem + u32(KTile::kBytes);
    const int kv0 = cur * Config::kBlockKV;
    Tri warpClass = curClass;
    if constexpr (Variant::kHasMask) {
      if (curClass == Tri::Unknown && warpHasRows) {
        const int rowLast = minOf(q0 + warpRow + Config::kQWarpRows, p.q_len) - 1;
        warpClass = tiles.classify(q0 + warpRow, rowLast, kv0, tiles.tileEnd(cur));
      }
    }
    const bool checkBounds = tiles.isTail(cur) || q0 + Config::kBlockQ > p.q_len;

    if (warpHasRows && warpClass != Tri::False)
      steps.addTile(dq, lse2, delta, kSmem, vSmem, kv0, warpClass, checkBounds);
    blockSync();

    Tri followingClass;
    const int following = tiles.nextLive(ahead + 1, lastTile, followingClass);
    loader.issue(following, stage);
    if constexpr (kStages == 1) {
      cur = following;
      curClass = followingClass;
    } else {
      cur = ahead;
      curClass = aheadClass;
    }
    ahead = following;
    aheadClass = followingClass;
    stage = kStages == 1 ? 0 : stage ^ 1;
  }

  cpAsyncWait<0>();
  blockSync();
  if (!warpHasRows) return;
  steps.writeDq(dq);
}

}  // namespace sm80
}  // namespace attnc
