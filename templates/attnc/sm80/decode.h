// The decode kernel (mma.sync, ldmatrix, cp.async; sm_80 family, Hopper included): few query rows
// against a long K/V cache, for contiguous, packed (varlen) and paged layouts alike. Where the
// forward gives a block 128 rows of one head, here a block takes the rows of all the query heads
// that share one kv head (GQA packing, common/packed_rows.h), so each K/V byte is read once per kv
// head, and a sequence's keys may be cut into splits (split-KV, common/split_kv.h) so that a small
// batch still fills the GPU; a combine kernel (decodeCombine, below) merges the splits' partials.
// Docs: docs/design/decode.md.
//
// A block is (split, kv head x row tile, sequence). Stages, top to bottom:
//   view      the sequence's lengths and rows (common/seq_params.h): positions in hooks are the
//             sequence's own, so bottom-right causal aligns per sequence;
//   producer  Q's packed rows, then K and V tiles alternating through a ring of shared buffers (as
//             in forward.h), each row's address from the layout (contiguous, packed or paged);
//   mainloop  each of the 4 warps takes its own 16 keys of every kv tile against all the rows,
//             with its own online softmax: S = Q K^T, score and mask per packed row, O += P V;
//   merge     the warps' (O, max, sum) pairwise through shared memory into warp 0;
//   epilogue  O and LSE (one split), or the split's fp32 partials.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/mma.h"
#include "attnc/common/packed_rows.h"
#include "attnc/common/params.h"
#include "attnc/common/seq_params.h"
#include "attnc/common/softmax.h"
#include "attnc/common/split_combine.h"
#include "attnc/common/split_kv.h"
#include "attnc/common/types.h"
#include "attnc/sm80/decode_config.h"

namespace attnc {
namespace sm80 {

// The kv tiles a block of packed rows visits: TileWalk's searches (kv_tiles.h) with the rows'
// query interval and the hull of their heads, over the sequence's view, inside the split's tiles.
// It never reads a launch's precomputed classes (those are for the forward's tiles).
template <class Variant, int BlockKV>
struct PackedKvTiles {
  using Tri = expr::Tri;
  using IntI = expr::IntI;
  const SeqView<FwdParams>& p;
  int b;
  IntI heads, queries;
  int numTiles;

  ATTNC_DEVICE PackedKvTiles(const SeqView<FwdParams>& view, int batch, IntI h, IntI q)
      : p(view), b(batch), heads(h), queries(q), numTiles(ceilDiv(view.kv_len, BlockKV)) {}

  ATTNC_DEVICE Tri classify(int kLo, int kHi) const {
    if constexpr (Variant::kHasMask) {
      return Variant::mask(p, IntI{b, b}, heads, queries, IntI{kLo, kHi});
    } else {
      return Tri::True;
    }
  }
  ATTNC_DEVICE int tileEnd(int t) const { return minOf((t + 1) * BlockKV, p.kv_len) - 1; }
  ATTNC_DEVICE bool isTail(int t) const { return (t + 1) * BlockKV > p.kv_len; }

  // The live range inside tiles [lo, hi] (TileWalk::first and last's searches kept inside it):
  // first, the largest t with tiles [lo, t) provably empty; last, one before the smallest t with
  // tiles [t, hi] provably empty. first > last when nothing is live.
  ATTNC_DEVICE void bounds(int lo, int hi, int& first, int& last) const {
    first = lo, last = hi;
    if constexpr (Variant::kHasMask) {
      if (lo > hi) return;
      int a = lo, z = hi + 2;  // tiles [lo, a) empty (vacuously at lo); z: past the range
      while (z - a > 1) {
        const int mid = (a + z) / 2;
        if (classify(lo * BlockKV, tileEnd(mid - 1)) == Tri::False) a = mid; else z = mid;
      }
      first = a;
      a = lo - 1, z = hi + 1;  // tiles [z, hi] empty (vacuously at hi + 1); a: before the range
      while (z - a > 1) {
        const int mid = (a + z) / 2;
        if (classify(mid * BlockKV, tileEnd(hi)) == Tri::False) z = mid; else a = mid;
      }
      last = z - 1;
    }
  }

  // The first tile t' in [t, last] that is not empty (last + 1 when none), and its class.
  ATTNC_DEVICE int nextLive(int t, int last, Tri& cls) const {
    for (; t <= last; ++t) {
      cls = classify(t * BlockKV, tileEnd(t));
      if (cls != Tri::False) return t;
    }
    cls = Tri::False;
    return t;
  }
};

// The page ids of the pages one kv tile's rows fall in, a lane each: lane l holds the tile's
// l-th page in `lo` and its (32 + l)-th in `hi` (pages of one row take 64 of them), so that a row's
// address takes a shuffle where a load of the block table would stall each copy.
struct TilePages {
  int first;   // the tile's first page, as an index into the sequence's table row
  int lo, hi;  // page ids (clamped), 0 on lanes past the tile's pages
};

// Where a sequence's K or V rows are: contiguous (b's rows from its batch stride), packed (rows
// from cu_seqlens_kv[b]) or paged (row j in page block_table[b][j >> shift]). Page ids and table
// columns are clamped, so a wrong table reads wrong rows of the pool, never outside it.
template <class Element>
struct KvRows {
  const Element* base;  // the kv head's row 0: of the sequence, or of page 0 of the pool
  i64 strideS, stridePage;
  const int* table;     // the sequence's row of the block table, or null
  int pageShift, maxPages, numPages;

  // The page ids of the `rows` rows from j0 (rows <= 64) for pagedRow, a load a lane (the table
  // column clamped). The ids are checked apart (checked) so that a caller can load them early and
  // wait on them only where they are used.
  ATTNC_DEVICE TilePages pagesOf(int j0, int rows, int lane) const {
    const int first = j0 >> pageShift;
    const int count = ((j0 + rows - 1) >> pageShift) - first + 1;
    return {first, lane < count ? table[minOf(first + lane, maxPages - 1)] : 0,
            lane + 32 < count ? table[minOf(first + lane + 32, maxPages - 1)] : 0};
  }
  // Ids clamped into the pool: a wrong table reads wrong rows of the pool, never outside it.
  ATTNC_DEVICE TilePages checked(const TilePages& pages) const {
    return {pages.first, minOf(maxOf(pages.lo, 0), numPages - 1),
            minOf(maxOf(pages.hi, 0), numPages - 1)};
  }
  // Paged row j of the rows `pages` covers. Every lane of the warp calls it together (a shuffle).
  ATTNC_DEVICE const Element* pagedRow(const TilePages& pages, int j) const {
    const int i = (j >> pageShift) - pages.first;
    int page = __shfl_sync(0xffffffffu, pages.lo, i & 31);
    if (pageShift == 0) {  // (pages of one row: a tile's 64; the branch is the block's)
      const int hi = __shfl_sync(0xffffffffu, pages.hi, i & 31);
      page = i < 32 ? page : hi;
    }
    // Unsigned: page ids and in-page rows are never negative, which spares the 64-bit products
    // their sign halves.
    return base + i64(u32(page)) * stridePage + i64(u32(j & ((1 << pageShift) - 1))) * strideS;
  }
};

template <class Element>
ATTNC_DEVICE KvRows<Element> kvRowsOf(const DecodeParams& dp, const SeqView<FwdParams>& view,
                                      const void* tensor, i64 strideB, i64 strideH, i64 strideS,
                                      i64 stridePage, int b, int hKv) {
  const SeqLayout& seq = dp.seq;
  const Element* head = static_cast<const Element*>(tensor) + hKv * strideH;
  if (seq.block_table != nullptr)
    return {head, strideS, stridePage, seq.block_table + b * seq.block_table_stride,
            seq.page_shift, maxOf(seq.max_pages, 1), maxOf(seq.num_pages, 1)};
  const i64 first = seq.cu_seqlens_kv != nullptr ? view.kv_start * strideS : b * strideB;
  return {head + first, strideS, 0, nullptr, 0, 1, 1};
}

// Issues the K/V stream's loads in order, skipping empty tiles; a group is committed for every
// call, loaded or not, so the consumer's cp.async.wait_group counts stay fixed (forward.h's
// KvProducer, with rows addressed through KvRows). K and V alternate, so which one a call site
// issues is known where it is written (issue<IsV>): the ring runs Stages - 1 items ahead.
template <class Config, class Variant>
struct DecodeProducer {
  using Element = typename Config::Element;
  const PackedKvTiles<Variant, Config::kBlockKV>& tiles;
  KvRows<Element> k, v;
  u32 buffers;
  int tile, last;
  int buffer = 0;
  // The page ids of `tile`, unchecked (paged layouts; K and V share the block table): loaded when
  // the stream reaches the tile, a consumer step before its first copy, so that the copy does not
  // wait on the table. (Two registers: the decode kernel's registers are full.)
  int pageLo = 0, pageHi = 0;

  static_assert(Config::kBlockKV <= 64, "a tile's pages fit TilePages' two ids a lane");

  // Loads `tile`'s page ids: before the first issue, then as the stream moves to a tile.
  ATTNC_DEVICE void fetchPages(int tid) {
    if (k.table != nullptr && tile <= last) {
      const TilePages raw = k.pagesOf(tile * Config::kBlockKV, Config::kBlockKV, tid & 31);
      pageLo = raw.lo, pageHi = raw.hi;
    }
  }

  // A whole tile (kBlockKV rows) where a thread's rows step by a whole row step: the thread keeps
  // one 16-byte column (`chunk`) and rows row0 + i x kRowStep, so that its shared-memory offsets
  // are constants and a copy costs its row's global address.
  template <class Tile, int Cols, int LoadCols>
  struct WholeRows {
    static constexpr int kChunksPerRow = LoadCols / 8;
    static constexpr bool kApplies = Config::kThreads % kChunksPerRow == 0 &&
                                     Config::kBlockKV % (Config::kThreads / kChunksPerRow) == 0;
    static constexpr int kRowStep = kApplies ? Config::kThreads / kChunksPerRow : 1;
    static constexpr int kStepShift = log2Floor(kRowStep);
    static_assert(!kApplies || (1 << kStepShift) == kRowStep, "a power-of-two row step");
    static_assert(!kApplies || Config::kBlockKV / kRowStep <= 32,
                  "a tile's pages of kRowStep rows or more fit a warp's lanes");
  };

  // Whether loadWhole takes a whole tile of x: contiguous rows, or pages of at least a thread's
  // row step.
  template <class W>
  ATTNC_DEVICE static bool wholeApplies(const KvRows<Element>& x) {
    return x.table == nullptr || x.pageShift >= W::kStepShift;
  }

  // Page `lane` of the tile (TilePages: lane l holds the tile's l-th page id), as the byte offset
  // of its row 0 from page 0's. Unsigned: a negative id becomes large, so one min clamps both
  // ends into the pool.
  ATTNC_DEVICE i64 pageOffset(const KvRows<Element>& x, int lane) const {
    const u32 id = minOf(u32(__shfl_sync(0xffffffffu, pageLo, lane)), u32(x.numPages - 1));
    return i64(id) * (x.stridePage * i64(sizeof(Element)));
  }

  // Contiguous rows: one add from the tile's first. Pages of the whole tile or more: the same from
  // the tile's row in its page. Smaller pages (loadPages): the tile starts a page, so which page
  // and row in it a thread's i-th row is is the same in every tile.
  template <class Tile, int Cols, int LoadCols>
  ATTNC_DEVICE void loadWhole(u32 dst, const KvRows<Element>& x, int kv0, int tid) const {
    using W = WholeRows<Tile, Cols, LoadCols>;
    constexpr int kStep = W::kRowStep, kRows = Config::kBlockKV / kStep;
    const int chunk = tid % W::kChunksPerRow, row0 = tid / W::kChunksPerRow;
    const bool chunkValid = chunk < Cols / 8;  // (the k16 padding columns are zero-filled)
    const char* base = reinterpret_cast<const char*>(x.base);
    const i64 rowBytes = x.strideS * i64(sizeof(Element));
    // (A row step below 8 changes the row's swizzle from one i to the next: the offset is taken
    // for each row; a step of 8 or more folds it into a constant past row0's.)
    const auto copy = [&](int i, const char* src) {
      cpAsync16(dst + Tile::chunkOffset(row0 + i * kStep, chunk), chunkValid ? src : base,
                chunkValid);
    };
    constexpr int kTileShift = log2Floor(Config::kBlockKV);
    if (x.table == nullptr || x.pageShift >= kTileShift) {
      const int inPage = x.table == nullptr ? kv0 : kv0 & ((1 << x.pageShift) - 1);
      const char* first = base + (inPage + row0) * rowBytes + chunk * 16;
      if (x.table != nullptr) first += pageOffset(x, 0);
#pragma unroll
      for (int i = 0; i < kRows; ++i) copy(i, first + i * kStep * rowBytes);
    } else {
      loadPages<W::kStepShift, kTileShift>(x, row0, chunk, copy);
    }
  }

  // Pages of 2^Shift rows, from a thread's row step (2^StepShift) up to a tile (the shift is the
  // launch's; one instance a size, so that a row's page and its row in the page are constants):
  // page c of the tile holds the thread's rows c x kPerPage + k, k x kStep rows into the page past
  // `thread`. A page costs a shuffle and a multiply, a row an add. (The thread's row pointer is
  // derived here, not passed in: passed, NVRTC held full_hd64's decode kernel to 168 registers on
  // sm_80 and it spilled.)
  template <int StepShift, int TileShift, int Shift = StepShift, class Copy>
  ATTNC_DEVICE void loadPages(const KvRows<Element>& x, int row0, int chunk,
                              const Copy& copy) const {
    if constexpr (Shift < TileShift) {
      if (x.pageShift != Shift) {
        loadPages<StepShift, TileShift, Shift + 1>(x, row0, chunk, copy);
        return;
      }
      constexpr int kStep = 1 << StepShift, kPerPage = 1 << (Shift - StepShift);
      constexpr int kPages = 1 << (TileShift - Shift);
      const i64 rowBytes = x.strideS * i64(sizeof(Element));
      const char* thread = reinterpret_cast<const char*>(x.base) + row0 * rowBytes + chunk * 16;
#pragma unroll
      for (int c = 0; c < kPages; ++c) {
        const char* page = thread + pageOffset(x, c);
#pragma unroll
        for (int k = 0; k < kPerPage; ++k) copy(c * kPerPage + k, page + k * kStep * rowBytes);
      }
    }
  }

  // One K or V tile from row kv0: whole tiles of contiguous rows, or of pages that hold a thread's
  // row step, take loadWhole; a tail tile or smaller pages address each row from the layout.
  template <class Tile, int Cols, int LoadCols>
  ATTNC_DEVICE void load(u32 dst, const KvRows<Element>& x, int kv0, int rows, int tid) const {
    using W = WholeRows<Tile, Cols, LoadCols>;
    if constexpr (W::kApplies) {
      if (rows == Config::kBlockKV && wholeApplies<W>(x)) {
        loadWhole<Tile, Cols, LoadCols>(dst, x, kv0, tid);
        return;
      }
    }
    if (x.table == nullptr) {
      const Element* first = x.base + kv0 * x.strideS;
      block::loadRowsAsyncConverged<Tile, Element, Config::kBlockKV, Cols, LoadCols,
                                    Config::kThreads>(
          dst, [&](int r) { return first + r * x.strideS; }, rows, x.base, tid);
    } else {
      const TilePages pages = x.checked({kv0 >> x.pageShift, pageLo, pageHi});
      block::loadRowsAsyncConverged<Tile, Element, Config::kBlockKV, Cols, LoadCols,
                                    Config::kThreads>(
          dst, [&](int r) { return x.pagedRow(pages, kv0 + r); }, rows, x.base, tid);
    }
  }

  template <bool IsV>
  ATTNC_DEVICE void issue(int tid) {
    if (tile <= last) {
      const u32 dst = buffers + u32(buffer * Config::kSlotBytes);
      const int kv0 = tile * Config::kBlockKV;
      const int rows = minOf(Config::kBlockKV, tiles.p.kv_len - kv0);
      if constexpr (!IsV) {
        load<typename Config::KTile, Config::kHeadDim, Config::kHeadDimPadded>(dst, k, kv0, rows,
                                                                                tid);
      } else {
        load<typename Config::VTile, Config::kHeadDimV, Config::kHeadDimV>(dst, v, kv0, rows, tid);
        expr::Tri unused;
        tile = tiles.nextLive(tile + 1, last, unused);
        fetchPages(tid);
      }
    }
    cpAsyncCommit();
    buffer = buffer + 1 == Config::kStages ? 0 : buffer + 1;
  }

  // The first Items of the stream (K, V, K, ...).
  template <int Items>
  ATTNC_DEVICE void prime(int tid) {
    if constexpr (Items > 0) {
      prime<Items - 1>(tid);
      issue<(Items - 1) % 2 == 1>(tid);
    }
  }
};

// One warp's online-softmax state of all the block's rows: what the merge moves between warps.
template <class Config>
struct DecodeState {
  float o[Config::kMTiles][Config::kNvTiles][4];
  OnlineSoftmax<Config::kMTiles> softmax;

  // Into `slot` (kMergeFloatsPerLane floats a lane, lane-minor so that a warp's stores and loads
  // hit all 32 banks).
  ATTNC_DEVICE void save(float* slot, int lane) const {
    int i = 0;
    forEachFloat([&](float v) { slot[32 * i++ + lane] = v; });
  }
  template <class Visit>
  ATTNC_DEVICE void forEachFloat(const Visit& visit) const {
#pragma unroll
    for (int mi = 0; mi < Config::kMTiles; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        visit(softmax.rowMax[mi][r]);
        visit(softmax.rowSum[mi][r]);
      }
#pragma unroll
    for (int mi = 0; mi < Config::kMTiles; ++mi)
#pragma unroll
      for (int nv = 0; nv < Config::kNvTiles; ++nv)
#pragma unroll
        for (int c = 0; c < 4; ++c) visit(o[mi][nv][c]);
  }

  // Merges another warp's state of the same rows (same lane, same elements): the online-softmax
  // algebra with both sides rescaled to the larger maximum.
  ATTNC_DEVICE void mergeFrom(const float* slot, int lane, float log2Scale) {
    float factorSelf[Config::kMTiles][2], factorOther[Config::kMTiles][2];
#pragma unroll
    for (int mi = 0; mi < Config::kMTiles; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 2 * (2 * mi + r);
        const float otherMax = slot[32 * i + lane], otherSum = slot[32 * (i + 1) + lane];
        const float selfMax = softmax.rowMax[mi][r];
        const float newMax = fmax2(selfMax, otherMax);
        const float maxScaled = newMax == -kInfinity ? 0.0f : newMax * log2Scale;
        factorSelf[mi][r] = exp2Approx(selfMax * log2Scale - maxScaled);
        factorOther[mi][r] = exp2Approx(otherMax * log2Scale - maxScaled);
        softmax.rowMax[mi][r] = newMax;
        softmax.rowSum[mi][r] =
            softmax.rowSum[mi][r] * factorSelf[mi][r] + otherSum * factorOther[mi][r];
      }
    int i = 4 * Config::kMTiles;
#pragma unroll
    for (int mi = 0; mi < Config::kMTiles; ++mi)
#pragma unroll
      for (int nv = 0; nv < Config::kNvTiles; ++nv)
#pragma unroll
        for (int c = 0; c < 4; ++c, ++i)
          o[mi][nv][c] = o[mi][nv][c] * factorSelf[mi][c >> 1] +
                         slot[32 * i + lane] * factorOther[mi][c >> 1];
  }
};

// Where a packed row's results go: its query's row of O (or of the partials) and its LSE.
struct DecodeRowOut {
  const DecodeParams& dp;
  const SeqView<FwdParams>& view;
  int b;

  ATTNC_DEVICE bool packedQ() const { return dp.seq.cu_seqlens_q != nullptr; }
  // The query's row among all rows of its head: b x q_len + q, or its packed row.
  ATTNC_DEVICE i64 row(int q) const {
    return packedQ() ? i64(view.q_start) + q : i64(b) * dp.base.q_len + q;
  }
  template <class Element>
  ATTNC_DEVICE Element* o(int h, int q) const {
    const FwdParams& p = dp.base;
    return static_cast<Element*>(p.o) + (packedQ() ? 0 : b * p.o_stride_b) + h * p.o_stride_h +
           (i64(view.q_start) + q) * p.o_stride_s;
  }
  // [batch, heads_q, q_len], or [heads_q, total_q] for packed Q.
  ATTNC_DEVICE float* lse(int h, int q) const {
    const FwdParams& p = dp.base;
    if (packedQ()) return p.lse + h * dp.seq.total_q + view.q_start + q;
    return p.lse + (i64(b) * p.heads_q + h) * p.q_len + q;
  }
};

// The epilogue: warp 0's merged state normalized, then O and LSE (one split) or the split's
// partials, for the packed rows below packedRows.
template <class Config>
ATTNC_DEVICE void storeDecode(const DecodeRowOut& out, DecodeState<Config>& state, int row0,
                              int packedRows, int hKv, int split, int lane, float log2Scale) {
  using Element = typename Config::Element;
  using Rows = PackedRows<Config::kGroup>;
  const DecodeParams& dp = out.dp;
  float lse[Config::kMTiles][2];
  state.softmax.finish(state.o, log2Scale, 1.0f, lse);
#pragma unroll
  for (int mi = 0; mi < Config::kMTiles; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * mi + 8 * r + (lane >> 2);
      if (row >= packedRows) continue;
      const int q = Rows::query(row), h = Rows::head(row, hKv);
      const int col = 2 * (lane & 3);
      if (dp.o_part == nullptr) {
        Element* o = out.template o<Element>(h, q);
#pragma unroll
        for (int nv = 0; nv < Config::kNvTiles; ++nv)
          *reinterpret_cast<u32*>(o + 8 * nv + col) =
              Convert<Element>::pack2(state.o[mi][nv][2 * r], state.o[mi][nv][2 * r + 1]);
        if (dp.base.lse != nullptr && (lane & 3) == 0) *out.lse(h, q) = lse[mi][r];
      } else {
        const i64 at = (i64(split) * dp.base.heads_q + h) * dp.partial_rows + out.row(q);
        float* o = dp.o_part + at * Config::kHeadDimV;
#pragma unroll
        for (int nv = 0; nv < Config::kNvTiles; ++nv)
          *reinterpret_cast<float2*>(o + 8 * nv + col) =
              make_float2(state.o[mi][nv][2 * r], state.o[mi][nv][2 * r + 1]);
        if ((lane & 3) == 0) dp.lse_part[at] = lse[mi][r];
      }
    }
}

// A block's kv head and row tile: blockIdx.y = hKv x row tiles + row tile, so that a kv head's
// row tiles run side by side and the second reads the K/V tiles the first brought into L2. Read
// through volatile asm so that the epilogue's call divides again rather than keep the prologue's
// quotient live across the mainloop (where it was the one value ptxas spilled).
struct DecodeRowTile {
  int hKv, rowTile;
};
ATTNC_DEVICE DecodeRowTile decodeRowTile(int headsKv) {
  u32 y, blocksY;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(blocksY));
  const int rowTiles = int(blocksY) / headsKv;
  return {int(y) / rowTiles, int(y) % rowTiles};
}

template <class Config, class Variant>
ATTNC_DEVICE void decode(const DecodeParams& dp, unsigned char* smem) {
  using Element = typename Config::Element;
  using QTile = typename Config::QTile;
  using KTile = typename Config::KTile;
  using VTile = typename Config::VTile;
  using Rows = PackedRows<Config::kGroup>;
  using Tri = expr::Tri;
  constexpr int kM = Config::kMTiles;
  constexpr int kStages = Config::kStages;
  constexpr bool kQInRegs = Config::kQInRegs;
  const FwdParams& p = dp.base;

  // The combine (its own grid, with more than one split) may launch now: it waits for this grid.
  letDependentGridLaunch();

  // The view: this block's sequence, kv head and packed rows.
  const int split = int(blockIdx.x), b = int(blockIdx.z);
  const DecodeRowTile at = decodeRowTile(p.heads_kv);
  const int hKv = at.hKv;
  const SeqView<FwdParams> view = seqView(p, dp.seq, b);
  const int packedRows = Rows::rows(view.q_len);
  const int row0 = at.rowTile * Config::kRows;
  if (row0 >= packedRows) return;
  const int rowLast = minOf(row0 + Config::kRows, packedRows) - 1;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;

  const u32 qSmem = smemAddress(smem);
  const u32 kvSmem = qSmem + u32(QTile::kBytes);
  const LdmatrixLane<QTile> qLane(lane, false);
  const LdmatrixLane<KTile> kLane(lane, true);
  const LdmatrixLane<VTile> vLane(lane, false);

  // Producer, Q: packed row r is query r / G of head hKv G + r % G, its own cp.async group.
  const bool packedQ = dp.seq.cu_seqlens_q != nullptr;
  const Element* qBase = static_cast<const Element*>(p.q) + (packedQ ? 0 : b * p.q_stride_b) +
                         i64(view.q_start) * p.q_stride_s;
  block::loadRowsAsync<QTile, Element, Config::kRows, Config::kHeadDim, Config::kHeadDimPadded,
                       Config::kThreads>(
      qSmem,
      [&](int r) {
        const int row = row0 + r;
        return qBase + Rows::head(row, hKv) * p.q_stride_h + Rows::query(row) * p.q_stride_s;
      },
      rowLast - row0 + 1, qBase, tid);
  cpAsyncCommit();

  // The split's live kv tiles.
  const PackedKvTiles<Variant, Config::kBlockKV> tiles(
      view, b, Rows::heads(row0, rowLast, hKv), Rows::queries(row0, rowLast, view.q_len));
  const int splitFirst = split * dp.split_tiles;
  int first, lastTile;
  tiles.bounds(splitFirst, minOf(splitFirst + dp.split_tiles, tiles.numTiles) - 1, first,
               lastTile);
  Tri tileClass;
  int tile = tiles.nextLive(first, lastTile, tileClass);

  // Producer, K/V: Stages - 1 tiles ahead.
  DecodeProducer<Config, Variant> producer{
      tiles,
      kvRowsOf<Element>(dp, view, p.k, p.k_stride_b, p.k_stride_h, p.k_stride_s,
                        dp.seq.k_stride_page, b, hKv),
      kvRowsOf<Element>(dp, view, p.v, p.v_stride_b, p.v_stride_h, p.v_stride_s,
                        dp.seq.v_stride_page, b, hKv),
      kvSmem,
      tile,
      lastTile};
  producer.fetchPages(tid);
  producer.template prime<kStages - 1>(tid);

  u32 qRegs[kQInRegs ? kM : 1][kQInRegs ? Config::kQKSteps : 1][4];
  if constexpr (kQInRegs) {
    if (tile <= lastTile) {
      cpAsyncWait<kStages - 1>();  // the Q group, not the K/V groups behind it
      blockSync();
      warp::loadQ<QTile, kM, Config::kQKSteps>(qRegs, qSmem, qLane, 0);
    }
  }

  // Mainloop: this warp's 16 keys of each tile against every row.
  DecodeState<Config> state;
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int nv = 0; nv < Config::kNvTiles; ++nv)
#pragma unroll
      for (int c = 0; c < 4; ++c) state.o[mi][nv][c] = 0.0f;
  const PackedLaneRows<Config::kGroup, kM> laneRows(row0 + (lane >> 2), hKv, view.q_len);
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 warpKeys = u32(warp * kDecodeWarpKeys);

  // The item consumed and the one issued are Stages - 1 apart in the K, V, K, ... stream.
  constexpr bool kIssueVAtK = (kStages - 1) % 2 == 1;
  int buffer = 0;
  const auto consumeNext = [&](auto issuesV) {
    cpAsyncWait<kStages - 2>();
    blockSync();
    producer.template issue<decltype(issuesV)::value>(tid);
    const u32 at = kvSmem + u32(buffer * Config::kSlotBytes);
    buffer = buffer + 1 == kStages ? 0 : buffer + 1;
    return at;
  };

  for (; tile <= lastTile; tile = tiles.nextLive(tile + 1, lastTile, tileClass)) {
    const int kCol = tile * Config::kBlockKV + int(warpKeys) + 2 * (lane & 3);
    float s[kM][Config::kWarpNTiles][4];
    u32 pA[kM][1][4];
    const u32 kBuffer = consumeNext(Flag<kIssueVAtK>{});
    warp::gemmQK<Element, kQInRegs, kM, Config::kWarpNTiles, Config::kQKSteps>(
        s, qRegs, qSmem, qLane, 0, kBuffer + warpKeys * KTile::kRowBytes, kLane);
    if constexpr (Variant::kHasScore)
      applyScorePacked<Variant, Config::kGroup>(s, view, b, laneRows, kCol);
    const bool partial = tileClass == Tri::Unknown;
    if (partial || tiles.isTail(tile))
      applyMaskPacked<Variant, Config::kGroup>(s, view, b, laneRows, kCol, partial);
    // Lazy row maxima (OnlineSoftmax::advanceLazy): a warp's 16 keys a tile rarely raise a row's
    // maximum by 2^8 past the first tiles, so O (kM x dv / 8 x 4 floats a lane) is rarely
    // rescaled; the vote costs a few instructions where the rescale costs a multiply a float.
    float factors[kM][2];
    if (state.softmax.advanceLazy(s, log2Scale, factors)) state.softmax.rescale(state.o, factors);
    warp::packP<Element>(pA, s);
    const u32 vBuffer = consumeNext(Flag<!kIssueVAtK>{});
    warp::gemmPV<Element>(state.o, pA, vBuffer + warpKeys * VTile::kRowBytes, vLane);
  }

  // Merge: warps 2, 3 into 0, 1, then 1 into 0, through the (now idle) shared memory.
  cpAsyncWait<0>();
  blockSync();
  float* slots = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int half = Config::kWarps / 2; half >= 1; half /= 2) {
    if (warp >= half && warp < 2 * half)
      state.save(slots + (warp - half) * 32 * Config::kMergeFloatsPerLane, lane);
    blockSync();
    if (warp < half)
      state.mergeFrom(slots + warp * 32 * Config::kMergeFloatsPerLane, lane, log2Scale);
    blockSync();
  }

  // Epilogue (the row tile read again: see decodeRowTile).
  if (warp == 0) {
    const DecodeRowTile again = decodeRowTile(p.heads_kv);
    storeDecode<Config>(DecodeRowOut{dp, view, b}, state, again.rowTile * Config::kRows,
                        packedRows, again.hKv, split, lane, log2Scale);
  }
}

// The combine: a warp per (query head, row) merges the row's splits (split_combine.h's
// combineRowWarp) into O and the LSE. Grid ceil(heads_q x rows / kCombineRowsPerBlock),
// kCombineThreads threads.
template <class Element, int HeadDimV>
ATTNC_DEVICE void decodeCombine(const CombineParams& p) {
  const i64 index = i64(blockIdx.x) * kCombineRowsPerBlock + (threadIdx.x >> 5);
  if (index >= i64(p.heads_q) * p.rows) return;  // (whole warps)
  waitForPrerequisiteGrid();  // the split grid's partials (it may still run: launched overlapped)
  const int lane = int(threadIdx.x & 31);
  const int h = int(index / p.rows);
  const i64 row = index % p.rows;
  const i64 b = row / p.q_len, q = row % p.q_len;
  const i64 splitStride = i64(p.heads_q) * p.rows;
  Element* out =
      static_cast<Element*>(p.o) + b * p.o_stride_b + h * p.o_stride_h + q * p.o_stride_s;
  const auto store4 = [&](int d, const float4& x) {
    u32* at = reinterpret_cast<u32*>(out + d);
    at[0] = Convert<Element>::pack2(x.x, x.y);
    at[1] = Convert<Element>::pack2(x.z, x.w);
  };
  const float rowLse = combineRowWarp<HeadDimV, kMaxSplits>(
      p.lse_part + index, splitStride, p.o_part + index * HeadDimV, splitStride * HeadDimV,
      p.splits, lane, store4);
  if (p.lse != nullptr && lane == 0) p.lse[(b * p.heads_q + h) * p.q_len + q] = rowLse;
}

}  // namespace sm80
}  // namespace attnc
