// The sm_80-family FlashAttention-2 backward (recomputation, exact): four kernel bodies that
// generated code wraps in extern "C" __global__ entry points.
//   backwardPreprocess  delta = rowsum(dO * O) (fp32); zeroes dq_accum when it is not null
//   backwardKV          one block per (kv tile, kv head, batch): dK, dV for its keys, summed in
//                       registers over every q tile of every query head of its GQA group; with
//                       WriteDQ, also dQ += dS K into dq_accum with fp32 reductions
//   backwardConvertDQ   dq = Element(scale * dq_accum)
//   backwardQ           deterministic dQ: one block per (q tile, q head, batch), no atomics
// Launch geometry and the dQ choice: docs/templates.md ("Backward").
//
// backwardKV works in the transposed frame: its warps own kv rows, so S^T = K Q^T, P^T and dP^T =
// V dO^T sit in accumulators with kv as the row; P^T (after dropout) and dS^T go through shared
// memory once, and then serve as plain A operands of dV += P^T dO and dK += dS^T Q, and as the
// transposed A operand (ldmatrix.trans) of dQ = dS K. The probabilities are recomputed exactly as
// the forward scores them: x = s * scale (or score(s * scale) with a hook), P = 2^(x c - LSE log2 e)
// with c = log2 e (hook) or scale * log2 e (no hook), P = 0 where masked or where LSE = -inf.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/epilogue.h"
#include "attnc/common/expr.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/layout.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm80/bwd_config.h"

namespace attnc {
namespace sm80 {

namespace bwd {

// log2-domain LSE: exp2(x c - lse2) is the probability; a row with LSE = -inf (nothing unmasked)
// gets +inf, so every probability of it is exp2(-inf) = 0 instead of NaN.
ATTNC_DEVICE float lseLog2(float lse) { return lse == -kInfinity ? kInfinity : lse * kLog2e; }

// The dropout decision of one element (philox.h): true = kept. One Philox call per element:
// the sm80 kernels' transposed fragments hold no whole group (sm90/backward.h shares calls).
template <int Rounds>
ATTNC_DEVICE bool dropoutKeep(const BwdParams& p, u32 batchHead, u32 threshold, int q, int k) {
  return dropoutKept<Rounds>(p.dropout_keys, p.dropout_offset, batchHead, threshold, u32(q),
                             u32(k));
}

// x becomes score(x scale) at positions q, k (ints or expr::Pos), and the result is
// d score / d (x scale).
template <class Variant, class Q>
ATTNC_DEVICE float hookWithGrad(const BwdParams& p, float& x, int b, int h, Q q, Q k) {
  // The raw score and the scale apart (expr::Scaled), as the sm_90a forward gives them: the
  // hooks' first add, multiply or division takes the scale in the same instruction, and the
  // derivative's identical steps are shared with the hook's.
  const expr::Scaled scaled{x, p.scale};
  x = Variant::score(p, scaled, b, h, q, k);
  return Variant::score_grad(p, scaled, b, h, q, k);
}

// The score hook recomputed on a raw score x = q.k (its indices clamped into the sequences, as
// the forward sees them): x becomes score(x scale), and the result is d score / d (x scale), 1
// without a hook.
template <class Variant>
ATTNC_DEVICE float scoreWithGrad(const BwdParams& p, float& x, int b, int h, int q, int k) {
  if constexpr (Variant::kHasScore) {
    return hookWithGrad<Variant>(p, x, b, h, minOf(q, p.q_len - 1), minOf(k, p.kv_len - 1));
  } else {
    return 1.0f;
  }
}

// The same on unclamped positions (expr::Pos: a per-lane base and the element's constant offset),
// for a Variant whose kBackwardPositions says its hook and derivative stay finite past the ends.
template <class Variant>
ATTNC_DEVICE float scoreWithGrad(const BwdParams& p, float& x, int b, int h, expr::Pos q,
                                 expr::Pos k) {
  return hookWithGrad<Variant>(p, x, b, h, q, k);
}

// Whether a Variant's backward may take unclamped positions (its `kBackwardPositions`; false
// without the member).
ATTNC_VARIANT_FLAG(BackwardPositions, kBackwardPositions);

template <class Element>
ATTNC_DEVICE void unpack2(u32 w, float& lo, float& hi) {
  lo = Convert<Element>::toFloat(Element{u16(w & 0xffffu)});
  hi = Convert<Element>::toFloat(Element{u16(w >> 16)});
}

// One q tile a backwardKV block visits: query head h, tile index, the head's last live tile, and
// the tile's class. h == end of the group means "no more".
struct QItem {
  int h, tile, last;
  expr::Tri cls;
};

// The (query head, q tile) pairs of one kv tile, in order: heads of the GQA group, and for each
// the non-empty q tiles between the binary-searched first and last ones.
template <class Config, class Variant>
struct QTileStream {
  using Tiles = QTiles<Variant, Config::kBlockQ, BwdParams>;
  const BwdParams& p;
  int b, kLo, kHi, hEnd;

  // Head h's walk, reading the launch's precomputed classes where the Variant has them
  // (tile_classes.h; row (b, h, kv tile)).
  ATTNC_DEVICE Tiles walk(int h) const {
    Tiles tiles(p, b, h, kLo, kHi);
    tiles.useTileClasses(tileClassRowIndex<Variant>(b, h, p.heads_q, p.kv_len, Config::kBlockKV,
                                                   kLo / Config::kBlockKV));
    return tiles;
  }
  ATTNC_DEVICE QItem settle(QItem it) const {
    while (it.h < hEnd) {
      const Tiles tiles = walk(it.h);
      it.tile = tiles.nextLive(it.tile, it.last, it.cls);
      if (it.tile <= it.last) return it;
      if (++it.h < hEnd) {
        const Tiles nextHead = walk(it.h);
        it.tile = nextHead.first();
        it.last = nextHead.last();
      }
    }
    return it;
  }
  ATTNC_DEVICE QItem start(int h) const {
    if (h >= hEnd) return QItem{h, 0, -1, expr::Tri::False};
    const Tiles tiles = walk(h);
    return settle(QItem{h, tiles.first(), tiles.last(), expr::Tri::False});
  }
  ATTNC_DEVICE QItem next(QItem it) const {
    if (it.h >= hEnd) return it;
    ++it.tile;
    return settle(it);
  }
};

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

// Copies rows [0, rows) x columns [0, Cols) of a swizzled tile to global memory, 16 bytes at a time.
template <class Tile, class Element, int Rows, int Cols, int Threads>
ATTNC_DEVICE void storeTile(Element* gmem, i64 rowStride, u32 tile, int rows, int tid) {
  constexpr int kChunks = Cols / 8;
#pragma unroll 2
  for (int idx = tid; idx < Rows * kChunks; idx += Threads) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    if (row < rows) storeGlobal128(gmem + row * rowStride + chunk * 8, loadShared128(tile + Tile::chunkOffset(row, chunk)));
  }
}

}  // namespace bwd

// dq_accum as the sm80 dK/dV kernel writes it: rows of head_dim floats, [batch][heads_q][q_len].
// The preprocess and convert kernels see dq_accum through such a layout class (the sm_90a dK/dV
// kernel has its own, sm90/bwd_config.h): block() is the region of the rows [q0, q0 + rows) of one
// (batch, head), blockFloats() its size, chunk() the 8 consecutive floats of one row's columns
// 8 c .. 8 c + 7.
template <int HeadDim>
struct RowMajorDqLayout {
  static constexpr int kBlockRows = 0;  // block() takes any first row (a layout of whole tiles: their rows)
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
  constexpr int kLanes = kChunks > 16 ? 32 : kChunks > 8 ? 16 : kChunks > 4 ? 8 : kChunks > 2 ? 4 : kChunks > 1 ? 2 : 1;
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
  Element* dst = static_cast<Element*>(p.dq) + b * p.dq_stride_b + h * p.dq_stride_h + q0 * p.dq_stride_s;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += Config::kThreads) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    const float* s = DqLayout::chunk(src, row, chunk);
    const u32x4 a = loadGlobal128(s), c = loadGlobal128(s + 4);
    const auto f = [&](u32 w) { return __builtin_bit_cast(float, w) * p.scale; };
    const u32x4 out{Convert<Element>::pack2(f(a.x), f(a.y)), Convert<Element>::pack2(f(a.z), f(a.w)),
                    Convert<Element>::pack2(f(c.x), f(c.y)), Convert<Element>::pack2(f(c.z), f(c.w))};
    storeGlobal128(dst + row * p.dq_stride_s + 8 * chunk, out);
  }
}

// dK, dV of one kv tile (and, with WriteDQ, its share of dQ into dq_accum).
// Grid (ceil(kv_len / BlockKV), heads_kv, batch), block kThreads, dynamic smem kSmemBytes.
template <class Config, class Variant, bool WriteDQ = true>
ATTNC_DEVICE void backwardKV(const BwdParams& p, unsigned char* smem) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using PTile = typename Config::PTile;
  using Tri = expr::Tri;
  constexpr int kM = Config::kMTiles;
  constexpr int kN = Config::kNTiles;
  constexpr int kBlockQ = Config::kBlockQ;
  constexpr int kStages = Config::kStages;
  static_assert(Config::kWarpsM * Config::kWarpsN == Config::kWarps && Config::kWarpRows % 16 == 0,
                "backwardKV: warps tile the kv rows in whole m16 blocks");
  static_assert(Config::kBlockQ % Config::kWarpsN == 0 && Config::kWarpCols % 16 == 0,
                "backwardKV: each warp's q columns are whole k16 steps");
  static_assert(Config::kDKTiles % 2 == 0 && Config::kDVTiles % 2 == 0,
                "backwardKV: dK/dV columns split in pairs of n8 tiles (padded: bwd_config.h)");
  static_assert(Config::kDqWarpsM * Config::kDqWarpsN == Config::kWarps &&
                    Config::kBlockQ % (16 * Config::kDqWarpsM) == 0 &&
                    Config::kDqTiles % 2 == 0,
                "backwardKV: dQ warp layout");

  const int b = blockIdx.z, hKv = blockIdx.y, kv0 = blockIdx.x * Config::kBlockKV;
  if (kv0 >= p.kv_len) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / Config::kWarpsN, wn = warp % Config::kWarpsN;
  const int kvRows = minOf(Config::kBlockKV, p.kv_len - kv0);
  const int group = p.heads_q / p.heads_kv;
  const int hFirst = hKv * group, hEnd = hFirst + group;

  const u32 kSmem = smemAddress(smem);
  const u32 vSmem = kSmem + u32(KTile::kBytes);
  const u32 pSmem = vSmem + u32(VTile::kBytes);
  const u32 dsSmem = pSmem + u32(PTile::kBytes);
  const u32 stageSmem = dsSmem + u32(PTile::kBytes);

  // K and V of the block: loaded once, their own cp.async group.
  const Element* kG = static_cast<const Element*>(p.k) + b * p.k_stride_b + hKv * p.k_stride_h + kv0 * p.k_stride_s;
  const Element* vG = static_cast<const Element*>(p.v) + b * p.v_stride_b + hKv * p.v_stride_h + kv0 * p.v_stride_s;
  block::loadTileAsync<KTile, Element, Config::kBlockKV, Config::kHeadDim, Config::kHeadDimPadded,
                       Config::kThreads>(kSmem, kG, p.k_stride_s, kvRows, tid);
  block::loadTileAsync<VTile, Element, Config::kBlockKV, Config::kHeadDimV, Config::kHeadDimVPadded,
                       Config::kThreads>(vSmem, vG, p.v_stride_s, kvRows, tid);
  cpAsyncCommit();

  // The Q, dO, LSE, delta stream: one group per (head, q tile), committed even when empty.
  const bwd::QTileStream<Config, Variant> stream{p, b, kv0, kv0 + kvRows - 1, hEnd};
  const auto issue = [&](const bwd::QItem& it, int stage) {
    if (it.h < hEnd) {
      const u32 base = stageSmem + u32(stage * Config::kStageBytes);
      const int q0 = it.tile * kBlockQ;
      const int rows = minOf(kBlockQ, p.q_len - q0);
      const Element* qG = static_cast<const Element*>(p.q) + b * p.q_stride_b + it.h * p.q_stride_h + q0 * p.q_stride_s;
      const Element* doG = static_cast<const Element*>(p.do_) + b * p.do_stride_b + it.h * p.do_stride_h + q0 * p.do_stride_s;
      block::loadTileAsync<QTile, Element, kBlockQ, Config::kHeadDim, Config::kHeadDimPadded,
                           Config::kThreads>(base, qG, p.q_stride_s, rows, tid);
      block::loadTileAsync<DoTile, Element, kBlockQ, Config::kHeadDimV, Config::kHeadDimVPadded,
                           Config::kThreads>(base + u32(QTile::kBytes), doG, p.do_stride_s, rows, tid);
      const u32 stats = base + u32(QTile::kBytes + DoTile::kBytes);
      const i64 rowBase = (i64(b) * p.heads_q + it.h) * p.q_len + q0;
      if (tid < kBlockQ) {
        cpAsync4(stats + 4 * tid, p.lse + (tid < rows ? rowBase + tid : 0), tid < rows);
      } else if (tid < 2 * kBlockQ) {
        const int i = tid - kBlockQ;
        cpAsync4(stats + 4 * (kBlockQ + i), p.delta + (i < rows ? rowBase + i : 0), i < rows);
      }
    }
    cpAsyncCommit();
  };

  bwd::QItem cur = stream.start(hFirst);
  bwd::QItem ahead = cur;
  issue(cur, 0);
  if constexpr (kStages == 2) {
    ahead = stream.next(cur);
    issue(ahead, 1);
  }

  float dK[kM][Config::kDKTiles][4];
  float dV[kM][Config::kDVTiles][4];
  warp::zero(dK);
  warp::zero(dV);
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  const int rowInWarp = lane >> 2, colInQuad = 2 * (lane & 3);
  const int warpRow = wm * Config::kWarpRows;   // kv row of the warp inside the tile
  const int warpCol = wn * Config::kWarpCols;   // q column of the warp inside the q tile
  constexpr int kSlice = Config::kSliceTiles;
  constexpr int kBitWords = ceilDiv(kM * kSlice * 4, 32);

  int stage = 0;
  while (cur.h < hEnd) {
    cpAsyncWait<kStages - 1>();
    blockSync();  // this item's Q, dO, LSE, delta (and, the first time, K, V) are visible
    const u32 qSmem = stageSmem + u32(stage * Config::kStageBytes);
    const u32 doSmem = qSmem + u32(QTile::kBytes);
    // Plain shared loads (not asm): the compiler must see them ordered by the barriers.
    const float* lseS = reinterpret_cast<const float*>(smem + (stageSmem - kSmem) +
                                                       stage * Config::kStageBytes + QTile::kBytes +
                                                       DoTile::kBytes);
    const float* deltaS = lseS + kBlockQ;
    const int h = cur.h, q0 = cur.tile * kBlockQ;
    const u32 batchHead = u32(b * p.heads_q + h);

    // The warp's part of the tile: kv rows kvW0.., q columns qW0..; it may be empty or full alone.
    const int kvW0 = kv0 + warpRow, qW0 = q0 + warpCol;
    const bool warpLive = kvW0 < p.kv_len && qW0 < p.q_len;
    Tri cls = cur.cls;
    if constexpr (Variant::kHasMask) {
      if (cls == Tri::Unknown && warpLive) {
        const QTiles<Variant, kBlockQ, BwdParams> tiles(p, b, h, kv0, kv0 + kvRows - 1);
        cls = tiles.classify(qW0, minOf(qW0 + Config::kWarpCols, p.q_len) - 1, kvW0,
                             minOf(kvW0 + Config::kWarpRows, p.kv_len) - 1);
      }
    }
    const bool checkBounds = q0 + kBlockQ > p.q_len || kv0 + Config::kBlockKV > p.kv_len;

    if (warpLive && cls != Tri::False) {
      // The warp's q columns in slices of kSliceTiles n8 tiles: S^T and dP^T of one slice are live
      // at a time (next to dK and dV), at the price of re-reading K's and V's A fragments.
#pragma unroll
      for (int slice = 0; slice < kN / kSlice; ++slice) {
        const int sliceCol = warpCol + slice * 8 * kSlice;
        // S^T = K Q^T.
        float s[kM][kSlice][4];
        warp::zero(s);
        warp::gemm<Element, Config::kQKSteps>(s, warp::SmemA<KTile>(kSmem, lane, warpRow, 0),
                                              warp::SmemB<QTile>(qSmem, lane, sliceCol, 0));
        // P^T (dropped and rescaled into the P^T tile); s keeps P * score'(s) for dS.
        u32 keepBits[kBitWords];
#pragma unroll
        for (int i = 0; i < kBitWords; ++i) keepBits[i] = 0u;
#pragma unroll
        for (int mi = 0; mi < kM; ++mi)
#pragma unroll
          for (int ni = 0; ni < kSlice; ++ni)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int tileRow = warpRow + 16 * mi + 8 * r + rowInWarp;
              const int kv = kv0 + tileRow;
              const int qLocal = sliceCol + 8 * ni + colInQuad;
              float pd[2];
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                float& x = s[mi][ni][2 * r + j];
                const int q = q0 + qLocal + j;
                const float grad = bwd::scoreWithGrad<Variant>(p, x, b, h, q, kv);
                bool keep = true;
                if (checkBounds) keep = q < p.q_len && kv < p.kv_len;
                if constexpr (Variant::kHasMask) {
                  if (cls == Tri::Unknown && keep) keep = Variant::mask(p, b, h, q, kv);
                }
                const float prob = keep ? exp2Approx(x * log2Scale - bwd::lseLog2(lseS[qLocal + j])) : 0.0f;
                pd[j] = prob;
                if constexpr (Variant::kHasDropout) {
                  const int e = ((mi * kSlice + ni) * 2 + r) * 2 + j;
                  const bool kept = keep && bwd::dropoutKeep<Variant::kDropoutRounds>(
                                                   p, batchHead, dropThreshold, q, kv);
                  if (kept) keepBits[e / 32] |= 1u << (e % 32);
                  pd[j] = kept ? prob * dropScale : 0.0f;
                }
                x = prob * grad;
              }
              storeShared32(pSmem + PTile::chunkOffset(tileRow, sliceCol / 8 + ni) + 4 * (lane & 3),
                            Convert<Element>::pack2(pd[0], pd[1]));
            }

        // dP^T = V dO^T; dS^T = P score' (dP dropped and rescaled - delta), into the dS^T tile.
        float dp[kM][kSlice][4];
        warp::zero(dp);
        warp::gemm<Element, Config::kVSteps>(dp, warp::SmemA<VTile>(vSmem, lane, warpRow, 0),
                                             warp::SmemB<DoTile>(doSmem, lane, sliceCol, 0));
#pragma unroll
        for (int mi = 0; mi < kM; ++mi)
#pragma unroll
          for (int ni = 0; ni < kSlice; ++ni)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int tileRow = warpRow + 16 * mi + 8 * r + rowInWarp;
              const int qLocal = sliceCol + 8 * ni + colInQuad;
              float ds[2];
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                float d = dp[mi][ni][2 * r + j];
                if constexpr (Variant::kHasDropout) {
                  const int e = ((mi * kSlice + ni) * 2 + r) * 2 + j;
                  d = (keepBits[e / 32] >> (e % 32)) & 1u ? d * dropScale : 0.0f;
                }
                ds[j] = s[mi][ni][2 * r + j] * (d - deltaS[qLocal + j]);
              }
              storeShared32(dsSmem + PTile::chunkOffset(tileRow, sliceCol / 8 + ni) + 4 * (lane & 3),
                            Convert<Element>::pack2(ds[0], ds[1]));
            }
      }
    } else {
      // Nothing of this warp's part is kept: its P^T and dS^T are zero (other warps read them).
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kN; ++ni)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int tileRow = warpRow + 16 * mi + 8 * r + rowInWarp;
            const u32 offset = PTile::chunkOffset(tileRow, warpCol / 8 + ni) + 4 * (lane & 3);
            storeShared32(pSmem + offset, 0u);
            storeShared32(dsSmem + offset, 0u);
          }
    }
    blockSync();  // P^T and dS^T of the whole tile are in shared memory

    // dV += P^T dO, dK += dS^T Q over the whole q tile (the warp's kv rows, its head-dim columns).
    warp::gemm<Element, Config::kPSteps, Config::kPUnroll>(dV, warp::SmemA<PTile>(pSmem, lane, warpRow, 0),
                                         warp::SmemBT<DoTile>(doSmem, lane, 0, wn * Config::kDVTiles));
    warp::gemm<Element, Config::kPSteps, Config::kPUnroll>(dK, warp::SmemA<PTile>(dsSmem, lane, warpRow, 0),
                                         warp::SmemBT<QTile>(qSmem, lane, 0, wn * Config::kDKTiles));

    // dQ += dS K (unscaled) into dq_accum, kDqChunk n8 tiles at a time.
    if constexpr (WriteDQ) {
      const int wmq = warp / Config::kDqWarpsN, wnq = warp % Config::kDqWarpsN;
      const int qRow0 = wmq * Config::kDqMTiles * 16;
      float* dqRows = p.dq_accum + (i64(b) * p.heads_q + h) * p.q_len * Config::kHeadDim;
#pragma unroll 1
      for (int chunk = 0; chunk < Config::kDqTiles / Config::kDqChunk; ++chunk) {
        const int n0 = wnq * Config::kDqTiles + chunk * Config::kDqChunk;
        float acc[Config::kDqMTiles][Config::kDqChunk][4];
        warp::zero(acc);
        warp::gemm<Element, Config::kKSteps, Config::kPUnroll>(acc, warp::SmemAT<PTile>(dsSmem, lane, 0, qRow0 / 8),
                                             warp::SmemBT<KTile>(kSmem, lane, 0, n0));
#pragma unroll
        for (int mi = 0; mi < Config::kDqMTiles; ++mi)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int q = q0 + qRow0 + 16 * mi + 8 * r + rowInWarp;
#pragma unroll
            for (int ni = 0; ni < Config::kDqChunk; ++ni) {
              const int col = (n0 + ni) * 8 + colInQuad;
              if (q < p.q_len && col < Config::kHeadDim)
                redAddF32x2(dqRows + i64(q) * Config::kHeadDim + col, acc[mi][ni][2 * r],
                            acc[mi][ni][2 * r + 1]);
            }
          }
      }
    }
    blockSync();  // everyone is done with this stage's buffers and the P^T / dS^T tiles

    const bwd::QItem following = stream.next(ahead);
    issue(following, stage);
    cur = kStages == 1 ? following : ahead;
    ahead = following;
    stage = kStages == 1 ? 0 : stage ^ 1;
  }

  // Write dK (times the softmax scale) and dV through the K and V tiles: whole 16-byte stores.
  cpAsyncWait<0>();
  blockSync();
  bwd::storeFragment<KTile, Element>(kSmem, dK, p.scale, warpRow, wn * Config::kDKTiles, lane);
  bwd::storeFragment<VTile, Element>(vSmem, dV, 1.0f, warpRow, wn * Config::kDVTiles, lane);
  blockSync();
  bwd::storeTile<KTile, Element, Config::kBlockKV, Config::kHeadDim, Config::kThreads>(
      static_cast<Element*>(p.dk) + b * p.dk_stride_b + hKv * p.dk_stride_h + kv0 * p.dk_stride_s,
      p.dk_stride_s, kSmem, kvRows, tid);
  bwd::storeTile<VTile, Element, Config::kBlockKV, Config::kHeadDimV, Config::kThreads>(
      static_cast<Element*>(p.dv) + b * p.dv_stride_b + hKv * p.dv_stride_h + kv0 * p.dv_stride_s,
      p.dv_stride_s, vSmem, kvRows, tid);
}

// Deterministic dQ: one block per (q tile, q head, batch), the kv tiles streamed like the forward,
// dQ accumulated in registers and written once. Bit-identical from run to run.
// Grid (ceil(q_len / BlockQ), heads_q, batch), block kThreads, dynamic smem kSmemBytesQ.
template <class Config, class Variant>
ATTNC_DEVICE void backwardQ(const BwdParams& p, unsigned char* smem) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using DoTile = typename Config::DoTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using Tri = expr::Tri;
  constexpr int kM = Config::kQMTiles;
  constexpr int kN = Config::kQNTiles;
  constexpr int kD = Config::kQDqTiles;
  constexpr int kStages = Config::kStages;
  static_assert(Config::kBlockQ % Config::kWarps == 0 && Config::kQWarpRows % 16 == 0,
                "backwardQ: each warp owns whole m16 tiles of queries");

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * Config::kBlockQ;
  if (q0 >= p.q_len) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qRows = minOf(Config::kBlockQ, p.q_len - q0);
  const int hKv = h / (p.heads_q / p.heads_kv);
  const int warpRow = warp * Config::kQWarpRows;
  const int qRow = q0 + warpRow + (lane >> 2);
  const int colInQuad = 2 * (lane & 3);
  const bool warpHasRows = q0 + warpRow < p.q_len;

  const u32 qSmem = smemAddress(smem);
  const u32 doSmem = qSmem + u32(QTile::kBytes);
  const u32 kvSmem = doSmem + u32(DoTile::kBytes);

  const Element* qG = static_cast<const Element*>(p.q) + b * p.q_stride_b + h * p.q_stride_h + q0 * p.q_stride_s;
  const Element* doG = static_cast<const Element*>(p.do_) + b * p.do_stride_b + h * p.do_stride_h + q0 * p.do_stride_s;
  block::loadTileAsync<QTile, Element, Config::kBlockQ, Config::kHeadDim, Config::kHeadDimPadded,
                       Config::kThreads>(qSmem, qG, p.q_stride_s, qRows, tid);
  block::loadTileAsync<DoTile, Element, Config::kBlockQ, Config::kHeadDimV, Config::kHeadDimVPadded,
                       Config::kThreads>(doSmem, doG, p.do_stride_s, qRows, tid);
  cpAsyncCommit();

  // (BwdParams::kv_tile_* are the sm_90a dQ kernel's, of other tiles: this walk searches.)
  const KvTiles<Variant, Config::kBlockKV, BwdParams, false> tiles(p, b, h, q0, q0 + qRows - 1);
  const int lastTile = tiles.last();
  const Element* kG = static_cast<const Element*>(p.k) + b * p.k_stride_b + hKv * p.k_stride_h;
  const Element* vG = static_cast<const Element*>(p.v) + b * p.v_stride_b + hKv * p.v_stride_h;
  const auto issue = [&](int tile, int stage) {
    if (tile <= lastTile) {
      const u32 base = kvSmem + u32(stage * Config::kKvStageBytes);
      const int kv0 = tile * Config::kBlockKV;
      const int rows = minOf(Config::kBlockKV, p.kv_len - kv0);
      block::loadTileAsync<KTile, Element, Config::kBlockKV, Config::kHeadDim, Config::kHeadDimPadded,
                           Config::kThreads>(base, kG + kv0 * p.k_stride_s, p.k_stride_s, rows, tid);
      block::loadTileAsync<VTile, Element, Config::kBlockKV, Config::kHeadDimV, Config::kHeadDimVPadded,
                           Config::kThreads>(base + u32(KTile::kBytes), vG + kv0 * p.v_stride_s,
                                             p.v_stride_s, rows, tid);
    }
    cpAsyncCommit();
  };
  Tri curClass, aheadClass;
  int cur = tiles.nextLive(tiles.first(), lastTile, curClass);
  int ahead = cur;
  aheadClass = curClass;
  issue(cur, 0);
  if constexpr (kStages == 2) {
    ahead = tiles.nextLive(cur + 1, lastTile, aheadClass);
    issue(ahead, 1);
  }

  // Per-row LSE (log2 domain) and delta of this lane's rows; rows past q_len get P = 0.
  float lse2[kM][2], delta[kM][2];
  const i64 rowBase = (i64(b) * p.heads_q + h) * p.q_len;
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = qRow + 16 * mi + 8 * r;
      lse2[mi][r] = q < p.q_len ? bwd::lseLog2(p.lse[rowBase + q]) : kInfinity;
      delta[mi][r] = q < p.q_len ? p.delta[rowBase + q] : 0.0f;
    }

  float dq[kM][kD][4];
  warp::zero(dq);
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 batchHead = u32(b * p.heads_q + h);
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const float dropScale = Variant::kHasDropout ? dropoutScale(p.dropout_p) : 1.0f;
  constexpr int kBitWords = ceilDiv(kM * kN * 4, 32);

  int stage = 0;
  while (cur <= lastTile) {
    cpAsyncWait<kStages - 1>();
    blockSync();
    const u32 kSmem = kvSmem + u32(stage * Config::kKvStageBytes);
    const u32 vSmem = kSmem + u32(KTile::kBytes);
    const int kv0 = cur * Config::kBlockKV;
    const int kCol = kv0 + colInQuad;
    Tri warpClass = curClass;
    if constexpr (Variant::kHasMask) {
      if (curClass == Tri::Unknown && warpHasRows) {
        const int rowLast = minOf(q0 + warpRow + Config::kQWarpRows, p.q_len) - 1;
        warpClass = tiles.classify(q0 + warpRow, rowLast, kv0, tiles.tileEnd(cur));
      }
    }
    const bool checkBounds = tiles.isTail(cur) || q0 + Config::kBlockQ > p.q_len;

    if (warpHasRows && warpClass != Tri::False) {
      float s[kM][kN][4];
      warp::zero(s);
      warp::gemm<Element, Config::kQKSteps>(s, warp::SmemA<QTile>(qSmem, lane, warpRow, 0),
                                            warp::SmemB<KTile>(kSmem, lane, 0, 0));
      // Dropout keep bits, bit ((mi * 2 + r) * kN + ni) * 2 + j (this frame is the forward's).
      u32 keepBits[kBitWords];
#pragma unroll
      for (int i = 0; i < kBitWords; ++i) keepBits[i] = 0u;
      if constexpr (Variant::kHasDropout)
        forEachDropoutDecision<Variant::kDropoutRounds, kM, kN>(
            p, batchHead, dropThreshold, qRow, kCol, [&](int mi, int ni, int c, bool kept) {
              const int e = ((mi * 2 + c / 2) * kN + ni) * 2 + c % 2;
              keepBits[e / 32] |= u32(kept) << (e % 32);
            });
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int ni = 0; ni < kN; ++ni) {
            const int q = qRow + 16 * mi + 8 * r;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float& x = s[mi][ni][2 * r + j];
              const int k = kCol + 8 * ni + j;
              const float grad = bwd::scoreWithGrad<Variant>(p, x, b, h, q, k);
              bool keep = true;
              if (checkBounds) keep = q < p.q_len && k < p.kv_len;
              if constexpr (Variant::kHasMask) {
                if (warpClass == Tri::Unknown && keep) keep = Variant::mask(p, b, h, q, k);
              }
              const float prob = keep ? exp2Approx(x * log2Scale - lse2[mi][r]) : 0.0f;
              x = prob * grad;
            }
          }

      float dp[kM][kN][4];
      warp::zero(dp);
      warp::gemm<Element, Config::kVSteps>(dp, warp::SmemA<DoTile>(doSmem, lane, warpRow, 0),
                                           warp::SmemB<VTile>(vSmem, lane, 0, 0));
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int ni = 0; ni < kN; ++ni)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float d = dp[mi][ni][2 * r + j];
              if constexpr (Variant::kHasDropout) {
                const int e = ((mi * 2 + r) * kN + ni) * 2 + j;
                d = (keepBits[e / 32] >> (e % 32)) & 1u ? d * dropScale : 0.0f;
              }
              dp[mi][ni][2 * r + j] = s[mi][ni][2 * r + j] * (d - delta[mi][r]);
            }
      // dQ += dS K, dS packed straight from the accumulators.
      u32 dsA[kM][kN / 2][4];
      warp::packP<Element>(dsA, dp);
      warp::gemm<Element, kN / 2>(dq, warp::RegsA<kM, kN / 2>{dsA}, warp::SmemBT<KTile>(kSmem, lane, 0, 0));
    }
    blockSync();

    Tri followingClass;
    const int following = tiles.nextLive(ahead + 1, lastTile, followingClass);
    issue(following, stage);
    if constexpr (kStages == 1) {
      cur = following;
      curClass = followingClass;
    } else {
      cur = ahead;
      curClass = aheadClass;
    }
    ahead = following;
    aheadClass = followingClass;
    stage = kStages == 1 ? 0 : stage ^ 1;
  }

  // dQ (times the softmax scale) through the warp's own rows of the Q tile, 16-byte stores.
  cpAsyncWait<0>();
  blockSync();
  if (!warpHasRows) return;
  bwd::storeFragment<QTile, Element>(qSmem, dq, p.scale, warpRow, 0, lane);
  warpSync();
  constexpr int kRowChunks = Config::kHeadDim / 8;
  constexpr int kWarpChunks = Config::kQWarpRows * kRowChunks;
  Element* dqG = static_cast<Element*>(p.dq) + b * p.dq_stride_b + h * p.dq_stride_h;
#pragma unroll
  for (int i = 0; i < ceilDiv(kWarpChunks, 32); ++i) {
    const int idx = lane + 32 * i;
    if (kWarpChunks % 32 != 0 && idx >= kWarpChunks) break;
    const int row = idx / kRowChunks, chunk = idx % kRowChunks;
    const int q = q0 + warpRow + row;
    if (q < p.q_len)
      storeGlobal128(dqG + q * p.dq_stride_s + chunk * 8,
                     loadShared128(qSmem + QTile::chunkOffset(warpRow + row, chunk)));
  }
}

}  // namespace sm80
}  // namespace attnc
