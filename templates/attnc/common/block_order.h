// Which tile of which (head, batch) a block of a (tiles, heads, batch) grid computes, for kernels
// whose tiles differ in length under a mask (causal: a q tile's kv range grows with its index).
// The hardware starts blocks roughly in the order of their linear index (x fastest). Taking
// (tile, head, batch) = (x, y, z) runs every head's tiles longest to shortest one head after
// another, so the grid ends on a mix of long and short tiles and SMs fall idle while the last
// long ones finish (ncu, hd256 causal N = 4K: SMs idle 12% of the kernel). Instead the (head,
// batch) pairs form groups of about kOrderGroupBlocks blocks; the groups run one after another,
// and inside a group the tile rank is the slowest index, so the grid ends on the shortest tiles of
// its last group. A group is small enough that the blocks running at once share each head's K/V
// in L2 (about a dozen blocks per head at N = 4K).
#pragma once

#include "attnc/common/types.h"

namespace attnc {

// About two waves of an H100/H200 (132 SMs, one block each).
constexpr int kOrderGroupBlocks = 256;

struct BlockCoord {
  int rank;  // 0 for the block to start first (the longest tile), gridDim.x - 1 for the last
  int h, b;  // blockIdx.y's and blockIdx.z's dimension
};

// Pure index arithmetic over the grid's shape, so the host tests can check it is a bijection.
ATTNC_HD BlockCoord orderedBlock(int linear, int tiles, int heads, int batch) {
  const int pairs = heads * batch;
  const int perGroup = minOf(pairs, ceilDiv(kOrderGroupBlocks, tiles));
  const int group = linear / (perGroup * tiles);
  const int within = linear - group * perGroup * tiles;
  const int groupPairs = minOf(perGroup, pairs - group * perGroup);  // the last group may be smaller
  const int pair = group * perGroup + within % groupPairs;
  return {within / groupPairs, pair % heads, pair / heads};
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
ATTNC_DEVICE BlockCoord orderedBlock() {
  const int linear = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  return orderedBlock(linear, int(gridDim.x), int(gridDim.y), int(gridDim.z));
}

// The same coordinates from fresh (volatile) reads of the block's special registers. A kernel
// calls this after its main loop where it needs them again, so they need not stay in registers
// through the loop: plain blockIdx reads the compiler re-issues at will, but a computed (head,
// batch) it would keep, and one register more made head_dim_v's sm_90a forward spill.
ATTNC_DEVICE BlockCoord orderedBlockAgain() {
  unsigned x, y, z, nx, ny, nz;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
  asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(ny));
  asm volatile("mov.u32 %0, %%nctaid.z;" : "=r"(nz));
  return orderedBlock(int(x + nx * (y + ny * z)), int(nx), int(ny), int(nz));
}
#endif

}  // namespace attnc
