// Compile-time shape of the decode kernel (decode.h): element type, head dims, the GQA group whose
// query heads share a block's rows, and the tiles attn-select-decode-tiles derived
// (TileRuleDecode.cpp). Everything else follows from them here.
#pragma once

#include "attnc/common/layout.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// Warps of a decode block: each takes its own 16 keys of every kv tile against all the rows.
constexpr int kDecodeWarps = 4;
// Keys of a warp's share of a kv tile: one k16 step of P V, two n8 tiles of S.
constexpr int kDecodeWarpKeys = 16;
// The combine kernel: a warp per (query head, row), 4 warps a block.
constexpr int kCombineThreads = 128;
constexpr int kCombineRowsPerBlock = kCombineThreads / 32;

// Element: attnc::bf16 or attnc::half. Group = heads_q / heads_kv. MTiles m16 fragments of packed
// rows a block (every warp holds all of them). Stages: shared K/V buffers (K and V alternate, as
// in the forward). QInRegs: Q's fragments stay in registers for the whole loop.
template <class Element_, int HeadDim, int HeadDimV, int Group, int MTiles, int Stages,
          bool QInRegs>
struct DecodeConfig {
  using Element = Element_;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kHeadDimV = HeadDimV;
  static constexpr int kGroup = Group;
  static constexpr int kMTiles = MTiles;
  static constexpr int kRows = 16 * MTiles;
  static constexpr int kWarps = kDecodeWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockKV = kDecodeWarps * kDecodeWarpKeys;
  static constexpr int kStages = Stages;
  static constexpr bool kQInRegs = QInRegs;

  static constexpr int kHeadDimPadded = roundUp(HeadDim, 16);  // zero-padded k16 reduction
  static constexpr int kQKSteps = kHeadDimPadded / 16;
  static constexpr int kWarpNTiles = kDecodeWarpKeys / 8;  // a warp's n8 tiles of S
  static constexpr int kNvTiles = HeadDimV / 8;

  // Shared memory: the Q tile and the K/V ring, rows whole 128-byte swizzle segments, all as wide
  // as the wider head dim (the tile rule's accounting). After the loop the same bytes hold the
  // warps' pairwise merge: kWarps / 2 slots of each lane's O, row maxima and sums, fp32.
  static constexpr int kWidth = roundUp(maxOf(HeadDim, HeadDimV), 64);
  using QTile = SmemTile<kRows, kWidth>;
  using KTile = SmemTile<kBlockKV, kWidth>;
  using VTile = SmemTile<kBlockKV, kWidth>;
  static constexpr int kSlotBytes = KTile::kBytes;
  static constexpr int kMergeFloatsPerLane = MTiles * kNvTiles * 4 + 4 * MTiles;
  static constexpr int kMergeSlotBytes = 32 * kMergeFloatsPerLane * 4;
  static constexpr int kMergeBytes = kWarps / 2 * kMergeSlotBytes;
  static constexpr int kSmemBytes = maxOf(QTile::kBytes + Stages * kSlotBytes, kMergeBytes);

  static_assert(HeadDim % 8 == 0 && HeadDim >= 8 && HeadDim <= 256,
                "head_dim: multiple of 8 in 8..256");
  static_assert(HeadDimV % 8 == 0 && HeadDimV >= 8 && HeadDimV <= 256,
                "head_dim_v: multiple of 8 in 8..256");
  static_assert(Group >= 1, "a kv head serves at least one query head");
  static_assert(MTiles >= 1 && MTiles <= 2, "16 or 32 packed rows a block");
  static_assert(Stages >= 2, "the K/V stream needs one buffer loading while another is read");
};

}  // namespace sm80
}  // namespace attnc
