// The sm_90a dK/dV kernel's own dQ (its `_kv` entry, WriteDQ): dQ = dS K for a consumer's dQ
// columns over all the block's keys, issued one q tile late, and its addition to dq_accum
// (TiledDqLayout), by TMA bulk reductions from a shared fp32 tile or, with the head-dim split,
// by vector reductions from registers.
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/bwd_dkdv_steps.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// dQ = dS K for this consumer's kDqPartN head-dim columns of part `part` over all the block's
// keys: A is dS^T of both consumers (buffer `buffer`), read transposed, or with the split this
// consumer's own copy of the block's dS^T; B the K tile's columns from kColumns
// (KvConsumer::dqKColumns), MN-major.
template <class C, class Acc>
ATTNC_DEVICE void issueDqGemm(const C& c, u32 kColumns, Acc& acc, int buffer, int part) {
  using Config = typename C::Config;
  // K's descriptors from a laundered base, made again at each call: hoisted out of the loop they
  // stayed live through it and spilled with the ping-pong's barriers.
  u32 kBase = kColumns;
  if constexpr (C::kPingPong) asm volatile("" : "+r"(kBase));
  wgmmaFence();
#pragma unroll
  for (int kk = 0; kk < Config::kDqSteps; ++kk)
    WgmmaSS<typename C::Element, C::kDqPartN>::template run<1, 1>(
        flat(acc), mnMajorDescriptor(c.smem.dsT(buffer, 0), 64, kk),
        mnMajorDescriptor(kBase + u32(part * Config::kBlockKV * kSwizzleRowBytes),
                          Config::kBlockKV, kk),
        kk > 0);
  wgmmaCommit();
}

// This consumer's dQ columns of one q tile into its shared tile (TiledDqLayout), then TMA bulk
// reductions into dq_accum, one per warp over the warp's own 16 rows (a row's floats stay in the
// row, so 16 rows are 16 x kDqN consecutive floats in the tile and in dq_accum): the warp's rows
// are free again once its previous reduction has read them, which its lane 0 waits for, so the
// warps never wait for each other.
template <class C>
ATTNC_DEVICE void reduceDqTiled(const C& c, const float (&dq)[1][C::kDqPartN / 8][4], int batch,
                                int head, int tileQ0) {
  using Config = typename C::Config;
  using DqLayout = TiledDqLayout<Config>;
  const BwdParams& p = c.p;
  const int lane = c.lane, warp = c.warp;
  const u32 dqTile = c.smem.dq(c.group);
  const u32 warpRows = dqTile + u32(16 * warp * Config::kDqN * 4);
  if (lane == 0) bulkWaitRead<0>();
  __syncwarp();
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int n = 0; n < Config::kDqTiles; ++n)
      storeSharedF32x2(dqTile + u32(4 * DqLayout::swizzled(c.tileRow + 8 * r, 8 * n + c.colInQuad)),
                       dq[0][n][2 * r], dq[0][n][2 * r + 1]);
  fenceProxyAsync();
  __syncwarp();
  const int rows = minOf(16, p.q_len - tileQ0 - 16 * warp);
  if (lane == 0 && rows > 0) {
    float* dst = p.dq_accum + DqLayout::tileOffset(p.q_len, p.heads_q, batch, head, tileQ0) +
                 c.group * 64 * Config::kDqN + 16 * warp * Config::kDqN;
    bulkReduceAddF32(dst, warpRows, u32(rows * Config::kDqN * 4));
    bulkCommit();
  }
}

// With the split: the same columns (of part `part`) added to dq_accum straight from the
// registers, one vector reduction of 4 floats per n8 tile, lane pairs swapping halves
// (bwd_config.h DqPairReduction).
template <class C>
ATTNC_DEVICE void reduceDqFromRegisters(const C& c, const float (&dq)[1][C::kDqPartN / 8][4],
                                        int batch, int head, int tileQ0, int part) {
  using Config = typename C::Config;
  using DqLayout = TiledDqLayout<Config>;
  using Pair = DqPairReduction;
  const BwdParams& p = c.p;
  const int lane = c.lane;
  const bool odd = Pair::odd(lane);
  const int row = 16 * c.warp + Pair::row(lane);
  const bool inside = tileQ0 + row < p.q_len;  // every lane swaps; rows past q_len add nothing
  float* block = p.dq_accum + DqLayout::tileOffset(p.q_len, p.heads_q, batch, head, tileQ0) +
                 c.group * 64 * Config::kDqN;
#pragma unroll
  for (int n = 0; n < C::kDqPartN / 8; ++n) {
    // (the selects are of values: an index chosen at run time would put dq in local memory)
    const bool sendsLow = Pair::sent(lane) == 0;
    const float x = __shfl_xor_sync(0xffffffffu, sendsLow ? dq[0][n][0] : dq[0][n][2], 1);
    const float y = __shfl_xor_sync(0xffffffffu, sendsLow ? dq[0][n][1] : dq[0][n][3], 1);
    float* dst = block + DqLayout::swizzled(row, part * C::kDqPartN + Pair::column(lane, n));
    if (!inside) continue;
    if (odd)
      reduceAddGlobalF32x4(dst, x, y, dq[0][n][2], dq[0][n][3]);
    else
      reduceAddGlobalF32x4(dst, dq[0][n][0], dq[0][n][1], x, y);
  }
}

// In iteration `iteration` of the consumer's loop, while dK's GEMM runs: dQ of the previous q
// tile (a tile late, so that the consumers need not wait for each other's dS^T: each runs up to a
// tile ahead of the other), into dq and, with C::kLateDq, its second part into dqLate. The first
// iteration multiplies whatever buffer 1 holds and drops the result (no wgmma is issued under a
// condition: ptxas would serialize them all). Both steps take the kernel's layout, smem, for the
// dS^T buffers' barriers: through c.smem, the layout's copy, the registers were allocated apart
// from the rest of the loop's barrier addresses.
template <class C, class Smem>
ATTNC_DEVICE void issuePreviousDq(const C& c, const Smem& smem, u32 kColumns, int iteration,
                                  float (&dq)[1][C::kDqPartN / 8][4],
                                  float (&dqLate)[1][C::kDqPartN / 8][4]) {
  if (iteration > 0)
    mbarrierWait(smem.dsFull((iteration - 1) & 1), u32((iteration - 1) >> 1) & 1u);
  issueDqGemm(c, kColumns, dq, (iteration - 1) & 1, 0);
  if constexpr (C::kLateDq) issueDqGemm(c, kColumns, dqLate, (iteration - 1) & 1, 1);
}

// Then, once dV's and dK's GEMMs are done: the previous q tile (previousHead, previousQ0; the
// block's batch is `batch`) into dq_accum, and the dS^T buffer its GEMMs read released: with the
// split its parts one after another from registers (with C::kLateDq the second from dqLate, whose
// GEMM may still run on entry), else through the shared tile. Nothing is added in the first
// iteration.
template <class C, class Smem>
ATTNC_DEVICE void reducePreviousDq(const C& c, const Smem& smem, u32 kColumns, int iteration,
                                   int batch, int previousHead, int previousQ0,
                                   float (&dq)[1][C::kDqPartN / 8][4],
                                   float (&dqLate)[1][C::kDqPartN / 8][4]) {
  fenceRegisters(flat(dq));
  if constexpr (C::kLateDq) {
    if (iteration > 0) reduceDqFromRegisters(c, dq, batch, previousHead, previousQ0, 0);
    wgmmaWait<0>();
    fenceRegisters(flat(dqLate));
    if (iteration > 0) {
      mbarrierArrive(smem.dsEmpty((iteration - 1) & 1));
      reduceDqFromRegisters(c, dqLate, batch, previousHead, previousQ0, 1);
    }
  } else if constexpr (C::Config::kSplit) {
    if (iteration > 0) reduceDqFromRegisters(c, dq, batch, previousHead, previousQ0, 0);
#pragma unroll
    for (int part = 1; part < C::kDqParts; ++part) {
      issueDqGemm(c, kColumns, dq, (iteration - 1) & 1, part);
      wgmmaWait<0>();
      fenceRegisters(flat(dq));
      if (iteration > 0) reduceDqFromRegisters(c, dq, batch, previousHead, previousQ0, part);
    }
    if (iteration > 0) mbarrierArrive(smem.dsEmpty((iteration - 1) & 1));
  } else if (iteration > 0) {
    mbarrierArrive(smem.dsEmpty((iteration - 1) & 1));
    reduceDqTiled(c, dq, batch, previousHead, previousQ0);
  }
}

// The last q tile's dQ after the loop, which ended at iteration `iteration`
// (none when the block had no q tile, previousHead -1: then K was never loaded and the product is
// dropped). On return every warp's reductions have read the shared dQ tile (with the split, there
// are none); their writes to dq_accum complete on their own before the grid does.
template <class C, class Batch>
ATTNC_DEVICE void lastTileDq(const C& c, const Batch& batchNow, u32 kColumns, int iteration,
                             int previousHead, int previousQ0,
                             float (&dq)[1][C::kDqPartN / 8][4]) {
  const int last = iteration - 1;
  if (previousHead >= 0) mbarrierWait(c.smem.dsFull(last & 1), u32(last >> 1) & 1u);
#pragma unroll
  for (int part = 0; part < C::kDqParts; ++part) {
    issueDqGemm(c, kColumns, dq, last & 1, part);
    wgmmaWait<0>();
    fenceRegisters(flat(dq));
    if (previousHead >= 0) {
      if constexpr (C::Config::kSplit)
        reduceDqFromRegisters(c, dq, batchNow(), previousHead, previousQ0, part);
      else
        reduceDqTiled(c, dq, batchNow(), previousHead, previousQ0);
    }
  }
  if (c.lane == 0) bulkWaitRead<0>();
}

}  // namespace sm90
}  // namespace attnc
