// Global -> shared copies of the sm_80 kernels: 16-byte cp.async with zero fill, and the block-wide
// loader that moves one [rows x head_dim] tile into a swizzled shared tile.
#pragma once

#include "attnc/common/layout.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

// 32-bit shared-window address of a generic pointer into shared memory.
ATTNC_DEVICE u32 smemAddress(const void* p) {
  u32 r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// Copies 16 bytes global -> shared bypassing L1 (.cg: K/V tiles are read once per block). When
// `valid` is false nothing is read and the destination is zero-filled: that is how rows past the
// sequence end and head-dim padding become zeros (never garbage: 0 * NaN would poison P V).
ATTNC_DEVICE void cpAsync16(u32 dst, const void* src, bool valid) {
  const int srcBytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(srcBytes)
               : "memory");
}

ATTNC_DEVICE void cpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
ATTNC_DEVICE void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

ATTNC_DEVICE void blockSync() { __syncthreads(); }
ATTNC_DEVICE void warpSync() { asm volatile("bar.warp.sync 0xffffffff;" ::: "memory"); }

ATTNC_DEVICE void storeShared32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

ATTNC_DEVICE u32x4 loadShared128(u32 addr) {
  u32x4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

ATTNC_DEVICE void storeGlobal128(void* dst, u32x4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

namespace block {

// Starts the copy of rows [0, Rows) x columns [0, LoadCols) of a global tile into the swizzled
// shared tile `Tile`. Columns in [Cols, LoadCols) (the k16 padding of the head dim) and rows at or
// past `validRows` are zero-filled; global memory past row `validRows` or column `Cols` is never
// touched. `gmem` points at element (0, 0); rows are `rowStride` elements apart. Needs 16-byte
// aligned `gmem` and `rowStride % 8 == 0`.
template <class Tile, class Element, int Rows, int Cols, int LoadCols, int Threads>
ATTNC_DEVICE void loadTileAsync(u32 tileBase, const Element* gmem, i64 rowStride, int validRows,
                                int tid) {
  static_assert(Cols % 8 == 0 && LoadCols % 8 == 0 && Cols <= LoadCols && LoadCols <= Tile::kWidth,
                "columns are whole 16-byte chunks inside the tile");
  constexpr int kChunksPerRow = LoadCols / 8;
  constexpr int kValidChunks = Cols / 8;
  constexpr int kChunks = Rows * kChunksPerRow;
  constexpr int kIters = ceilDiv(kChunks, Threads);
  if constexpr (Threads % kChunksPerRow == 0 && (Threads / kChunksPerRow) % 8 == 0) {
    // A thread keeps its chunk and steps down a multiple of 8 rows (so its swizzle never changes):
    // one pointer and one add per iteration, fewer live registers than an address per iteration.
    constexpr int kRowStep = Threads / kChunksPerRow;
    const int row0 = tid / kChunksPerRow, chunk = tid % kChunksPerRow;
    const Element* src = gmem + row0 * rowStride + chunk * 8;
    const i64 step = kRowStep * rowStride;
    const u32 dst = tileBase + Tile::chunkOffset(row0, chunk);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int row = row0 + i * kRowStep;
      if (kChunks % Threads != 0 && row >= Rows) break;
      const bool valid = row < validRows && chunk < kValidChunks;
      cpAsync16(dst + u32(i * kRowStep * Tile::kRowBytes), valid ? src : gmem, valid);
      src += step;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int idx = tid + i * Threads;
      if (kChunks % Threads != 0 && idx >= kChunks) break;
      const int row = idx / kChunksPerRow;
      const int chunk = idx % kChunksPerRow;
      const bool valid = row < validRows && chunk < kValidChunks;
      const Element* src = valid ? gmem + row * rowStride + chunk * 8 : gmem;
      cpAsync16(tileBase + Tile::chunkOffset(row, chunk), src, valid);
    }
  }
}

// loadTileAsync for rows that are not evenly strided (a paged pool, packed heads): row r of the
// tile comes from rowAddress(r), a pointer to its element 0, called only for rows below
// `validRows`. Zero-fill and chunk rules as loadTileAsync's; a zero-filled chunk names `anyRow`
// (any mapped global address: nothing is read from it).
template <class Tile, class Element, int Rows, int Cols, int LoadCols, int Threads, class RowAddress>
ATTNC_DEVICE void loadRowsAsync(u32 tileBase, const RowAddress& rowAddress, int validRows,
                                const Element* anyRow, int tid) {
  static_assert(Cols % 8 == 0 && LoadCols % 8 == 0 && Cols <= LoadCols && LoadCols <= Tile::kWidth,
                "columns are whole 16-byte chunks inside the tile");
  constexpr int kChunksPerRow = LoadCols / 8;
  constexpr int kValidChunks = Cols / 8;
  constexpr int kChunks = Rows * kChunksPerRow;
  constexpr int kIters = ceilDiv(kChunks, Threads);
  // Two copies at a time: the decode kernel issues these while it holds every row's O, and a
  // fully unrolled loop's addresses (a page lookup each) made it spill at head dim 256.
#pragma unroll 2
  for (int i = 0; i < kIters; ++i) {
    const int idx = tid + i * Threads;
    if (kChunks % Threads != 0 && idx >= kChunks) break;
    const int row = idx / kChunksPerRow;
    const int chunk = idx % kChunksPerRow;
    const bool valid = row < validRows && chunk < kValidChunks;
    const Element* src = valid ? rowAddress(row) + chunk * 8 : anyRow;
    cpAsync16(tileBase + Tile::chunkOffset(row, chunk), src, valid);
  }
}

// loadRowsAsync for a rowAddress that the lanes of a warp must call together (it may shuffle):
// every lane calls it on every iteration, for rows at and past `validRows` too (whose address is
// computed but never read).
template <class Tile, class Element, int Rows, int Cols, int LoadCols, int Threads, class RowAddress>
ATTNC_DEVICE void loadRowsAsyncConverged(u32 tileBase, const RowAddress& rowAddress,
                                         int validRows, const Element* anyRow, int tid) {
  static_assert(Cols % 8 == 0 && LoadCols % 8 == 0 && Cols <= LoadCols && LoadCols <= Tile::kWidth,
                "columns are whole 16-byte chunks inside the tile");
  static_assert(Threads % 32 == 0, "whole warps");
  constexpr int kChunksPerRow = LoadCols / 8;
  constexpr int kValidChunks = Cols / 8;
  constexpr int kChunks = Rows * kChunksPerRow;
  constexpr int kIters = ceilDiv(kChunks, Threads);
  if constexpr (Threads % kChunksPerRow == 0 && Rows % (Threads / kChunksPerRow) == 0) {
    // Whole rows an iteration: a thread keeps its chunk and steps its row by kRowStep, so the
    // chunk's column, the valid test's column half and (row step a multiple of 8) the swizzle are
    // fixed, and a copy costs its row's address and the copy itself.
    constexpr int kRowStep = Threads / kChunksPerRow;
    const int chunk = tid % kChunksPerRow, row0 = tid / kChunksPerRow;
    const bool chunkValid = chunk < kValidChunks;
#pragma unroll
    for (int i = 0; i < Rows / kRowStep; ++i) {
      const int row = row0 + i * kRowStep;
      const Element* address = rowAddress(row) + chunk * 8;
      const bool valid = chunkValid && row < validRows;
      cpAsync16(tileBase + Tile::chunkOffset(row, chunk), valid ? address : anyRow, valid);
    }
  } else {
    // Four copies at a time: at two (or one) ptxas held head dim 224's decode to 128 registers
    // and spilled on sm_80.
#pragma unroll 4
    for (int i = 0; i < kIters; ++i) {
      const int idx = tid + i * Threads;
      const int row = idx / kChunksPerRow;
      const int chunk = idx % kChunksPerRow;
      const Element* address = rowAddress(row) + chunk * 8;
      const bool valid = row < validRows && chunk < kValidChunks;
      if (kChunks % Threads == 0 || idx < kChunks)  // (past the tile: no copy, no zero fill)
        cpAsync16(tileBase + Tile::chunkOffset(row, chunk), valid ? address : anyRow, valid);
    }
  }
}

}  // namespace block
}  // namespace sm80
}  // namespace attnc

namespace attnc {
namespace sm80 {

// 4-byte cp.async (through L1: .cg only exists for 16 bytes), zero-filled when !valid. Used for
// per-row statistics (LSE, delta).
ATTNC_DEVICE void cpAsync4(u32 dst, const void* src, bool valid) {
  const int srcBytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(srcBytes)
               : "memory");
}

ATTNC_DEVICE float loadShared32f(u32 addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

ATTNC_DEVICE u32x4 loadGlobal128(const void* src) {
  u32x4 v;
  asm volatile("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src));
  return v;
}

// Fire-and-forget fp32 additions into global memory (the dQ accumulator of the backward). Two
// adjacent floats (8-byte aligned) use one vector reduction where the ISA has it (sm_90).
ATTNC_DEVICE void redAddF32(float* dst, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(dst), "f"(v) : "memory");
}
ATTNC_DEVICE void redAddF32x2(float* dst, float v0, float v1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst), "f"(v0), "f"(v1) : "memory");
#else
  redAddF32(dst, v0);
  redAddF32(dst + 1, v1);
#endif
}

}  // namespace sm80
}  // namespace attnc
