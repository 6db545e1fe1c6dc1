// The two CUDA-core kernels around the backward's GEMM kernels, which the sm_90a backward launches
// too: backwardPreprocess (delta = rowsum(dO * O), dq_accum zeroed) before them, and
// backwardConvertDQ (dq = Element(scale * dq_accum)) after a dK/dV kernel that reduced dQ into
// dq_accum. Both see dq_accum through a layout class: RowMajorDqLayout (below) for the sm80 dK/dV
// kernel, sm90/bwd_config.h TiledDqLayout for the sm_90a one.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm80 {

namespace bwd {

template <class Element>
ATTNC_DEVICE void unpack2(u32 w, float& lo, float& hi) {
  lo = Convert<Element>::toFloat(Element{u16(w & 0xffffu)});
  hi = Convert<Element>::toFloat(Element{u16(w >> 16)});
}

}  // namespace bwd

// dq_accum as the sm80 dK/dV kernel writes it: rows of head_dim floats, [batch][heads_q][q_len].
// The preprocess and convert kernels see dq_accum through such a layout class (the sm_90a dK/dV
// kernel has its own, sm90/bwd_config.h): block() is the region of the rows [q0, q0 + rows) of one
// (batch, head), blockFloats() its size, chunk() the 8 consecutive floats of one row's columns
// 8 c .. 8 c + 7.
template <int HeadDim>
struct RowMajorDqLayout {
  // block() takes any first row (a layout of whole tiles: their rows)
  static constexpr int kBlockRows = 0;
  ATTNC_DEVICE static float* block(const BwdParams& p, int b, int h, int q0) {
    return p.dq_accum + ((i64(b) * p.heads_q + h) * p.q_len + q0) * HeadDim;
  }
  ATTNC_DEVICE static int blockFloats(int rows) { return rows * HeadDim; }
  ATTNC_DEVICE static const float* chunk(const float* block, int row, int c) {
    return block + row * HeadDim + 8 * c;
  }
};

// delta[b, h, q] = sum_d dO[q, d] O[q, d] in fp32, and dq_accum rows zeroed (when not null).
// Grid (ceil(q_len / kPreprocessRows), heads_q, batch), block kThreads, no shared memory.
template <class Config, class Variant, class DqLayout = RowMajorDqLayout<Config::kHeadDim>>
ATTNC_DEVICE void backwardPreprocess(const BwdParams& p, unsigned char*) {
  using Element = typename Config::Element;
  constexpr int kRows = Config::kPreprocessRows;
  static_assert(DqLayout::kBlockRows == 0 || DqLayout::kBlockRows == kRows,
                "preprocess/convert blocks are the dq_accum layout's tiles");
  constexpr int kChunks = Config::kHeadDimV / 8;  // 16-byte chunks per row
  constexpr int kLanes = kChunks > 16  ? 32
                         : kChunks > 8 ? 16
                         : kChunks > 4 ? 8
                         : kChunks > 2 ? 4
                         : kChunks > 1 ? 2
                                       : 1;
  constexpr int kRowsPerWarp = 32 / kLanes;
  constexpr int kRowsPerStep = kRowsPerWarp * Config::kWarps;

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 rowBase = (i64(b) * p.heads_q + h) * p.q_len;
  const Element* oG = static_cast<const Element*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
  const Element* doG = static_cast<const Element*>(p.do_) + b * p.do_stride_b + h * p.do_stride_h;

  // Every lane runs every step (the shuffles need the whole warp); loads are predicated.
#pragma unroll 1
  for (int step = 0; step < ceilDiv(kRows, kRowsPerStep); ++step) {
    const int row = step * kRowsPerStep + warp * kRowsPerWarp + lane / kLanes;
    const int q = q0 + row;
    const bool valid = row < kRows && q < p.q_len;
    float acc = 0.0f;
    if (valid) {
      for (int c = lane % kLanes; c < kChunks; c += kLanes) {
        const u32x4 o = loadGlobal128(oG + q * p.o_stride_s + 8 * c);
        const u32x4 d = loadGlobal128(doG + q * p.do_stride_s + 8 * c);
        const u32 ow[4] = {o.x, o.y, o.z, o.w}, dw[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float o0, o1, d0, d1;
          bwd::unpack2<Element>(ow[i], o0, o1);
          bwd::unpack2<Element>(dw[i], d0, d1);
          acc += o0 * d0 + o1 * d1;
        }
      }
    }
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset /= 2) acc += shuffleXor(acc, offset);
    if (valid && lane % kLanes == 0) p.delta[rowBase + q] = acc;
  }

  if (p.dq_accum != nullptr) {
    float* dqBlock = DqLayout::block(p, b, h, q0);
    const int vecs = DqLayout::blockFloats(minOf(kRows, p.q_len - q0)) / 4;  // float4s
    for (int idx = tid; idx < vecs; idx += Config::kThreads)
      storeGlobal128(dqBlock + 4 * idx, u32x4{0u, 0u, 0u, 0u});
  }
}

// dq[b, h, q, :] = Element(scale * dq_accum[b, h, q, :]).
// Grid (ceil(q_len / kPreprocessRows), heads_q, batch), block kThreads, no shared memory.
template <class Config, class Variant, class DqLayout = RowMajorDqLayout<Config::kHeadDim>>
ATTNC_DEVICE void backwardConvertDQ(const BwdParams& p, unsigned char*) {
  using Element = typename Config::Element;
  constexpr int kRows = Config::kPreprocessRows;
  static_assert(DqLayout::kBlockRows == 0 || DqLayout::kBlockRows == kRows,
                "preprocess/convert blocks are the dq_accum layout's tiles");
  constexpr int kChunks = Config::kHeadDim / 8;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows;
  const int rows = minOf(kRows, p.q_len - q0);
  const float* src = DqLayout::block(p, b, h, q0);
  Element* dst =
      static_cast<Element*>(p.dq) + b * p.dq_stride_b + h * p.dq_stride_h + q0 * p.dq_stride_s;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += Config::kThreads) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    const float* s = DqLayout::chunk(src, row, chunk);
    const u32x4 a = loadGlobal128(s), c = loadGlobal128(s + 4);
    const auto f = [&](u32 w) { return __builtin_bit_cast(float, w) * p.scale; };
    const u32x4 out{
        Convert<Element>::pack2(f(a.x), f(a.y)), Convert<Element>::pack2(f(a.z), f(a.w)),
        Convert<Element>::pack2(f(c.x), f(c.y)), Convert<Element>::pack2(f(c.z), f(c.w))};
    storeGlobal128(dst + row * p.dq_stride_s + 8 * chunk, out);
  }
}

}  // namespace sm80
}  // namespace attnc
