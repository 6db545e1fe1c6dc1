// Generic warp GEMMs of the backward kernels: acc[MTiles x NTiles n8-tiles] += A B over KSteps k16
// steps, with A and B fragments coming from any of the places the backward keeps them. The
// forward's fixed-role GEMMs (mma.h: gemmQK, gemmPV) are two special cases; the backward needs
// every combination of transposed and plain operands (S^T = K Q^T, dV += P^T dO,
// dP^T = V dO^T, dK += dS^T Q, dQ += dS K), so the operand source is a small policy object
// instead.
//
// Sources (tiles are swizzled SmemTiles, see layout.h; fragment layouts in mma.h):
//   SmemA<Tile>      A (m x k) stored row-major as [m][k]: ldmatrix.x4
//   SmemAT<Tile>     A (m x k) stored as [k][m] (a transposed tile): ldmatrix.x4.trans
//   RegsA<...>       A already packed in registers (e.g. P or dS straight from accumulators)
//   SmemB<Tile>      B (k x n) stored as [n][k] (a K row is a column of B): ldmatrix.x4
//   SmemBT<Tile>     B (k x n) stored as [k][n] (a V row is a row of B):     ldmatrix.x4.trans
// Each B load covers two adjacent n8 tiles, so NTiles is even; callers pad head dims to 16.
#pragma once

#include "attnc/common/layout.h"
#include "attnc/common/mma.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {
namespace warp {

template <class Tile>
struct SmemA {
  u32 base;
  LdmatrixLane<Tile> lane;
  int m0, kChunk0;  // first row (multiple of 16) and first 8-column chunk (even) of the operand
  ATTNC_DEVICE SmemA(u32 tile, int laneId, int row0, int chunk0)
      : base(tile), lane(laneId, false), m0(row0), kChunk0(chunk0) {}
  ATTNC_DEVICE void load(u32 (&r)[4], int mi, int kk) const {
    ldmatrixX4(r, lane.at(base, m0 + 16 * mi, kChunk0 + 2 * kk));
  }
};

// Matrix j of the x4 load: bit 0 picks the m half (chunk), bit 1 the k half (rows); with .trans,
// lane (g, t) receives stored[k = 2t, 2t+1][m = g], which is A's a0..a3 layout.
template <class Tile>
struct SmemAT {
  u32 base;
  LdmatrixLane<Tile> lane;
  int k0, mChunk0;  // first stored row (k, multiple of 16) and first stored chunk (m, even)
  ATTNC_DEVICE SmemAT(u32 tile, int laneId, int row0, int chunk0)
      : base(tile), lane(laneId, true), k0(row0), mChunk0(chunk0) {}
  ATTNC_DEVICE void load(u32 (&r)[4], int mi, int kk) const {
    ldmatrixX4Trans(r, lane.at(base, k0 + 16 * kk, mChunk0 + 2 * mi));
  }
};

template <int MTiles, int KSteps>
struct RegsA {
  const u32 (&regs)[MTiles][KSteps][4];
  ATTNC_DEVICE void load(u32 (&r)[4], int mi, int kk) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = regs[mi][kk][i];
  }
};

template <class Tile>
struct SmemB {
  u32 base;
  LdmatrixLane<Tile> lane;
  int n0, kChunk0;  // first stored row (n, multiple of 16) and first chunk (k, even)
  ATTNC_DEVICE SmemB(u32 tile, int laneId, int row0, int chunk0)
      : base(tile), lane(laneId, true), n0(row0), kChunk0(chunk0) {}
  // b0, b1 of n-tile 2 np, then b0, b1 of n-tile 2 np + 1.
  ATTNC_DEVICE void load(u32 (&r)[4], int np, int kk) const {
    ldmatrixX4(r, lane.at(base, n0 + 16 * np, kChunk0 + 2 * kk));
  }
};

template <class Tile>
struct SmemBT {
  u32 base;
  LdmatrixLane<Tile> lane;
  int k0, nChunk0;  // first stored row (k, multiple of 16) and first chunk (n, even)
  ATTNC_DEVICE SmemBT(u32 tile, int laneId, int row0, int chunk0)
      : base(tile), lane(laneId, false), k0(row0), nChunk0(chunk0) {}
  ATTNC_DEVICE void load(u32 (&r)[4], int np, int kk) const {
    ldmatrixX4Trans(r, lane.at(base, k0 + 16 * kk, nChunk0 + 2 * np));
  }
};

template <int MTiles, int NTiles>
ATTNC_DEVICE void zero(float (&acc)[MTiles][NTiles][4]) {
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;
}

// acc += A B. KUnroll < KSteps limits how far ptxas may hoist fragment loads (registers).
template <class Element, int KSteps, int KUnroll = KSteps, int MTiles, int NTiles, class ASource,
          class BSource>
ATTNC_DEVICE void gemm(float (&acc)[MTiles][NTiles][4], const ASource& a, const BSource& b) {
  static_assert(NTiles % 2 == 0, "B is read two n8-tiles at a time");
#pragma unroll KUnroll
  for (int kk = 0; kk < KSteps; ++kk) {
    u32 af[MTiles][4];
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi) a.load(af[mi], mi, kk);
#pragma unroll
    for (int np = 0; np < NTiles / 2; ++np) {
      u32 bf[4];
      b.load(bf, np, kk);
#pragma unroll
      for (int mi = 0; mi < MTiles; ++mi) {
        MmaOp<Element>::run(acc[mi][2 * np], af[mi], bf[0], bf[1]);
        MmaOp<Element>::run(acc[mi][2 * np + 1], af[mi], bf[2], bf[3]);
      }
    }
  }
}

}  // namespace warp
}  // namespace sm80
}  // namespace attnc
