// Shared-memory tile layout of the sm_80 kernels: row-major tiles of 16-bit elements whose rows
// are a multiple of 64 elements (128 bytes), with each 16-byte chunk XOR-swizzled by its row.
//
// Why: ldmatrix reads one 16-byte chunk from each of 8 consecutive rows, and cp.async writes
// consecutive chunks of one row. Unswizzled, the 8 rows of an ldmatrix hit the same 4 banks
// (8-way conflict) because the row pitch is a multiple of 128 bytes. Storing logical chunk c of
// row r at physical chunk c ^ (r & 7) spreads both access patterns over all 32 banks. The XOR
// only touches the low 3 bits of the chunk index, so a chunk never leaves its 128-byte segment.
#pragma once

#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

template <int Rows, int Width>
struct SmemTile {
  static_assert(Width % 64 == 0, "swizzled rows are whole 128-byte segments");
  static constexpr int kRows = Rows;
  static constexpr int kWidth = Width;          // elements per row
  static constexpr int kRowBytes = Width * 2;   // 16-bit elements
  static constexpr int kBytes = Rows * kRowBytes;

  // Byte offset of logical 16-byte chunk `chunk` of row `row`.
  ATTNC_HD static u32 chunkOffset(int row, int chunk) {
    return u32(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
  }
};

// Per-lane addressing for ldmatrix.x4 of a 16x16 block (two chunks wide, 16 rows) of a swizzled
// tile. Lane l supplies the row address for matrix l / 8, row l % 8 of that matrix. Operands
// differ in how the four 8x8 matrices tile the block:
//   A (Q, row-major) and V (.trans): matrix bit 0 selects the row half, bit 1 the chunk;
//   B from K (non-transposed):       matrix bit 0 selects the chunk, bit 1 the row half.
// Every block starts at a row that is a multiple of 8, so a lane's row & 7 is fixed (lane & 7)
// and its swizzle reduces to one XOR with a per-lane constant.
template <class Tile>
struct LdmatrixLane {
  u32 rowBytes;  // byte offset of this lane's row inside a 16-row block
  int chunkXor;  // this lane's chunk inside the block, XOR its row's swizzle (lane & 7)

  ATTNC_DEVICE LdmatrixLane(int lane, bool chunkFromBit0) {
    const int matrix = lane >> 3;
    const int rowHalf = chunkFromBit0 ? (matrix >> 1) : (matrix & 1);
    const int chunk = chunkFromBit0 ? (matrix & 1) : (matrix >> 1);
    rowBytes = u32(((lane & 7) + 8 * rowHalf) * Tile::kRowBytes);
    chunkXor = chunk ^ (lane & 7);
  }

  // Shared address this lane passes to ldmatrix for the block at (row0, chunk0); row0 % 8 == 0,
  // chunk0 even.
  // The 128-byte segment part of chunk0 is a compile-time constant in unrolled loops; only its low
  // 3 bits meet the per-lane XOR, so a loop needs at most 4 per-lane offsets in registers.
  ATTNC_DEVICE u32 at(u32 tileBase, int row0, int chunk0) const {
    return tileBase + rowBytes + u32(row0 * Tile::kRowBytes) + u32((chunk0 & ~7) << 4) +
           u32(((chunk0 & 7) ^ chunkXor) << 4);
  }
};

}  // namespace sm80
}  // namespace attnc
