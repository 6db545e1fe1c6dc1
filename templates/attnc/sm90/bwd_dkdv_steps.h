// The steps of a consumer warpgroup of the sm_90a dK/dV kernel (bwd_dkdv.h) on one q tile, in
// the transposed frame of the sm80 kernel: S^T = K Q^T and dP^T = V dO^T (wgmma from shared
// memory), P^T and dS^T recomputed on the accumulators (score hook, mask, dropout), then
// dV += P^T dO and dK += dS^T Q, with and without the head-dim split.
#pragma once

#include "attnc/common/bwd_steps.h"
#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/bwd_smem.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// Each consumer's turn at issuing its S^T and dP^T GEMMs (ping-pong, as the forward's): named
// barrier kTurnBarrier + consumer.
constexpr int kTurnBarrier = 3;

// The consumers' turns with the ping-pong (bwdPingPong); without it take and pass do nothing.
// Consumer g waits on named barrier kTurnBarrier + g and passes the turn to the other.
template <bool PingPong>
struct KvTurns {
  int group;
  ATTNC_DEVICE void take() const {
    if constexpr (PingPong) namedBarrierSync(kTurnBarrier + group, 256);
  }
  ATTNC_DEVICE void pass() const {
    if constexpr (PingPong) namedBarrierArrive(kTurnBarrier + (group ^ 1), 256);
  }
};

// A consumer warpgroup of the dK/dV kernel: its shape (constants), and where it works: its 64 kv
// rows (with the head-dim split, the block's 64 that every consumer shares), this lane's
// accumulator elements (wgmma.h), its columns of S^T, dK, dV and dQ and the shared tiles its GEMMs
// read.
template <class Config_, class Variant_, bool WriteDQ>
struct KvConsumer {
  using Config = Config_;
  using Variant = Variant_;
  using Element = typename Config::Element;
  static constexpr int kN = Config::kNTiles;
  static constexpr int kBlockQ = Config::kBlockQ;
  // The q tile's columns of S^T and dP^T a consumer computes (n8 tiles): all, or with the
  // head-dim split its half (the consumers share the kv rows; bwd_config.h).
  static constexpr int kSN = Config::kSplit ? kN / 2 : kN;
  static constexpr int kDkN = 8 * Config::kDkTiles;  // wgmma N of this consumer's dK (and dV below)
  static constexpr int kDvN = 8 * Config::kDvTiles;
  // The grid is orderedGrid(kv tiles, heads_kv x batch) for a masked spec
  // (Variant::kKvOrderedGrid, block_order.h): under a causal mask the first kv tiles meet the most
  // q tiles, and with the rank the slower index inside each group of (kv head, batch) pairs the
  // grid starts them first and ends each group on its shortest tiles, while the blocks running at
  // once share a few heads' Q, dO and dq_accum tiles in L2. Else (kv tiles, heads_kv, batch).
  static constexpr bool kOrdered = VariantKvOrderedGrid<Variant>::value;
  // The ping-pong (bwdPingPong, bwd_config.h): not with the head-dim split, dropout, masks that
  // read declared inputs or a score hook.
  static constexpr bool kPingPong = bwdPingPong(Config::kSplit, Variant::kHasDropout,
                                                VariantTileClasses<Variant>::value,
                                                Variant::kHasScore);
  // With the split, the kDqN columns of dQ go in parts of 64 (one K chunk each), one after
  // another: hd256's 128 at once did not fit beside dK and dV (ptxas serialized every wgmma).
  static constexpr int kDqParts = Config::kSplit ? maxOf(1, Config::kDqN / kChunkElements) : 1;
  static constexpr int kDqPartN = Config::kDqN / kDqParts;
  // With the split in two parts (hd160-256 with WriteDQ): the second part's accumulators, whose
  // GEMM is issued beside the first's, so that it runs while the first part's reductions do.
  static constexpr bool kLateDq = WriteDQ && Config::kSplit && kDqParts == 2;
  static constexpr bool kWriteDQ = WriteDQ;

  const BwdParams& p;
  BackwardSmem<Config> smem;
  int group, lane, warp;
  int rowGroup;  // which 64 of the block's kv rows
  int groupKv;   // the first of them
  bool groupHasRows;
  int groupLast;
  int kvRow;    // this lane's first accumulator row
  int tileRow;  // the same row inside the warpgroup's 64
  int colInQuad;
  int sCol0;  // the first of this consumer's q columns of S^T (kSN)
  u32 kTile, vTile;
  // The first of this consumer's dK and dV columns, and their offsets in the Q and dO tiles (whole
  // 64-column chunks: bwd_config.h splitColumns): 0 without the split.
  int dkCol0, dvCol0;
  u32 qColumns, doColumns;
  int dqCol0;  // the first of this consumer's dQ columns

  // (kTile, vTile and dqKColumns() are shuffled from lane 0, which ptxas takes as warp-uniform: the
  // descriptors built from them are then made in uniform registers rather than moved there by
  // R2UR at every wgmma step.)
  ATTNC_DEVICE KvConsumer(const BwdParams& params, const BackwardSmem<Config>& layout, int kv0,
                          int warpGroup, int groupThread)
      : p(params),
        smem(layout),
        group(warpGroup - 1),
        lane(groupThread & 31),
        warp(groupThread >> 5),
        rowGroup(Config::kSplit ? 0 : group),
        groupKv(kv0 + 64 * rowGroup),
        groupHasRows(groupKv < p.kv_len),
        groupLast(minOf(groupKv + 63, p.kv_len - 1)),
        kvRow(groupKv + 16 * warp + (lane >> 2)),
        tileRow(16 * warp + (lane >> 2)),
        colInQuad(2 * (lane & 3)),
        sCol0(Config::kSplit ? 8 * kSN * group : 0),
        kTile(__shfl_sync(0xffffffffu, smem.k() + u32(64 * rowGroup * kSwizzleRowBytes), 0)),
        vTile(__shfl_sync(0xffffffffu, smem.v() + u32(64 * rowGroup * kSwizzleRowBytes), 0)),
        dkCol0(Config::kSplit ? group * kDkN : 0),
        dvCol0(Config::kSplit ? group * kDvN : 0),
        qColumns(u32((dkCol0 / kChunkElements) * kBlockQ * kSwizzleRowBytes)),
        doColumns(u32((dvCol0 / kChunkElements) * kBlockQ * kSwizzleRowBytes)),
        dqCol0(group * Config::kDqN) {}

  // The K tile's columns of this consumer's dQ, B of its dQ GEMM (issueDqGemm). (Not a member:
  // the kernel makes it after the accumulators are zeroed, and the machine code depends on it.)
  ATTNC_DEVICE u32 dqKColumns() const {
    return __shfl_sync(0xffffffffu,
                       smem.k() + u32((dqCol0 / kChunkElements) * Config::kBlockKV *
                                          kSwizzleRowBytes +
                                      (dqCol0 % kChunkElements) * 2),
                       0);
  }
};

// The dropout decisions (philox.h) of a consumer lane's elements of one q tile: bit
// (ni * 2 + r) * 2 + j for key kvRow + 8 r and query q0 + 8 ni + colInQuad + j. The keys kvRow and
// kvRow ^ 1 (this lane and lane ^ 4) share every Philox group (with kvRow ^ 16, ^ 17, in the warp
// beside this one, which makes the same call), so each lane makes the call of j = kvRow & 1 for
// both and the two swap the other byte: one call per 8 elements.
template <int Rounds, int NTiles>
ATTNC_DEVICE u32 dropoutKeepBits(const BwdParams& p, u32 batchHead, u32 threshold, int q0,
                                 int kvRow, int colInQuad, int lane) {
  const int half = (lane >> 2) & 1;  // kvRow & 1: kvRow is 0..7 past a multiple of 16
  static_assert(NTiles <= 8, "32 keep bits");
  const DropoutKeepBitsLane bits = dropoutKeepBitsLane((u32(kvRow) >> 4) & 1u, u32(half));
  const DropoutKeptBytesConstants c = dropoutKeptBytesConstants(threshold);
  u32 mine = 0u, theirs = 0u;
#pragma unroll
  for (int m = 0; m < NTiles / 2; ++m)
    dropoutKeepBitsOfGroup(dropoutRandom<Rounds>(p.dropout_keys, p.dropout_offset, batchHead,
                                                 u32(q0 + 16 * m + colInQuad + half), u32(kvRow)),
                           m, bits, c, mine, theirs);
  return mine | __shfl_xor_sync(0xffffffffu, theirs, 4);
}

// S^T = K Q^T and dP^T = V dO^T, two commit groups: this consumer's rows of K (V) against the q
// tile's rows of Q (dO), both K-major; with the split, this consumer's half of the q tile's rows
// (sCol0, an atom boundary).
template <class C>
ATTNC_DEVICE void issueScoreGemms(const C& c, float (&s)[1][C::kSN][4],
                                  float (&dp)[1][C::kSN][4], u32 qTile, u32 doTile) {
  using Config = typename C::Config;
  const u32 sRows = u32(c.sCol0 * kSwizzleRowBytes);
  wgmmaFence();
  gemmKMajor<typename C::Element, 8 * C::kSN, Config::kQKSteps>(flat(s), c.kTile, Config::kBlockKV,
                                                                qTile + sRows, C::kBlockQ);
  gemmKMajor<typename C::Element, 8 * C::kSN, Config::kVSteps>(flat(dp), c.vTile, Config::kBlockKV,
                                                               doTile + sRows, C::kBlockQ);
}

// The class of the q tile for the warpgroup's 64 rows alone, which may be empty or full where the
// block's tile is cut.
template <class C, class Batch>
ATTNC_DEVICE expr::Tri groupClassOf(const C& c, const Batch& batchNow, expr::Tri tileClass, int h,
                                    int q0) {
  using Variant = typename C::Variant;
  expr::Tri groupClass = c.groupHasRows ? tileClass : expr::Tri::False;
  if constexpr (Variant::kHasMask) {
    if (groupClass == expr::Tri::Unknown) {
      const QTiles<Variant, C::kBlockQ, BwdParams> tiles(c.p, batchNow(), h, c.groupKv,
                                                         c.groupLast);
      groupClass = tiles.classify(q0, minOf(q0 + C::kBlockQ, c.p.q_len) - 1, c.groupKv,
                                  c.groupLast);
    }
  }
  return groupClass;
}

// P^T (dropped and rescaled: the A operand of dV += P^T dO) into pd; s keeps P * score'(s) for
// dS. Branch-free per element: a dropped element's exponent becomes -inf (2^-inf = 0). Rows past
// q_len need nothing (their LSE is +inf); keys past kv_len are masked per row (rowKept). Masked:
// the mask hook runs, on tiles it cuts (the caller's warp-uniform choice between two copies).
template <bool Masked, class C, class Batch>
ATTNC_DEVICE void recomputeProbabilities(const C& c, const Batch& batchNow, int h, int q0,
                                         u32 stats,
                                         float log2Scale, float dropScale,
                                         const bool (&rowKept)[2], u32 keepBits,
                                         float (&s)[1][C::kSN][4], float (&pd)[1][C::kSN][4]) {
  using Variant = typename C::Variant;
  const BwdParams& p = c.p;
  const int b = batchNow();
  const int kvRow = c.kvRow, colInQuad = c.colInQuad, sCol0 = c.sCol0;
  // A split mask (sm80::forEachKeep): the key parts of this thread's two kv rows once, each
  // query's row part once for both.
  // (The outer `if constexpr` on the Variant alone discards the split's calls for a Variant
  // without one when the kernel is instantiated; one on `Masked` would not.)
  using SplitOf = sm80::MaskSplitOf<Variant>;
  constexpr bool kHasSplit = SplitOf::value;
  [[maybe_unused]] typename SplitOf::template Parts<kHasSplit>::Col maskCol[2];
  if constexpr (kHasSplit) {
    if constexpr (Masked) {
#pragma unroll
      for (int r = 0; r < 2; ++r) maskCol[r] = Variant::mask_col(p, b, h, kvRow + 8 * r);
    }
  }
#pragma unroll
  for (int ni = 0; ni < C::kSN; ++ni)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int qLocal = sCol0 + 8 * ni + colInQuad + j;
      const int q = q0 + qLocal;
      const float lse2 = loadSharedF32(stats + u32(4 * qLocal));
      [[maybe_unused]] typename SplitOf::template Parts<kHasSplit>::Row maskRow;
      if constexpr (kHasSplit) {
        if constexpr (Masked) maskRow = Variant::mask_row(p, b, h, q);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int kv = kvRow + 8 * r;
        float& x = s[0][ni][2 * r + j];
        float grad;
        if constexpr (sm80::bwd::BackwardPositions<Variant>::value)
          grad = sm80::bwd::scoreWithGrad<Variant>(p, x, b, h,
                                                   expr::Pos{q0 + sCol0 + colInQuad, 8 * ni + j},
                                                   expr::Pos{kvRow, 8 * r});
        else
          grad = sm80::bwd::scoreWithGrad<Variant>(p, x, b, h, q, kv);
        bool keep = rowKept[r];
        if constexpr (kHasSplit) {
          if constexpr (Masked)
            keep = keep & Variant::mask_join(p, b, h, q, kv, maskRow, maskCol[r]);
        } else if constexpr (Masked) {
          keep = keep & bool(Variant::mask(p, b, h, q, kv));
        }
        const float prob = exp2Approx(keep ? x * log2Scale - lse2 : -kInfinity);
        float dropped = prob;
        if constexpr (Variant::kHasDropout) {
          const int e = (ni * 2 + r) * 2 + j;
          dropped = (keepBits >> e) & 1u ? prob * dropScale : 0.0f;
        }
        pd[0][ni][2 * r + j] = dropped;
        x = prob * grad;
      }
    }
}

// dS^T = P score' (dP^T dropped and rescaled - delta), into dp: the A operand of dK += dS^T Q
// (and, through shared memory, of dQ = dS K).
template <class C>
ATTNC_DEVICE void dsFromDp(const C& c, u32 stats, u32 keepBits, float dropScale,
                           const float (&s)[1][C::kSN][4], float (&dp)[1][C::kSN][4]) {
#pragma unroll
  for (int ni = 0; ni < C::kSN; ++ni)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int qLocal = c.sCol0 + 8 * ni + c.colInQuad + j;
      const float delta = loadSharedF32(stats + u32(4 * (C::kBlockQ + qLocal)));
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float d = dp[0][ni][2 * r + j];
        if constexpr (C::Variant::kHasDropout) {
          const int e = (ni * 2 + r) * 2 + j;
          d = (keepBits >> e) & 1u ? d * dropScale : 0.0f;
        }
        dp[0][ni][2 * r + j] = s[0][ni][2 * r + j] * (d - delta);
      }
    }
}

// Where word i of this lane's packed A fragment (packP) of step kk goes in a shared 64 x 64 tile
// of this consumer's S^T columns, K-major in the 128-byte swizzle (16-byte chunk c of row r at
// c ^ (r % 8)), from chunk sCol0 / 8: the word holds n8 tile 2 kk + i / 2, row half i % 2.
template <class C>
ATTNC_DEVICE u32 dsFragmentOffset(const C& c, int kk, int i) {
  const int row = c.tileRow + 8 * (i & 1), ni = c.sCol0 / 8 + 2 * kk + (i >> 1);
  return u32(row * kSwizzleRowBytes + ((ni ^ (row & 7)) * 16) + 4 * (c.lane & 3));
}

// With the head-dim split: each consumer has P^T and dS^T of its half of the q tile; both halves
// go into the buffer's shared tiles (P^T in the second consumer's dS^T slot, unused with the
// split), and dV += P^T dO and dK += dS^T Q read them from there over the whole q tile once the
// other consumer's half is in: A K-major from the shared tiles, B this consumer's columns,
// MN-major.
template <class C>
ATTNC_DEVICE void splitDvDkGemms(const C& c, int iteration, u32 qTile, u32 doTile, u32 stats,
                                 u32 keepBits, float dropScale, const float (&s)[1][C::kSN][4],
                                 float (&dp)[1][C::kSN][4], const float (&pd)[1][C::kSN][4],
                                 u32 (&pA)[1][C::kSN / 2][4], u32 (&dsA)[1][C::kSN / 2][4],
                                 float (&dk)[1][C::Config::kDkTiles][4],
                                 float (&dv)[1][C::Config::kDvTiles][4]) {
  using Config = typename C::Config;
  using Element = typename C::Element;
  const auto& smem = c.smem;
  wgmmaWait<0>();  // dP^T too
  fenceRegisters(flat(dp));
  sm80::warp::packP<Element>(pA, pd);
  dsFromDp(c, stats, keepBits, dropScale, s, dp);
  sm80::warp::packP<Element>(dsA, dp);
  const int buffer = iteration & 1;
  mbarrierWait(smem.dsEmpty(buffer), (u32(iteration >> 1) & 1u) ^ 1u);
  const u32 dsTile = smem.dsT(buffer, 0), pTile = smem.dsT(buffer, 1);
#pragma unroll
  for (int kk = 0; kk < C::kSN / 2; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const u32 at = dsFragmentOffset(c, kk, i);
      sm80::storeShared32(pTile + at, pA[0][kk][i]);
      sm80::storeShared32(dsTile + at, dsA[0][kk][i]);
    }
  fenceProxyAsync();
  mbarrierArrive(smem.dsFull(buffer));
  mbarrierWait(smem.dsFull(buffer), u32(iteration >> 1) & 1u);
  wgmmaFence();
#pragma unroll
  for (int kk = 0; kk < Config::kPSteps; ++kk)
    WgmmaSS<Element, C::kDvN>::template run<0, 1>(
        flat(dv), kMajorDescriptor(pTile, 64, kk),
        mnMajorDescriptor(doTile + c.doColumns, C::kBlockQ, kk), 1);
#pragma unroll
  for (int kk = 0; kk < Config::kPSteps; ++kk)
    WgmmaSS<Element, C::kDkN>::template run<0, 1>(
        flat(dk), kMajorDescriptor(dsTile, 64, kk),
        mnMajorDescriptor(qTile + c.qColumns, C::kBlockQ, kk), 1);
  wgmmaCommit();
}

// Without the split: dV += P^T dO with P^T from registers (its GEMM running while dS^T is
// computed), then dK += dS^T Q likewise; with WriteDQ dS^T also goes into this consumer's tile of
// buffer iteration % 2, once every consumer's dQ GEMM of two tiles ago is done with it.
template <class C>
ATTNC_DEVICE void dvDkGemms(const C& c, int iteration, u32 qTile, u32 doTile, u32 stats,
                            u32 keepBits, float dropScale, const float (&s)[1][C::kSN][4],
                            float (&dp)[1][C::kSN][4], const float (&pd)[1][C::kSN][4],
                            u32 (&pA)[1][C::kSN / 2][4], u32 (&dsA)[1][C::kSN / 2][4],
                            float (&dk)[1][C::Config::kDkTiles][4],
                            float (&dv)[1][C::Config::kDvTiles][4]) {
  using Element = typename C::Element;
  const auto& smem = c.smem;
  sm80::warp::packP<Element>(pA, pd);
  wgmmaFence();
  gemmRegsMNMajor<Element, C::kDvN>(flat(dv), pA[0], doTile + c.doColumns, C::kBlockQ);

  wgmmaWait<1>();  // dP^T is done; dV's GEMM may still run
  fenceRegisters(flat(dp));
  dsFromDp(c, stats, keepBits, dropScale, s, dp);
  sm80::warp::packP<Element>(dsA, dp);
  if constexpr (C::kWriteDQ) {
    const int buffer = iteration & 1;
    mbarrierWait(smem.dsEmpty(buffer), (u32(iteration >> 1) & 1u) ^ 1u);
    const u32 dsTile = smem.dsT(buffer, c.group);
#pragma unroll
    for (int kk = 0; kk < C::kSN / 2; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        sm80::storeShared32(dsTile + dsFragmentOffset(c, kk, i), dsA[0][kk][i]);
    fenceProxyAsync();
    mbarrierArrive(smem.dsFull(buffer));
  }
  wgmmaFence();
  gemmRegsMNMajor<Element, C::kDkN>(flat(dk), dsA[0], qTile + c.qColumns, C::kBlockQ);
}

}  // namespace sm90
}  // namespace attnc
