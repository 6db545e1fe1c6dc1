// Tensor-core operations of the sm_80 family, per warp: ldmatrix loads of swizzled shared tiles
// into mma fragments, mma.sync.m16n8k16 (bf16/f16 in, f32 accumulate), and the two warp GEMMs of
// attention: S = Q K^T and O += P V with P taken straight from the S accumulators.
//
// Fragment layout of m16n8k16 (g = lane / 4, t = lane % 4; two 16-bit values per 32-bit register,
// the lower column in the low half):
//   A 16x16 (row):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B 16x8  (col):  b0 = (k 2t..2t+1, n g)                b1 = (k 2t+8.., n g)
//   C 16x8  (f32):  c0, c1 = (g, 2t), (g, 2t+1)           c2, c3 = (g+8, 2t), (g+8, 2t+1)
// So each row of a C tile lives in the 4 lanes of a quad, which is why row reductions need only
// two shuffles, and C columns 2t, 2t+1 of two adjacent n-tiles are exactly A's a0/a2 (and a1/a3):
// the accumulators of S, packed to 16 bits, are the A operand of P V without a trip to shared
// memory.
#pragma once

#include "attnc/common/layout.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

template <class Element>
struct MmaOp;

template <>
struct MmaOp<bf16> {
  ATTNC_DEVICE static void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct MmaOp<half> {
  ATTNC_DEVICE static void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

namespace warp {

ATTNC_DEVICE void ldmatrixX4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

ATTNC_DEVICE void ldmatrixX4Trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Only lanes 0..15 supply addresses (matrices 0 and 1).
ATTNC_DEVICE void ldmatrixX2Trans(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// A fragments of MTiles stacked 16-row blocks of Q (rows row0.., head-dim step kStep) from shared.
template <class QTile, int MTiles>
ATTNC_DEVICE void loadA(u32 (&a)[MTiles][4], u32 qTile, const LdmatrixLane<QTile>& lane, int row0,
                        int kStep) {
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi) ldmatrixX4(a[mi], lane.at(qTile, row0 + 16 * mi, 2 * kStep));
}

// All A fragments of the warp's Q rows, for kernels that keep Q in registers for the whole loop.
template <class QTile, int MTiles, int KSteps>
ATTNC_DEVICE void loadQ(u32 (&q)[MTiles][KSteps][4], u32 qTile, const LdmatrixLane<QTile>& lane,
                        int row0) {
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) {
#pragma unroll
    for (int mi = 0; mi < MTiles; ++mi)
      ldmatrixX4(q[mi][kk], lane.at(qTile, row0 + 16 * mi, 2 * kk));
  }
}

// S[MTiles x NTiles n8-tiles] = Q K^T over KSteps k16 steps of the head dim. Q comes from
// registers (`qRegs`, when QInRegs) or from the shared Q tile; K is the [BlockKV x head_dim]
// shared tile, read as B with non-transposed ldmatrix (a K row is a B column).
template <class Element, bool QInRegs, int MTiles, int NTiles, int KSteps, int QM, int QK,
          class QTile, class KTile>
ATTNC_DEVICE void gemmQK(float (&s)[MTiles][NTiles][4], const u32 (&qRegs)[QM][QK][4], u32 qTile,
                         const LdmatrixLane<QTile>& qLane, int qRow0, u32 kTile,
                         const LdmatrixLane<KTile>& kLane) {
  static_assert(NTiles % 2 == 0, "K is read two n8-tiles at a time");
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < NTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.0f;

#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) {
    u32 a[MTiles][4];
    if constexpr (QInRegs) {
#pragma unroll
      for (int mi = 0; mi < MTiles; ++mi)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[mi][r] = qRegs[mi][kk][r];
    } else {
      loadA<QTile, MTiles>(a, qTile, qLane, qRow0, kk);
    }
#pragma unroll
    for (int np = 0; np < NTiles / 2; ++np) {
      u32 b[4];  // b0, b1 of n-tile 2np, then b0, b1 of n-tile 2np + 1
      ldmatrixX4(b, kLane.at(kTile, 16 * np, 2 * kk));
#pragma unroll
      for (int mi = 0; mi < MTiles; ++mi) {
        MmaOp<Element>::run(s[mi][2 * np], a[mi], b[0], b[1]);
        MmaOp<Element>::run(s[mi][2 * np + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// Packs the probabilities of S's accumulators into A fragments for P V: k16 step kk of P is
// n-tiles 2kk and 2kk+1 of S.
template <class Element, int MTiles, int NTiles>
ATTNC_DEVICE void packP(u32 (&pA)[MTiles][NTiles / 2][4], const float (&s)[MTiles][NTiles][4]) {
#pragma unroll
  for (int mi = 0; mi < MTiles; ++mi) {
#pragma unroll
    for (int kk = 0; kk < NTiles / 2; ++kk) {
      pA[mi][kk][0] = Convert<Element>::pack2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
      pA[mi][kk][1] = Convert<Element>::pack2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
      pA[mi][kk][2] = Convert<Element>::pack2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
      pA[mi][kk][3] = Convert<Element>::pack2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
    }
  }
}

// O[MTiles x NvTiles n8-tiles] += P V over KSteps k16 steps of the kv tile. V is the [BlockKV x
// head_dim_v] shared tile, read as B with ldmatrix.trans (a V row is a B row). An odd NvTiles
// (head_dim_v % 16 == 8) ends with an x2 load so no column past head_dim_v is ever used.
template <class Element, int MTiles, int NvTiles, int KSteps, class VTile>
ATTNC_DEVICE void gemmPV(float (&o)[MTiles][NvTiles][4], const u32 (&pA)[MTiles][KSteps][4],
                         u32 vTile, const LdmatrixLane<VTile>& vLane) {
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) {
#pragma unroll
    for (int np = 0; np < NvTiles / 2; ++np) {
      u32 b[4];
      ldmatrixX4Trans(b, vLane.at(vTile, 16 * kk, 2 * np));
#pragma unroll
      for (int mi = 0; mi < MTiles; ++mi) {
        MmaOp<Element>::run(o[mi][2 * np], pA[mi][kk], b[0], b[1]);
        MmaOp<Element>::run(o[mi][2 * np + 1], pA[mi][kk], b[2], b[3]);
      }
    }
    if constexpr (NvTiles % 2 == 1) {
      u32 b[2];
      ldmatrixX2Trans(b, vLane.at(vTile, 16 * kk, NvTiles - 1));
#pragma unroll
      for (int mi = 0; mi < MTiles; ++mi)
        MmaOp<Element>::run(o[mi][NvTiles - 1], pA[mi][kk], b[0], b[1]);
    }
  }
}

}  // namespace warp
}  // namespace sm80
}  // namespace attnc
