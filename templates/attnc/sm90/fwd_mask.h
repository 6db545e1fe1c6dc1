// Which elements of a kv tile a consumer warpgroup of the sm_90a forward keeps. The producer
// publishes each tile's class for the block's rows (kv_tiles.h); a partial tile can still be empty
// or full for the 64 rows of one warpgroup, so each refines it for its own rows. A tile empty for
// them is multiplied and masked, not skipped: no wgmma is issued under a condition
// (fwd_mainloop.h).
//
// For a mask that reads declared inputs (kMaskAhead: a document mask reads an id per key) the
// decisions are made as bits before the tile's GEMMs are issued (the first tile's before its K has
// landed), since they do not depend on the scores, so that the loads' round trips run during the
// waits for the stage, the turn and S, off the path from S to the softmax; other masks are a few
// integer operations per element, made on the scores after the wait (as bits ahead, causal_hd64
// spilled).
#pragma once

#include "attnc/common/epilogue.h"
#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/fwd_smem.h"

namespace attnc {
namespace sm90 {

// Whether any of the 64 rows from firstRow is in the sequence: -64 < firstRow < q_len (rows below
// 0 are padding of an end-aligned first tile, block_order.h).
ATTNC_DEVICE bool rowsInSequence(int firstRow, int qLen) {
  return unsigned(firstRow + 63) < unsigned(qLen + 63);
}

// A consumer warpgroup's rows, and this lane's first accumulator row (wgmma.h).
struct ConsumerRows {
  int group;        // the consumer's index (warpgroup group + 1)
  int groupThread;  // the thread's index in its warpgroup
  int lane, warp;
  int groupRow;     // the first of the warpgroup's 64 rows (below 0: end-aligned padding)
  int groupLast;    // its last row in the sequence
  bool groupHasRows;
  int qRow;
};

ATTNC_DEVICE ConsumerRows consumerRows(int q0, int group, int groupThread, int qLen) {
  ConsumerRows rows;
  rows.group = group;
  rows.groupThread = groupThread;
  rows.lane = groupThread & 31;
  rows.warp = groupThread >> 5;
  rows.groupRow = q0 + 64 * group;
  rows.groupLast = minOf(rows.groupRow + 63, qLen - 1);
  rows.groupHasRows = rowsInSequence(rows.groupRow, qLen);
  rows.qRow = rows.groupRow + 16 * rows.warp + (rows.lane >> 2);
  return rows;
}

// The masks of one consumer warpgroup's rows, tile by tile.
template <class Config, class Variant>
struct ForwardMask {
  using Tri = expr::Tri;
  static constexpr int kN = Config::kNTiles;
  static constexpr bool kMaskAhead = VariantTileClasses<Variant>::value;
  // A tile's mask in two steps where the mask is split (kReadsAhead): reads() reads the tile's
  // class and, for a partial tile, issues together the loads of this warpgroup's class word and of
  // the mask's key parts (for a document mask, the ids of the tile's keys); fromReads() decodes and
  // joins them. Made in one step (ofTile), a partial tile waited for two round trips in a row, the
  // class word's and then the ids'.
  static constexpr bool kReadsAhead = kMaskAhead && sm80::MaskSplitOf<Variant>::value;

  struct TileMask {
    bool masked;      // false: the tile keeps every element of this warpgroup's rows
    bool perElement;  // the mask decides per element (else only the kv_len tail is masked)
    sm80::KeepBits<1, kN> keep;  // kMaskAhead: the decisions
  };
  struct Reads {
    Tri tileClass;
    u32 groupWord;
    sm80::MaskPartReads<Variant, 1, kN> parts;
  };

  const FwdParams& p;
  const ForwardSmem<Config>& smem;
  const KvTiles<Variant, Config::kBlockKV>& tiles;
  const ConsumerRows& rows;
  int b, h;

  // What a tile of this warpgroup's class needs masked (the decisions themselves come after).
  ATTNC_DEVICE TileMask ofClass(int tile, Tri groupClass) const {
    TileMask mask{};
    mask.perElement = groupClass != Tri::True;
    mask.masked = mask.perElement || tiles.isTail(tile);
    return mask;
  }

  // The mask of tile `tile`, of class tileClass for the block's rows, for this warpgroup's rows.
  ATTNC_DEVICE TileMask ofTile(int tile, Tri tileClass) const {
    // A partial tile can still be empty or full for this warpgroup's rows alone.
    Tri groupClass = tileClass;
    if constexpr (Variant::kHasMask) {
      // From groupRow even when it is negative: a class over more rows holds for the group's own.
      if (tileClass == Tri::Unknown && rows.groupHasRows)
        groupClass = tiles.groupClass(tile, rows.group, rows.groupRow, rows.groupLast);
    }
    TileMask mask = ofClass(tile, groupClass);
    if constexpr (kMaskAhead) {
      if (mask.masked)
        mask.keep = sm80::maskKeepBitsWarp<Variant, 1, kN>(
            p, b, h, rows.qRow, tile * Config::kBlockKV, rows.lane, mask.perElement);
    }
    return mask;
  }

  ATTNC_DEVICE Reads reads(int tile, int tileStage) const {
    Reads reads{};
    if constexpr (kReadsAhead) {
      reads.tileClass = smem.scheduledClass(tileStage);
      if (reads.tileClass == Tri::Unknown) {
        if (rows.groupHasRows) reads.groupWord = tiles.groupClassWord(tile);
        reads.parts = sm80::readMaskParts<Variant, 1, kN>(p, b, h, rows.qRow,
                                                          tile * Config::kBlockKV, rows.lane);
      }
    }
    return reads;
  }

  ATTNC_DEVICE TileMask fromReads(int tile, const Reads& reads) const {
    TileMask mask{};
    if constexpr (kReadsAhead) {
      // A partial tile can still be empty or full for this warpgroup's rows alone (ofTile).
      Tri groupClass = reads.tileClass;
      if (reads.tileClass == Tri::Unknown && rows.groupHasRows)
        groupClass = tiles.groupClassOf(reads.groupWord, tile, rows.group);
      mask = ofClass(tile, groupClass);
      if (mask.perElement)
        mask.keep = sm80::keepBitsFromParts<Variant, 1, kN>(
            p, b, h, rows.qRow, tile * Config::kBlockKV, rows.lane, reads.parts);
      else if (mask.masked)
        mask.keep = sm80::maskKeepBits<Variant, 1, kN>(
            p, b, h, rows.qRow, tile * Config::kBlockKV + 2 * (rows.lane & 3),
            /*perElement=*/false);
    }
    return mask;
  }

  // For kMaskAhead, the mask of the tile in stage tileStage, made before its GEMMs.
  ATTNC_DEVICE TileMask ahead(int tile, int tileStage) const {
    return ofTile(tile, smem.scheduledClass(tileStage));
  }
};

}  // namespace sm90
}  // namespace attnc
