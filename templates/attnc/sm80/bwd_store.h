// How the sm80 backward kernels write their fp32 accumulators (dK, dV, dQ): staged as Elements in
// a swizzled shared tile, then copied to global memory in whole 16-byte chunks.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {
namespace bwd {

// Stages a warp's accumulator fragment [MTiles x NTiles n8 tiles] (times `factor`) as Elements
// into rows row0.., n8 tile (chunk) chunk0.. of a swizzled tile.
template <class Tile, class Element, int MTiles, int NTiles>
ATTNC_DEVICE void storeFragment(u32 tile, const float (&acc)[MTiles][NTiles][4], float factor,
                                int row0, int chunk0, int lane) {
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * mi + 8 * r + (lane >> 2);
#pragma unroll
      for (int ni = 0; ni < NTiles; ++ni)
        storeShared32(tile + Tile::chunkOffset(row, chunk0 + ni) + 4 * (lane & 3),
                      Convert<Element>::pack2(acc[mi][ni][2 * r] * factor,
                                              acc[mi][ni][2 * r + 1] * factor));
    }
}

// Copies rows [0, rows) x columns [0, Cols) of a swizzled tile to global memory, 16 bytes at
// a time.
template <class Tile, class Element, int Rows, int Cols, int Threads>
ATTNC_DEVICE void storeTile(Element* gmem, i64 rowStride, u32 tile, int rows, int tid) {
  constexpr int kChunks = Cols / 8;
#pragma unroll 2
  for (int idx = tid; idx < Rows * kChunks; idx += Threads) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    if (row < rows)
      storeGlobal128(gmem + row * rowStride + chunk * 8,
                     loadShared128(tile + Tile::chunkOffset(row, chunk)));
  }
}

}  // namespace bwd
}  // namespace sm80
}  // namespace attnc
