// The stores of the sm_90a backward kernels' results: a warpgroup accumulator to global rows,
// straight from registers or staged through shared memory as whole rows, and the dK/dV kernel's
// last stage, which writes a consumer's dK (times the softmax scale) and dV.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/bwd_dkdv_steps.h"
#include "attnc/sm90/bwd_smem.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"

namespace attnc {
namespace sm90 {

// Each consumer's barrier of its 128 threads around the staged dK and dV stores (storeRowsStaged):
// kStoreBarrier + consumer; with the head-dim split or a separate dQ, which stage them in the
// stages' Q tiles, kStoreBarrier holds the consumers until neither reads a stage, and each then
// uses kStoreBarrier + 1 + consumer.
constexpr int kStoreBarrier = 5;

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

// dK (times the softmax scale) and dV: this consumer's columns of them, for its kv rows (some of
// which are in the sequence), after the loop of the block whose first kv row is kv0.
template <class C>
ATTNC_DEVICE void storeDkDv(const C& c, int kv0, int groupThread,
                            const float (&dk)[1][C::Config::kDkTiles][4],
                            const float (&dv)[1][C::Config::kDvTiles][4]) {
  using Config = typename C::Config;
  using Element = typename C::Element;
  const BwdParams& p = c.p;
  const int group = c.group, groupKv = c.groupKv;
  const BlockCoord end = kvBlockCoord<C::kOrdered, C::kOrdered>(p);
  const int b = end.b, hKv = end.h;
  Element* dkRows =
      static_cast<Element*>(p.dk) + b * p.dk_stride_b + hKv * p.dk_stride_h + c.dkCol0;
  Element* dvRows =
      static_cast<Element*>(p.dv) + b * p.dv_stride_b + hKv * p.dv_stride_h + c.dvCol0;
  if constexpr (StagedRowsFit<Config>::value || QStagedRowsFit<Config>::value) {
    // Through shared memory, so that the global stores are whole rows: the consumer's dQ tile, free
    // once every warp's dQ reductions have read it; with the split or a separate dQ (no dQ tile),
    // the Q tile of the stage with the consumer's index, once neither consumer reads any stage
    // (the split's share the 64 kv rows, so both are here; without the split the second consumer
    // does not come here if none of its rows is in the sequence: its GEMMs' results are dropped,
    // so the first one need not wait for them).
    constexpr bool kThroughQ = QStagedRowsFit<Config>::value;
    const int storers = Config::kSplit || kv0 + 64 < p.kv_len ? 128 * Config::kConsumers : 128;
    const u32 staging = [&] {
      if constexpr (kThroughQ)
        return c.smem.q(group);
      else
        return c.smem.dq(group);
    }();
    const int barrier = kThroughQ ? kStoreBarrier + 1 + group : kStoreBarrier + group;
    if constexpr (kThroughQ)
      namedBarrierSync(kStoreBarrier, storers);
    else
      namedBarrierSync(barrier, 128);
    storeRowsStaged(dkRows + i64(groupKv) * p.dk_stride_s, p.dk_stride_s, dk, p.scale,
                    p.kv_len - groupKv, Config::kHeadDim - c.dkCol0, staging, groupThread, barrier);
    storeRowsStaged(dvRows + i64(groupKv) * p.dv_stride_s, p.dv_stride_s, dv, 1.0f,
                    p.kv_len - groupKv, Config::kHeadDimV - c.dvCol0, staging, groupThread,
                    barrier);
  } else {
    storeAccumulatorRows(dkRows, p.dk_stride_s, dk, p.scale, c.kvRow, p.kv_len, c.colInQuad,
                         Config::kHeadDim - c.dkCol0);
    storeAccumulatorRows(dvRows, p.dv_stride_s, dv, 1.0f, c.kvRow, p.kv_len, c.colInQuad,
                         Config::kHeadDimV - c.dvCol0);
  }
}

}  // namespace sm90
}  // namespace attnc
