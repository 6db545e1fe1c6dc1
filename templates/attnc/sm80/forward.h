// The sm_80-family FlashAttention-2 forward kernel body (mma.sync, ldmatrix, cp.async; runs on
// A100 and Hopper). One block computes BlockQ rows of one (batch, head); each warp owns its own
// rows, keeps S, P and O in registers and never talks to the other warps except through the
// shared K/V buffers. Generated code supplies the Variant hooks (mask, score, dropout flags) and a
// FwdConfig, and wraps this in an extern "C" __global__ entry point.
//
// The K/V stream: K and V tiles alternate (K0 V0 K1 V1 ...) through a ring of Stages shared
// buffers, one cp.async group per tile. Before a tile is consumed, one block barrier both
// publishes it and frees the buffer consumed before it, which is refilled right away with the tile
// Stages - 1 ahead. With Stages = 2 that is FlashAttention-2's schedule: V_j loads while Q K_j^T
// and the softmax run, K_{j+1} loads while P V_j runs.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/epilogue.h"
#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/layout.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/softmax.h"
#include "attnc/common/types.h"
#include "attnc/sm80/config.h"

namespace attnc {
namespace sm80 {

// Issues the K/V stream's loads in order, skipping empty tiles; a group is committed for every
// call, loaded or not, so the consumer's cp.async.wait_group counts stay fixed.
template <class Config, class Variant>
struct KvProducer {
  using Element = typename Config::Element;
  using Tiles = KvTiles<Variant, Config::kBlockKV>;

  const Tiles& tiles;
  const Element* k;  // K and V of this (batch, kv head), row 0
  const Element* v;
  i64 kStride, vStride;
  u32 buffers;  // shared address of buffer 0
  int tile;     // next tile to load; past `last` when the stream is done
  int last;
  int buffer = 0;
  bool nextIsV = false;

  ATTNC_DEVICE void issue(int tid) {
    if (tile <= last) {
      const u32 dst = buffers + u32(buffer * Config::kSlotBytes);
      const int kv0 = tile * Config::kBlockKV;
      const int rows = minOf(Config::kBlockKV, tiles.p.kv_len - kv0);
      if (!nextIsV) {
        block::loadTileAsync<typename Config::KTile, Element, Config::kBlockKV, Config::kHeadDim,
                             Config::kHeadDimPadded, Config::kThreads>(dst, k + kv0 * kStride,
                                                                       kStride, rows, tid);
      } else {
        block::loadTileAsync<typename Config::VTile, Element, Config::kBlockKV, Config::kHeadDimV,
                             Config::kHeadDimV, Config::kThreads>(dst, v + kv0 * vStride, vStride,
                                                                  rows, tid);
        expr::Tri unused;
        tile = tiles.nextLive(tile + 1, last, unused);
      }
      nextIsV = !nextIsV;
    }
    cpAsyncCommit();
    buffer = buffer + 1 == Config::kStages ? 0 : buffer + 1;
  }
};

// Writes LSE (where p.lse is not null) and the normalized O of the warp's rows: qRow is this lane's
// first row, warpRow the warp's first row inside the tile from q0.
template <class Config>
ATTNC_DEVICE void storeOutput(const FwdParams& p, int b, int h, int q0, int warpRow, int qRow,
                              int lane, u32 qSmem,
                              const float (&o)[Config::kMTiles][Config::kNvTiles][4],
                              const float (&lse)[Config::kMTiles][2]) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  constexpr int kM = Config::kMTiles;
  constexpr int kNv = Config::kNvTiles;

  if (p.lse != nullptr && (lane & 3) == 0) {
    float* lseRow = p.lse + (i64(b) * p.heads_q + h) * p.q_len;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = qRow + 16 * mi + 8 * r;
        if (q < p.q_len) lseRow[q] = lse[mi][r];
      }
  }

  // O goes through the warp's own rows of the Q tile so global stores are whole 16-byte chunks.
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warpRow + 16 * mi + 8 * r + (lane >> 2);
#pragma unroll
      for (int nv = 0; nv < kNv; ++nv) {
        const u32 packed = Convert<Element>::pack2(o[mi][nv][2 * r], o[mi][nv][2 * r + 1]);
        storeShared32(qSmem + QTile::chunkOffset(row, nv) + 4 * (lane & 3), packed);
      }
    }
  warpSync();
  constexpr int kRowChunks = Config::kHeadDimV / 8;
  constexpr int kWarpChunks = Config::kWarpRows * kRowChunks;
  Element* oG = static_cast<Element*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
#pragma unroll
  for (int i = 0; i < ceilDiv(kWarpChunks, 32); ++i) {
    const int idx = lane + 32 * i;
    if (kWarpChunks % 32 != 0 && idx >= kWarpChunks) break;
    const int row = idx / kRowChunks, chunk = idx % kRowChunks;
    const int q = q0 + warpRow + row;
    if (q < p.q_len) {
      const u32x4 v = loadShared128(qSmem + QTile::chunkOffset(warpRow + row, chunk));
      storeGlobal128(oG + q * p.o_stride_s + chunk * 8, v);
    }
  }
}

template <class Config, class Variant>
ATTNC_DEVICE void forward(const FwdParams& p, unsigned char* smem) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using Tri = expr::Tri;
  constexpr int kM = Config::kMTiles;
  constexpr int kN = Config::kNTiles;
  constexpr int kNv = Config::kNvTiles;
  constexpr int kStages = Config::kStages;
  constexpr bool kQInRegs = Config::kQInRegs;

  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = blockIdx.x * Config::kBlockQ;
  if (q0 >= p.q_len) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qRows = minOf(Config::kBlockQ, p.q_len - q0);
  const int hKv = h / (p.heads_q / p.heads_kv);

  // This lane's first accumulator row (global q) and the warp's rows inside the tile.
  const int warpRow = warp * Config::kWarpRows;
  const int qRow = q0 + warpRow + (lane >> 2);
  const bool warpHasRows = q0 + warpRow < p.q_len;

  const u32 qSmem = smemAddress(smem);
  const u32 kvSmem = qSmem + u32(QTile::kBytes);
  const LdmatrixLane<QTile> qLane(lane, false);
  const LdmatrixLane<KTile> kLane(lane, true);
  const LdmatrixLane<VTile> vLane(lane, false);

  // Load Q: its own cp.async group, ahead of the K/V stream.
  const Element* qG = static_cast<const Element*>(p.q) + b * p.q_stride_b + h * p.q_stride_h +
                      q0 * p.q_stride_s;
  block::loadTileAsync<QTile, Element, Config::kBlockQ, Config::kHeadDim, Config::kHeadDimPadded,
                       Config::kThreads>(qSmem, qG, p.q_stride_s, qRows, tid);
  cpAsyncCommit();

  // Find the kv tile range (while Q is in flight).
  KvTiles<Variant, Config::kBlockKV> tiles(p, b, h, q0, q0 + qRows - 1);
  // The launch's precomputed tile classes (tile_classes.h), when it made them.
  tiles.useTileClasses(tileClassRowIndex<Variant>(b, h, p.heads_q, p.q_len, Config::kBlockQ,
                                                 q0 / Config::kBlockQ));
  const int lastTile = tiles.last();
  Tri tileClass;
  int tile = tiles.nextLive(tiles.first(), lastTile, tileClass);

  // Start the K/V stream: Stages - 1 tiles ahead.
  KvProducer<Config, Variant> producer{
      tiles,
      static_cast<const Element*>(p.k) + b * p.k_stride_b + hKv * p.k_stride_h,
      static_cast<const Element*>(p.v) + b * p.v_stride_b + hKv * p.v_stride_h,
      p.k_stride_s,
      p.v_stride_s,
      kvSmem,
      tile,
      lastTile};
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) producer.issue(tid);

  u32 qRegs[kQInRegs ? kM : 1][kQInRegs ? Config::kQKSteps : 1][4];
  if constexpr (kQInRegs) {
    if (tile <= lastTile) {
      cpAsyncWait<kStages - 1>();  // the Q group, not the K/V groups behind it
      blockSync();
      warp::loadQ<QTile, kM, Config::kQKSteps>(qRegs, qSmem, qLane, warpRow);
    }
  }

  float o[kM][kNv][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int nv = 0; nv < kNv; ++nv)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mi][nv][c] = 0.0f;
  OnlineSoftmax<kM> softmax;
  // Without a score hook the scale folds into the base-2 exponent: one FFMA per probability.
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 batchHead = u32(b * p.heads_q + h);
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;

  int buffer = 0;
  const auto consumeNext = [&]() {
    cpAsyncWait<kStages - 2>();
    blockSync();
    producer.issue(tid);
    const u32 at = kvSmem + u32(buffer * Config::kSlotBytes);
    buffer = buffer + 1 == kStages ? 0 : buffer + 1;
    return at;
  };

  // Loop over kv tiles.
  for (; tile <= lastTile; tile = tiles.nextLive(tile + 1, lastTile, tileClass)) {
    const int kv0 = tile * Config::kBlockKV;
    const int kCol = kv0 + 2 * (lane & 3);
    // A partial tile can still be empty or full for this warp's rows alone.
    Tri warpClass = tileClass;
    if constexpr (Variant::kHasMask) {
      if (tileClass == Tri::Unknown && warpHasRows) {
        const int rowLast = minOf(q0 + warpRow + Config::kWarpRows, p.q_len) - 1;
        warpClass = tiles.classify(q0 + warpRow, rowLast, kv0, tiles.tileEnd(tile));
      }
    }
    const bool compute = warpHasRows && warpClass != Tri::False;

    // S = Q K^T.
    const u32 kBuffer = consumeNext();
    float s[kM][kN][4];
    u32 pA[kM][Config::kPVSteps][4];
    if (compute) {
      warp::gemmQK<Element, kQInRegs, kM, kN, Config::kQKSteps>(s, qRegs, qSmem, qLane, warpRow,
                                                                  kBuffer, kLane);
      // Epilogue on S: score hook, then the mask and the kv_len tail.
      if constexpr (Variant::kHasScore) applyScore<Variant>(s, p, b, h, qRow, kCol);
      const bool partial = warpClass == Tri::Unknown;
      if (partial || tiles.isTail(tile)) applyMask<Variant>(s, p, b, h, qRow, kCol, partial);
      // Online softmax update; S becomes P.
      softmax.update(s, o, log2Scale);
      if constexpr (Variant::kHasDropout)
        applyDropout<Variant::kDropoutRounds>(s, p, batchHead, dropThreshold, qRow, kCol);
      warp::packP<Element>(pA, s);
    }

    // O += P V.
    const u32 vBuffer = consumeNext();
    if (compute) warp::gemmPV<Element>(o, pA, vBuffer, vLane);
  }

  // Normalize O, write LSE and O.
  cpAsyncWait<0>();
  blockSync();  // every load has landed and every warp is done with the shared tiles
  float lse[kM][2];
  const float outScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  softmax.finish(o, log2Scale, outScale, lse);
  if (!warpHasRows) return;
  storeOutput<Config>(p, b, h, q0, warpRow, qRow, lane, qSmem, o, lse);
}

}  // namespace sm80
}  // namespace attnc
