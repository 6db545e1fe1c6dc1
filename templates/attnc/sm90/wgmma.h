// Warpgroup matrix multiply-accumulate (wgmma, sm_90a). Four consecutive warps issue one
// m64nNk16 operation together; B (and A, for WgmmaSS) is read from shared memory through a 64-bit
// matrix descriptor, the fp32 accumulators stay in registers in the m16n8 layout of mma.h per
// warp (warp w of the warpgroup holds rows 16 w .. 16 w + 15), so the sm80 epilogue and softmax
// code applies to them unchanged. The operations run asynchronously: fence before the first one
// (after registers they read were written), commit them as a group, wait for the group before the
// accumulators are read.
//
// Shared tiles are TMA boxes of 64 16-bit elements (128 bytes) per row in the 128-byte swizzle:
// eight rows make a 1024-byte swizzle atom, so tiles start on 1024-byte boundaries and a wider
// operand is split into 64-element column chunks stored one after another.
#pragma once

#include "attnc/common/types.h"
#include "attnc/sm90/wgmma_ops.h"

namespace attnc {
namespace sm90 {

constexpr int kSwizzleRowBytes = 128;   // one row of a 128-byte-swizzled box
constexpr int kSwizzleAtomBytes = 1024;  // 8 rows
constexpr int kChunkElements = 64;       // 16-bit elements per swizzled row

// Matrix descriptor (PTX ISA, "matrix descriptor format"): start address, leading- and
// stride-dimension byte offsets (each >> 4, 14 bits), 128-byte swizzle in bits 62-63.
//
// Built as a tile's low word plus a step's offset: a CTA's shared-memory addresses are below 2^18
// (227 KiB) and 16-byte aligned, so the address field of `tile + offset` is the tile's plus
// offset >> 4, with no carry out of its 14 bits. In a kernel the tile's words are computed once
// per tile and each step adds a constant (one integer add), where masking and shifting each
// step's address took about six instructions per descriptor (equal descriptors:
// HopperForward.DescriptorStepsAddToTheTilesWord).
ATTNC_HD u32 descriptorLow(u32 smemAddr, u32 leadingBytes) {
  return (smemAddr >> 4) | (((leadingBytes >> 4) & 0x3FFF) << 16);
}
ATTNC_HD u32 descriptorHigh(u32 strideBytes) { return ((strideBytes >> 4) & 0x3FFF) | (1u << 30); }
ATTNC_HD u64 matrixDescriptor(u32 smemAddr, u32 leadingBytes, u32 strideBytes) {
  return u64(descriptorLow(smemAddr, leadingBytes)) | (u64(descriptorHigh(strideBytes)) << 32);
}

// A K-major operand (the reduction dimension contiguous, as Q and K are): `rows` rows of
// `chunks` 64-wide column chunks, chunk c at c * rows * 128 bytes. Step k (16 columns) starts in
// chunk k / 4, 32 bytes into its rows; 8-row groups are 1024 bytes apart (the stride offset).
ATTNC_HD u32 kMajorStepBytes(int rows, int k16) {
  return u32((k16 / 4) * rows * kSwizzleRowBytes + (k16 % 4) * 32);
}
// A descriptor from its low word: both operand kinds below step 8-row groups one 1024-byte swizzle
// atom apart (the stride offset).
ATTNC_HD u64 atomStrideDescriptor(u32 low) {
  return u64(low) | (u64(descriptorHigh(kSwizzleAtomBytes)) << 32);
}
ATTNC_HD u64 kMajorDescriptor(u32 tile, int rows, int k16) {
  return atomStrideDescriptor(descriptorLow(tile, 16) + (kMajorStepBytes(rows, k16) >> 4));
}

// An MN-major operand (the output dimension contiguous, as V is for O += P V): the tile's rows are
// the reduction dimension. Step k covers rows 16 k .. 16 k + 15 (two 1024-byte atoms, the stride
// offset); 64-wide chunks along N are rows * 128 bytes apart (the leading offset).
ATTNC_HD u32 mnMajorStepBytes(int k16) { return u32(k16 * 16 * kSwizzleRowBytes); }
ATTNC_HD u64 mnMajorDescriptor(u32 tile, int rows, int k16) {
  return atomStrideDescriptor(descriptorLow(tile, u32(rows * kSwizzleRowBytes)) +
                              (mnMajorStepBytes(k16) >> 4));
}

ATTNC_DEVICE void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
ATTNC_DEVICE void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int Pending>
ATTNC_DEVICE void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

// wgmmaWait<Pending> placed after the computation of `a` and `b`. ptxas schedules a wait_group as
// early as it can: with nothing holding it back, the forward's wait for P V rises above the
// softmax that is meant to overlap it (the SASS has the two waits back to back). A shared-memory
// store of a and b stays ahead of the wait, and their computation ahead of the store; its
// predicate `never` is false at run time (ptxas cannot know it), so nothing is stored.
template <int Pending>
ATTNC_DEVICE void wgmmaWaitAfter(float a, float b, u32 addr, bool never) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n@p st.shared.v2.f32 [%0], {%1, %2};\n"
      "wgmma.wait_group.sync.aligned %4;\n}\n" ::"r"(addr),
      "f"(a), "f"(b), "r"(int(never)), "n"(Pending)
      : "memory");
}

// acc (+)= A B^T over Steps k16 steps, one commit group: A (64 rows) and B (N rows) are K-major
// tiles of 64-column chunks holding aRows and bRows rows each (kMajorDescriptor); the first step
// overwrites acc.
template <class Element, int N, int Steps>
ATTNC_DEVICE void gemmKMajor(float (&acc)[N / 2], u32 aTile, int aRows, u32 bTile, int bRows) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk)
    WgmmaSS<Element, N>::template run<0, 0>(acc, kMajorDescriptor(aTile, aRows, kk),
                                            kMajorDescriptor(bTile, bRows, kk), kk > 0);
  wgmmaCommit();
}

// acc += A B over Steps k16 steps, one commit group: A in registers (one m16k16 fragment per step,
// as packP makes them from accumulators), B an MN-major tile of bRows rows per 64-column chunk
// (mnMajorDescriptor), the reduction dimension along its rows.
template <class Element, int N, int Steps>
ATTNC_DEVICE void gemmRegsMNMajor(float (&acc)[N / 2], const u32 (&a)[Steps][4], u32 bTile,
                                  int bRows) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk)
    WgmmaRS<Element, N>::template run<1>(acc, a[kk], mnMajorDescriptor(bTile, bRows, kk), 1);
  wgmmaCommit();
}

// acc = A B^T over Steps k16 steps, one commit group: A in registers (loadKMajorFragments), B a
// K-major tile of 64-column chunks of bRows rows (kMajorDescriptor); the first step overwrites acc.
template <class Element, int N, int Steps>
ATTNC_DEVICE void gemmRegsKMajor(float (&acc)[N / 2], const u32 (&a)[Steps][4], u32 bTile,
                                 int bRows) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk)
    WgmmaRS<Element, N>::template run<0>(acc, a[kk], kMajorDescriptor(bTile, bRows, kk), kk > 0);
  wgmmaCommit();
}

// The byte offset, in a K-major 128-byte-swizzled tile of `rows` rows (kMajorDescriptor's layout),
// of the 16 bytes lane `lane` of warp `warp` gives ldmatrix.x4 for k16 step `kk`: row 16 warp +
// lane % 16, columns 16 kk + 8 (lane / 16) .. + 7, i.e. the 16-byte chunk 2 (kk % 4) + lane / 16 of
// the row's 64-column chunk kk / 4, XOR-swizzled by the row's index in its 8-row atom. Matrices 0-3
// of the x4 load are then rows 0-7 / 8-15 at columns 0-7, then at 8-15: the m16k16 A fragment.
ATTNC_HD constexpr u32 kMajorFragmentOffset(int rows, int warp, int lane, int kk) {
  const int row = 16 * warp + (lane & 15);
  const int chunk16 = 2 * (kk % 4) + (lane >> 4);
  return u32((kk / 4) * rows * kSwizzleRowBytes + row * kSwizzleRowBytes +
             ((chunk16 ^ (row & 7)) << 4));
}

// This warp's A fragments (m16k16, the layout WgmmaRS takes: rows 16 warp .. 16 warp + 15) of a
// K-major tile of `rows` rows, Steps k16 steps from column 0: one ldmatrix.x4 per step.
template <int Steps>
ATTNC_DEVICE void loadKMajorFragments(u32 (&a)[Steps][4], u32 tile, int rows, int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk) {
    const u32 at = tile + kMajorFragmentOffset(rows, warp, lane, kk);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                 : "r"(at));
  }
}

// Pins accumulator registers at this point of the program: the compiler may not move their reads
// or writes across it (it cannot see that wgmma writes them asynchronously).
template <int N>
ATTNC_DEVICE void fenceRegisters(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// An accumulator array [A][B][C] as the flat array the GEMMs and fenceRegisters take.
template <int A, int B, int C>
ATTNC_DEVICE float (&flat(float (&x)[A][B][C]))[A * B * C] {
  return reinterpret_cast<float(&)[A * B * C]>(x);
}

}  // namespace sm90
}  // namespace attnc
