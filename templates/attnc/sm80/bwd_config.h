// Compile-time shape of the sm_80 backward kernels (backward.h): element type, head dims, tiles,
// and the warp layouts and shared-memory layout derived from them. One BwdConfig serves all four
// backward kernels; backwardKV and backwardQ each check the constraints of their own layout, so
// generated code may instantiate them with different BwdConfigs (it does: see docs/templates.md).
//
// Shared memory (bytes; W_k = roundUp(head_dim, 64), W_v = roundUp(head_dim_v, 64),
// W_q = roundUp(BlockQ, 64); 2-byte elements):
//   backwardKV: kSmemBytes  = 2 * BlockKV * (W_k + W_v)                 K, V tiles (whole loop)
//                           + 2 * 2 * BlockKV * W_q                     P^T and dS^T tiles
//                           + Stages * (2 * BlockQ * (W_k + W_v) + 8 * BlockQ)   Q, dO, LSE, delta
//   backwardQ:  kSmemBytesQ = 2 * BlockQ * (W_k + W_v)                  Q, dO tiles
//                           + Stages * 2 * BlockKV * (W_k + W_v)        K, V tile ring
//   backwardPreprocess, backwardConvertDQ: no shared memory.
#pragma once

#include "attnc/common/layout.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// Element: attnc::bf16 or attnc::half. HeadDim, HeadDimV: multiples of 8 in [8, 256].
// backwardKV: BlockKV keys per block (the dK/dV rows), BlockQ queries per loop step; Warps warps
// tile [BlockKV x BlockQ] (S^T, dP^T) and [BlockKV x head_dim] (dK, dV) as kWarpsM x kWarpsN.
// backwardQ: BlockQ queries per block (16 x kQMTiles rows per warp), BlockKV keys per loop step.
// Stages: buffers of the streamed operand (1 or 2; 2 overlaps the next load with compute).
template <class Element_, int HeadDim, int HeadDimV, int BlockQ, int BlockKV, int Warps, int Stages>
struct BwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kHeadDimV = HeadDimV;
  static constexpr int kBlockQ = BlockQ;
  static constexpr int kBlockKV = BlockKV;
  static constexpr int kWarps = Warps;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = 32 * Warps;

  // Head dims padded to whole k16 steps / pairs of n8 tiles; the padding is zero in shared memory.
  static constexpr int kHeadDimPadded = roundUp(HeadDim, 16);
  static constexpr int kHeadDimVPadded = roundUp(HeadDimV, 16);
  static constexpr int kQKSteps = kHeadDimPadded / 16;
  static constexpr int kVSteps = kHeadDimVPadded / 16;

  static constexpr int kKWidth = roundUp(HeadDim, 64);
  static constexpr int kVWidth = roundUp(HeadDimV, 64);
  using QTile = SmemTile<BlockQ, kKWidth>;
  using DoTile = SmemTile<BlockQ, kVWidth>;
  using KTile = SmemTile<BlockKV, kKWidth>;
  using VTile = SmemTile<BlockKV, kVWidth>;
  using PTile = SmemTile<BlockKV, roundUp(BlockQ, 64)>;  // [kv][q]: P^T, dS^T

  // ---- backwardKV -----------------------------------------------------------------------------
  // S^T / dP^T [BlockKV x BlockQ] and dK / dV [BlockKV x head dim] share the row split: warp
  // (wm, wn) = (warp / kWarpsN, warp % kWarpsN) owns kv rows wm * kWarpRows.. of both.
  static constexpr int kWarpsM = minOf(Warps, BlockKV / 16);
  static constexpr int kWarpsN = Warps / kWarpsM;
  static constexpr int kWarpRows = BlockKV / kWarpsM;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kWarpCols = BlockQ / kWarpsN;  // q columns of S^T per warp
  static constexpr int kNTiles = kWarpCols / 8;
  // S^T / dP^T are computed kSliceTiles n8 tiles (16 q columns) at a time: with dK and dV live
  // (up to 128 registers at hd128) wider slices spill at hd128 (ptxas, CUDA 13.0).
  static constexpr int kSliceTiles = kNTiles % 2 == 0 ? 2 : kNTiles;
  // dK and dV n8 tiles per warp, padded so that each warp column takes whole pairs (head dims 200,
  // 208, 232 and 240: 26 or 30 n8 tiles, odd halves over two warp columns): the extra columns read
  // the Q and dO tiles past the head dim, inside their 64-column width, and are never stored.
  static constexpr int kDKTiles = roundUp(kHeadDimPadded / 8, 2 * kWarpsN) / kWarpsN;
  static constexpr int kDVTiles = roundUp(kHeadDimVPadded / 8, 2 * kWarpsN) / kWarpsN;
  static constexpr int kPSteps = BlockQ / 16;  // k16 steps of dV += P^T dO, dK += dS^T Q
  // Partly rolled above hd64: fully unrolled, ptxas hoists enough loads to spill (CUDA 13.0).
  static constexpr int kPUnroll = kHeadDimPadded > 64 ? 2 : kPSteps;
  // dQ [BlockQ x head_dim] += dS K, kDqWarpsM x kDqWarpsN warps, in column chunks of kDqChunk n8
  // tiles (so its accumulators never coexist with more than kDqChunk * 4 * kDqMTiles floats).
  static constexpr int kDqWarpsM = minOf(Warps, BlockQ / 16);
  static constexpr int kDqWarpsN = Warps / kDqWarpsM;
  static constexpr int kDqMTiles = BlockQ / kDqWarpsM / 16;
  // n8 tiles per warp, padded to an even count: columns past head_dim read whatever the K tile
  // holds there and are never stored (each output column depends on its own B column only).
  static constexpr int kDqTiles = roundUp(kHeadDimPadded / 8, 2 * kDqWarpsN) / kDqWarpsN;
  // Chunks of 8 n8 tiles spill next to hd256's dK/dV (ptxas, CUDA 13.0); 4 do not.
  static constexpr int kDqChunkMax = kHeadDimPadded > 128 ? 4 : 8;
  static constexpr int kDqChunk =
      kDqTiles % kDqChunkMax == 0 ? kDqChunkMax : (kDqTiles % 4 == 0 ? 4 : 2);
  static constexpr int kKSteps = BlockKV / 16;  // k16 steps of dQ += dS K

  static constexpr int kStatsBytes = 2 * 4 * BlockQ;  // LSE, delta of one q tile
  static constexpr int kStageBytes = QTile::kBytes + DoTile::kBytes + kStatsBytes;
  static constexpr int kSmemBytes =
      KTile::kBytes + VTile::kBytes + 2 * PTile::kBytes + Stages * kStageBytes;

  // ---- backwardQ ------------------------------------------------------------------------------
  static constexpr int kQWarpRows = BlockQ / Warps;
  static constexpr int kQMTiles = kQWarpRows / 16;
  static constexpr int kQNTiles = BlockKV / 8;
  static constexpr int kQDqTiles = kHeadDimPadded / 8;
  static constexpr int kKvStageBytes = KTile::kBytes + VTile::kBytes;
  static constexpr int kSmemBytesQ = QTile::kBytes + DoTile::kBytes + Stages * kKvStageBytes;

  // backwardPreprocess / backwardConvertDQ: rows per block.
  static constexpr int kPreprocessRows = 64;

  static_assert(HeadDim % 8 == 0 && HeadDim >= 8 && HeadDim <= 256,
                "head_dim: multiple of 8 in 8..256");
  static_assert(HeadDimV % 8 == 0 && HeadDimV >= 8 && HeadDimV <= 256,
                "head_dim_v: multiple of 8 in 8..256");
  static_assert(BlockQ % 16 == 0 && BlockKV % 16 == 0, "tiles are whole m16/k16 blocks");
  static_assert(kDqTiles * kDqWarpsN * 8 <= kKWidth, "dQ columns stay inside the K tile");
  static_assert(kDKTiles * kWarpsN * 8 <= kKWidth && kDVTiles * kWarpsN * 8 <= kVWidth,
                "dK and dV columns stay inside the Q and dO tiles (and the K and V tiles they are "
                "staged through)");
  static_assert(Stages == 1 || Stages == 2, "one or two buffers of the streamed operand");
  static_assert(kThreads >= 2 * BlockQ, "one thread per LSE and per delta element of a q tile");
};

}  // namespace sm80
}  // namespace attnc
