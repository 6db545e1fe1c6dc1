// The epilogue of an sm_90a forward consumer warpgroup: normalizes O by the online softmax's row
// sums (and dropout's scale), then writes the rows' LSE and O, through the warpgroup's Q tile in
// shared memory where its rows fit there (Config::kOutputThroughSmem), else straight from the
// accumulators.
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/copy.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/softmax.h"
#include "attnc/common/types.h"
#include "attnc/sm90/fwd_mask.h"
#include "attnc/sm90/fwd_smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/warpgroup.h"

namespace attnc {
namespace sm90 {

// Normalizes O by the online softmax's row sums (and dropout's scale) and makes the rows' LSE.
template <class Config, class Variant>
ATTNC_DEVICE void normalizeOutput(const FwdParams& p, float (&o)[1][Config::kNvTiles][4],
                                  sm80::OnlineSoftmax<1>& softmax, float log2Scale,
                                  float (&lse)[1][2]) {
  const float outScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  softmax.finish(o, log2Scale, outScale, lse);
}

// Writes the rows' LSE and O (normalized: normalizeOutput), O through this warpgroup's Q tile
// where its rows fit there (Config::kOutputThroughSmem), else straight from the accumulators.
// (One function: with the two ways to write O as functions of their own, the hd256 kernels'
// SASS changed.)
template <class Config, class Variant>
ATTNC_DEVICE void writeOutput(const FwdParams& p, const ForwardSmem<Config>& smem,
                              const ConsumerRows& rows, const float (&o)[1][Config::kNvTiles][4],
                              const float (&lse)[1][2], u32 qTile) {
  using Element = typename Config::Element;
  constexpr bool kOrdered = VariantOrderedGrid<Variant>::value;
  constexpr int kNv = Config::kNvTiles;
  // (b, h) again, not kept live through the loop
  const BlockCoord at = kOrdered ? orderedBlockAgain(p.heads_q, p.batch) : plainBlock();
  // (the timeline's record holds the LSE)
  if (!kTimeline && p.lse != nullptr && (rows.lane & 3) == 0) {
    float* lseRow = p.lse + (i64(at.b) * p.heads_q + at.h) * p.q_len;
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (unsigned(rows.qRow + 8 * r) < unsigned(p.q_len)) lseRow[rows.qRow + 8 * r] = lse[0][r];
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
      const int row = 16 * rows.warp + (rows.lane >> 2) + 8 * r;
#pragma unroll
      for (int nv = 0; nv < kNv; ++nv)
        sm80::storeShared32(chunkAt(row, nv) + 4 * (rows.lane & 3),
                            Convert<Element>::pack2(o[0][nv][2 * r], o[0][nv][2 * r + 1]));
    }
    namedBarrierSync(Config::kOutputBarrier + rows.group, 128);
#pragma unroll
    for (int i = 0; i < ceilDiv(64 * kChunks, 128); ++i) {
      const int idx = rows.groupThread + 128 * i;
      if ((64 * kChunks) % 128 != 0 && idx >= 64 * kChunks) break;
      const int row = idx / kChunks, chunk = idx % kChunks;
      const int q = rows.groupRow + row;
      if (unsigned(q) < unsigned(p.q_len))  // 0 <= q < q_len
        sm80::storeGlobal128(oG + q * p.o_stride_s + chunk * 8,
                             sm80::loadShared128(chunkAt(row, chunk)));
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = rows.qRow + 8 * r;
      if (unsigned(q) >= unsigned(p.q_len)) continue;  // q < 0 or q >= q_len
      u32* row = reinterpret_cast<u32*>(oG + q * p.o_stride_s + 2 * (rows.lane & 3));
#pragma unroll
      for (int nv = 0; nv < kNv; ++nv)
        row[4 * nv] = Convert<Element>::pack2(o[0][nv][2 * r], o[0][nv][2 * r + 1]);
    }
  }
  if (kTimeline && rows.groupThread == 0 && rows.group <= 1)
    timelineMark(p, rows.group == 0 ? kTimelineEnd : kTimelineEnd1);
}

}  // namespace sm90
}  // namespace attnc
