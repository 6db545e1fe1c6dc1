// The block order of the sm_90a forward and dK/dV kernels, whose tiles differ in length under a
// mask (causal: a q tile's kv range grows with its index; a kv tile's q range shrinks). Both take
// orderedGrid: the forward over q tiles and (head, batch) pairs, the dK/dV kernel over kv tiles and
// (kv head, batch) pairs (sm90/backward.h kvBlockCoord).
//
// The hardware starts blocks roughly in the order of their linear index (x fastest). A (tiles,
// heads, batch) grid runs each head's tiles longest to shortest, one head after another, so it
// ends on a mix of long and short tiles and SMs fall idle while the last long ones finish
// (docs/design/sm80-and-common.md). Instead the launch makes groups of about
// kOrderGroupBlocks blocks out of its (head, batch) pairs; the groups run one after another, and
// inside a group the tile rank is the slower index, so the grid ends on the shortest tiles of its
// last group. A group is small enough that the blocks running at once share each head's K/V in
// L2 (at N = 4K, 8 heads of 32 tiles).
//
// The grid is (pairs per group, tiles, groups): the rank is blockIdx.y, which the compiler can
// re-read at any time, so no register holds it through the kernel (a rank computed from a linear
// index does, and spills in six examples).
#pragma once

#include "attnc/common/types.h"

namespace attnc {

// About two waves of an H100/H200 (132 SMs, one block each).
constexpr int kOrderGroupBlocks = 256;

struct OrderedGrid {
  unsigned x, y, z;  // (head, batch) pairs per group, tiles, groups
};

// The launch's grid for `tiles` tiles of each of `pairs` (head, batch) pairs.
ATTNC_HD OrderedGrid orderedGrid(int tiles, int pairs) {
  const int perGroup = minOf(pairs, ceilDiv(kOrderGroupBlocks, tiles));
  return {unsigned(perGroup), unsigned(tiles), unsigned(ceilDiv(pairs, perGroup))};
}

// Whether a Variant's forward takes the ordered grid (its `kOrderedGrid`, which CodeGen emits
// together with the launch's KernelMetadata::orderedGrid); false for a Variant without the member.
ATTNC_VARIANT_FLAG(VariantOrderedGrid, kOrderedGrid);

// Whether a Variant's sm_90a dK/dV kernel takes the ordered grid over its kv tiles (its
// `kKvOrderedGrid`, emitted with BackwardMetadata::kvOrderedGrid); false without the member.
ATTNC_VARIANT_FLAG(VariantKvOrderedGrid, kKvOrderedGrid);

// The first row of q tile `tile` (0 .. ceilDiv(qLen, block) - 1) of the sm_90a forward. On the
// ordered grid (masked specs) the tiles end at the sequence's end: where `block` does not divide
// q_len, the partial tile is the first one, whose first row is negative (rows below 0 are padding
// like rows past q_len: Q's copy fills them with zeros and nothing of them is stored). Under a
// causal mask the first tile has the fewest keys, so its idle rows cost little; a partial last
// tile runs every kv tile (hd64's 192-row tiles: 4096 = 21 x 192 + 64). Its tile classes
// (tile_classes.h) use the same rows. The shift is rounded down to a multiple of 16, so that every
// tile starts at a multiple of 16 as plain tiles do (the dropout mapping, philox.h, gives rows q
// and q + 8 of a 16-row block one Philox call; end-aligned tiles without the rounding fail the
// dropout tests), and the last tile may still reach up to 15 rows past q_len.
template <bool EndAligned>
ATTNC_HD constexpr int qTileStart(int tile, int qLen, int block) {
  return tile * block - (EndAligned ? (ceilDiv(qLen, block) * block - qLen) & ~15 : 0);
}

struct BlockCoord {
  int rank;  // 0 for the tile to start first (the longest), tiles - 1 for the last
  int h, b;
  bool live;  // false for the padding blocks of a smaller last group
};

// Block (x, y, z) of an orderedGrid over `heads` x batch pairs.
ATTNC_HD BlockCoord orderedBlock(unsigned x, unsigned y, unsigned z, unsigned gridX, int heads,
                                 int batch) {
  const int pair = int(z * gridX + x);
  return {int(y), pair % heads, pair / heads, pair < heads * batch};
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// A (tiles, heads, batch) grid's block, rank 0 first.
ATTNC_DEVICE BlockCoord plainBlock() {
  return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), true};
}

ATTNC_DEVICE BlockCoord orderedBlock(int heads, int batch) {
  return orderedBlock(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, heads, batch);
}

// The same from fresh (volatile) reads of the special registers, for a kernel's epilogue: a
// (head, batch) computed at the start would otherwise stay in registers through the main loop
// (causal_hd64's sm_90a forward spills one), where plain blockIdx reads are re-issued at will.
ATTNC_DEVICE BlockCoord orderedBlockAgain(int heads, int batch) {
  unsigned x, y, z, nx;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
  return orderedBlock(x, y, z, nx, heads, batch);
}
#endif

}  // namespace attnc
