// Compile-time shape of an sm_80 forward kernel: element type, head dims and tiles, plus every
// quantity derived from them (fragment counts, shared-memory layout, whether Q stays in registers).
// Generated code picks the template arguments; everything else follows from them here.
#pragma once

#include "attnc/common/layout.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// Element: attnc::bf16 or attnc::half. HeadDim, HeadDimV: multiples of 8 in [8, 256].
// BlockQ rows of Q per block, split evenly over Warps warps (16 or a multiple of 16 rows each);
// BlockKV keys per kv tile (a multiple of 16). Stages: shared buffers in the K/V stream (>= 2;
// see forward.h: K and V tiles alternate through the same ring of buffers).
template <class Element_, int HeadDim, int HeadDimV, int BlockQ, int BlockKV, int Warps, int Stages,
          int QInRegs = -1>
struct FwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kHeadDimV = HeadDimV;
  static constexpr int kBlockQ = BlockQ;
  static constexpr int kBlockKV = BlockKV;
  static constexpr int kWarps = Warps;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = 32 * Warps;

  // Per-warp fragments (common/mma.h): m16 tiles of rows, n8 tiles of S and O, k16 steps.
  static constexpr int kWarpRows = BlockQ / Warps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kHeadDimPadded = roundUp(HeadDim, 16);  // zero-padded k16 reduction
  static constexpr int kQKSteps = kHeadDimPadded / 16;
  static constexpr int kNTiles = BlockKV / 8;
  static constexpr int kPVSteps = BlockKV / 16;
  static constexpr int kNvTiles = HeadDimV / 8;

  // Shared memory: rows are whole 128-byte swizzle segments. The Q tile also stages O on the way
  // out, so it is as wide as the wider head dim.
  static constexpr int kKWidth = roundUp(HeadDim, 64);
  static constexpr int kVWidth = roundUp(HeadDimV, 64);
  using QTile = SmemTile<BlockQ, maxOf(kKWidth, kVWidth)>;
  using KTile = SmemTile<BlockKV, kKWidth>;
  using VTile = SmemTile<BlockKV, kVWidth>;
  static constexpr int kSlotBytes = maxOf(KTile::kBytes, VTile::kBytes);
  static constexpr int kSmemBytes = QTile::kBytes + Stages * kSlotBytes;

  // Q fragments stay in registers for the whole kv loop when they are small (<= 32 registers);
  // otherwise they are re-read from shared memory at every k16 step (FlashAttention-2 does the
  // same by default, where O's accumulators already take most of the register file). QInRegs = 0
  // or 1 overrides the choice (for experiments: registers against shared-memory bandwidth).
  static constexpr bool kQInRegs = QInRegs >= 0 ? QInRegs == 1 : kMTiles * kQKSteps * 4 <= 32;

  static_assert(HeadDim % 8 == 0 && HeadDim >= 8 && HeadDim <= 256,
                "head_dim: multiple of 8 in 8..256");
  static_assert(HeadDimV % 8 == 0 && HeadDimV >= 8 && HeadDimV <= 256,
                "head_dim_v: multiple of 8 in 8..256");
  static_assert(BlockQ % Warps == 0 && kWarpRows % 16 == 0, "each warp owns whole m16 tiles");
  static_assert(BlockKV % 16 == 0, "kv tiles are whole k16 steps of P V");
  static_assert(Stages >= 2, "the K/V stream needs one buffer loading while another is read");
};

}  // namespace sm80
}  // namespace attnc
