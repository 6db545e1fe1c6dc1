// The body of a kernel's `<name>_tile_classes` entry: the class (expr::Tri) of every (q tile,
// kv tile) pair of the forward's tiling, and each q tile's first and last tile that is not empty
// (FwdParams::kv_tile_bounds/_classes, params.h); and of `<name>_bwd_tile_classes`, the same for
// the backward's dK/dV kernel, rows of q tiles per kv tile (BwdParams::q_tile_bounds/_classes).
// They run once per launch, after the block summaries and before the attention kernels, for
// masks that read declared inputs: classifying a tile there takes memory round trips, so that a
// block that searches its kv range itself spends most of its time before its first tile. Here
// every pair is classified in parallel, one lane per tile, and the kernels' walks read their rows
// instead.
#pragma once

#include "attnc/common/block_order.h"
#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"

namespace attnc {

constexpr int kTileClassThreads = 256;

// The launch's rows (b, h, tile of the fixed axis: `length` positions in tiles of `block`), and
// the words a row needs for `walked` positions in tiles of `walkBlock`.
ATTNC_HD constexpr i64 tileClassRows(int batch, int heads_q, int length, int block) {
  return i64(batch) * heads_q * ceilDiv(length, block);
}
ATTNC_HD constexpr int tileClassWords(int walked, int walkBlock) {
  return ceilDiv(ceilDiv(walked, walkBlock), 16);
}
// The words a row of 64-row group classes (FwdParams::kv_group_classes) needs: 4 tiles a word.
ATTNC_HD constexpr int tileGroupWords(int walked, int walkBlock) {
  return ceilDiv(ceilDiv(walked, walkBlock), 4);
}
// Blocks of kTileClassThreads for `rows` rows, one warp a row in a grid-stride loop (any grid size
// is correct).
ATTNC_HD constexpr unsigned tileClassBlocks(i64 rows) {
  return unsigned(minOf(ceilDiv(rows, i64(kTileClassThreads / 32)), i64(65535)));
}

// The 8 bits of kv tile t (class `cls`) for the 64-row groups of the q tile from q0 (params.h,
// FwdParams::kv_group_classes): group g's class in bits 2 g, 2 g + 1; 0 (empty) for a group past
// q_len or when the whole tile is empty, 1 (full) for every group when the whole tile is full.
template <class Walk>
ATTNC_HD u32 tileGroupBits(const Walk& tiles, int t, expr::Tri cls, int q0, int qLen, int groups) {
  u32 bits = 0u;
  if (cls == expr::Tri::False) return bits;
  for (int g = 0; g < groups; ++g) {
    const int lo = q0 + 64 * g;
    if (lo >= qLen) break;
    // Rows below 0 are padding (an end-aligned first tile, block_order.h): a group of them only
    // gets row 0's class, which the kernel never reads.
    const expr::Tri gc = cls == expr::Tri::True
                             ? expr::Tri::True
                             : tiles.classify(maxOf(lo, 0), minOf(maxOf(lo + 63, 0), qLen - 1),
                                              t * Walk::kBlock, tiles.tileEnd(t));
    bits |= u32(gc) << (2 * g);
  }
  return bits;
}

// One row as the entry writes it, serially (the entry does the same with a lane per tile):
// `bounds` gets the first and last tile whose class is not False (numTiles and -1 when none), and
// `words` (tileClassWords of them) every tile's class. The host tests check the kernels' walk of
// such rows against the walk that classifies by itself.
template <class Walk>
ATTNC_HD void tileClassRow(const Walk& tiles, int* bounds, u32* words, int wordCount) {
  int first = tiles.numTiles, last = -1;
  for (int w = 0; w < wordCount; ++w) words[w] = 0u;
  for (int t = 0; t < tiles.numTiles; ++t) {
    const expr::Tri cls = tiles.tileClass(t);
    if (cls == expr::Tri::False) continue;
    first = minOf(first, t);
    last = t;
    words[tileClassWord(t)] |= u32(cls) << tileClassShift(t);
  }
  bounds[0] = first;
  bounds[1] = last;
}

// The rank of q tile t among n whose kv ranges span counts[0..n): the number of tiles that run
// before it, longest first, ties by the higher index (the ordered grid's own order, last tile
// first). A permutation of 0..n-1 over t.
ATTNC_HD int tileOrderRank(const int* counts, int n, int t) {
  const int c = counts[t];
  int rank = 0;
  for (int u = 0; u < n; ++u) rank += int(counts[u] > c) | int(counts[u] == c && u > t);
  return rank;
}
// The most q tiles a (b, h) may have for writeTileOrder (one int of shared memory each).
constexpr int kTileOrderMaxTiles = 4096;

#if defined(__CUDA_ARCH__)
// The body of `<name>_tile_classes_order`, launched after the tile classes: for each (b, h), its
// q tiles longest kv range first (last - first + 1 of kv_tile_bounds) into q_tile_order, so that
// the ordered grid starts the longest blocks first and ends on the shortest (document masks: q
// tiles of very different kv ranges, in the order of the documents). One block per (b, h) in a
// grid-stride loop.
template <class Variant, int BlockQ>
ATTNC_DEVICE void writeTileOrder(const FwdParams& p) {
  __shared__ int counts[kTileOrderMaxTiles];
  const int qTiles = ceilDiv(p.q_len, BlockQ);
  int* order = const_cast<int*>(p.q_tile_order);
  for (int bh = int(blockIdx.x); bh < p.batch * tileClassHeads<Variant>(p.heads_q);
       bh += int(gridDim.x)) {
    const i64 row0 = i64(bh) * qTiles;
    __syncthreads();  // the previous pair's counts have been read
    for (int t = int(threadIdx.x); t < qTiles; t += int(blockDim.x))
      counts[t] =
          maxOf(p.kv_tile_bounds[2 * (row0 + t) + 1] - p.kv_tile_bounds[2 * (row0 + t)] + 1, 0);
    __syncthreads();
    for (int t = int(threadIdx.x); t < qTiles; t += int(blockDim.x))
      order[row0 + tileOrderRank(counts, qTiles, t)] = t;
  }
}

// With FwdParams: the forward's rows (b, h, q tile of BlockQ) of kv tiles (BlockKV). With
// BwdParams: the dK/dV kernel's rows (b, h, kv tile of BlockKV) of q tiles (BlockQ), or with
// AlongKeys the sm_90a dQ kernel's rows (b, h, q tile of BlockQ from row 0) of kv tiles (BlockKV).
template <class Variant, int BlockQ, int BlockKV, class Params,
          bool AlongKeys = IsForwardParams<Params>::value>
ATTNC_DEVICE void writeTileClasses(const Params& p) {
  static_assert(ParamsTileClasses<Params, AlongKeys>::value, "these parameters have no such rows");
  constexpr int kFixedBlock = AlongKeys ? BlockQ : BlockKV;
  constexpr int kWalkBlock = AlongKeys ? BlockKV : BlockQ;
  using Walk = TileWalk<Variant, kWalkBlock, Params, AlongKeys>;
  constexpr int kWarps = kTileClassThreads / 32;
  const int lane = int(threadIdx.x % 32);
  const int fixedLength = AlongKeys ? p.q_len : p.kv_len;
  const int fixedTiles = ceilDiv(fixedLength, kFixedBlock);
  const int heads = tileClassHeads<Variant>(p.heads_q);
  const i64 rows = tileClassRows(p.batch, heads, fixedLength, kFixedBlock);
  const int words = tileClassWordsOf<AlongKeys>(p);
  int* bounds = const_cast<int*>(tileBoundsOf<AlongKeys>(p));
  u32* classes = const_cast<u32*>(tileClassesOf<AlongKeys>(p));
  for (i64 row = i64(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += i64(gridDim.x) * kWarps) {
    const int fixedTile = int(row % fixedTiles), bh = int(row / fixedTiles);
    const int b = bh / heads, h = bh % heads;
    // The forward's q tiles start where the kernel's do (qTileStart, block_order.h: end-aligned
    // on the ordered grid, where the first row can be negative); the dQ kernel's at multiples of
    // BlockQ.
    constexpr bool kForward = IsForwardParams<Params>::value;
    const int f0 = qTileStart<kForward && VariantOrderedGrid<Variant>::value>(
        fixedTile, fixedLength, kFixedBlock);
    const Walk tiles(p, b, h, maxOf(f0, 0), minOf(f0 + kFixedBlock, fixedLength) - 1);
    int first = tiles.numTiles, last = -1;
    u32* rowClasses = classes + row * words;
    for (int t0 = 0; t0 < tiles.numTiles; t0 += 32) {
      // Each lane classifies its own tile: the boxes differ, so the input scans are per lane
      // (expr::scan_share), a few summary entries each.
      const int t = t0 + lane;
      u32 cls = u32(expr::Tri::False);
      if (t < tiles.numTiles) cls = u32(tiles.tileClass(t));
      const u32 live = __ballot_sync(0xffffffffu, cls != u32(expr::Tri::False));
      if (live != 0u) {
        first = minOf(first, t0 + __ffs(live) - 1);
        last = t0 + 31 - __clz(live);
      }
      // Lanes 0-15 and 16-31 each make one word: 2 bits a tile (t0 is a multiple of 32).
      const u32 word = __reduce_or_sync(0xffffu << (lane & 16), cls << tileClassShift(t));
      const int w = tileClassWord(t);
      if ((lane & 15) == 0 && w < words) rowClasses[w] = word;
      if constexpr (kForward) {
        // The sm_90a forward's consumer warpgroups (64 rows each): a partial tile's class for
        // each group's rows, 8 bits a tile (params.h).
        if (p.kv_group_classes != nullptr) {
          const u32 groups =
              t < tiles.numTiles
                  ? tileGroupBits(tiles, t, expr::Tri(cls), f0, fixedLength, ceilDiv(BlockQ, 64))
                  : 0u;
          const u32 groupWord = __reduce_or_sync(0xfu << (lane & 28), groups << tileGroupShift(t));
          const int gw = tileGroupWord(t);
          if ((lane & 3) == 0 && gw < p.kv_group_words)
            const_cast<u32*>(p.kv_group_classes)[row * p.kv_group_words + gw] = groupWord;
        }
      }
    }
    if (lane == 0) {
      bounds[2 * row] = first;
      bounds[2 * row + 1] = last;
    }
  }
}
#endif

}  // namespace attnc
