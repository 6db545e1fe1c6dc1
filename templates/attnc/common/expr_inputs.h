// Declared inputs as the hooks read them: one element (indices clamped into the input's extent,
// through the read-only data path), or the hull of the elements over index intervals (from the
// launch's block summaries where it made them).
#pragma once

#include "attnc/common/expr_interval.h"
#include "attnc/common/expr_scalar.h"
#include "attnc/common/params.h"

namespace attnc {
namespace expr {

// Declared inputs: element (b, h, pos) of a tensor whose absent dimensions have stride 0.
// Indices are clamped into the input's extent (batch, query heads, max(q_len, kv_len) positions),
// so no mask or score expression can read out of bounds: with q_len > kv_len, for instance, the
// aligned query position q + kv_len - q_len of the first rows is negative.
struct InputExtents {
  int batch, heads, positions;
};
// Any launch parameters with batch, heads_q, q_len, kv_len (FwdParams, BwdParams).
template <class Params>
ATTNC_HD InputExtents input_extents(const Params& p) {
  return InputExtents{p.batch, p.heads_q, p.q_len > p.kv_len ? p.q_len : p.kv_len};
}
// As max(0, min(i, extent - 1)) (extents are at least 1), so that the compiler folds the index 0
// of a dimension an input lacks to 0 whatever the extent: its loads then keep no row state.
ATTNC_HD int clamp_index(int i, int extent) { return max(0, min(i, extent - 1)); }
ATTNC_HD i64 input_offset(const InputRef& in, int b, int h, int pos, InputExtents e) {
  return clamp_index(b, e.batch) * in.stride_b + clamp_index(h, e.heads) * in.stride_h +
         clamp_index(pos, e.positions) * in.stride_pos;
}
// Declared inputs are read-only while a launch runs, so the device reads them through the
// non-coherent (read-only data) path.
template <class T>
ATTNC_HD T load_input(const void* base, i64 offset) {
  const T* at = static_cast<const T*>(base) + offset;
#if defined(__CUDA_ARCH__)
  return __ldg(at);
#else
  return *at;
#endif
}
ATTNC_HD int load_i32(const InputRef& in, int b, int h, int pos, InputExtents e) {
  return load_input<int>(in.ptr, input_offset(in, b, h, pos, e));
}
ATTNC_HD float load_f32(const InputRef& in, int b, int h, int pos, InputExtents e) {
  return load_input<float>(in.ptr, input_offset(in, b, h, pos, e));
}

// Loads over index intervals: the hull of the elements in range. Where the input has block
// summaries (params.h), a range's whole blocks are read from them and only the partial blocks at
// its two ends element by element; without them every element is read. Either way the work is a
// list of items (an element or a summary entry), and a range of more items than this is
// "anything" (sound, merely imprecise): with summaries that is a range of about 250 000 positions.
constexpr i64 kMaxScanItems = 4096;
// Clamping is monotone, so the clamped interval holds every clamped scalar index.
ATTNC_HD IntI clamp_index(IntI i, int extent) {
  return IntI(clamp_index(i.lo, extent), clamp_index(i.hi, extent));
}
// A (b, h, pos) box of clamped indices.
struct IndexBox {
  IntI b, h, pos;
};

// Who scans a box: one thread alone, or a whole warp that asks for the same box, each lane taking
// every 32nd element and the lanes' hulls combined with warp reductions. The kernel classifies
// tiles warp-uniformly, so a tile's scan costs a warp count/32 loads per lane instead of count.
struct ScanShare {
  int first = 0, step = 1;
  bool warp = false;
};
#if defined(__CUDA_ARCH__)
ATTNC_DEVICE int warp_min(int x) {
  int r;
  asm volatile("redux.sync.min.s32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(x));
  return r;
}
ATTNC_DEVICE int warp_max(int x) {
  int r;
  asm volatile("redux.sync.max.s32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(x));
  return r;
}
ATTNC_DEVICE float warp_min(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    x = fminf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
ATTNC_DEVICE float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
ATTNC_DEVICE bool warp_same(int x) { return warp_min(x) == warp_max(x); }
ATTNC_DEVICE ScanShare scan_share(const IndexBox& box) {
  unsigned active;
  asm volatile("activemask.b32 %0;" : "=r"(active));
  ScanShare share;
  if (active != 0xffffffffu) return share;  // a partial warp scans alone (sound, just slower)
  share.warp = warp_same(box.b.lo) && warp_same(box.b.hi) && warp_same(box.h.lo) &&
               warp_same(box.h.hi) && warp_same(box.pos.lo) && warp_same(box.pos.hi);
  if (share.warp) {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    share.first = int(lane);
    share.step = 32;
  }
  return share;
}
#else
inline ScanShare scan_share(const IndexBox&) { return ScanShare(); }
#endif

// How one row of a box ((b, h) fixed, pos.lo .. pos.hi) is scanned: `blocks` summary entries from
// block `firstBlock`, and the elements around them one by one: `head` from pos.lo, then the rest
// from `tailStart` to pos.hi. Without summaries (or no whole block in range) every element.
struct RowPlan {
  int head, elements, tailStart, firstBlock, blocks;
  SummaryLayout layout;

  ATTNC_HD RowPlan(const InputRef& in, IntI pos, InputExtents e) {
    elements = head = pos.hi - pos.lo + 1;
    tailStart = pos.hi + 1;
    firstBlock = blocks = 0;
    layout = SummaryLayout{1, 1, 0};
    if (in.summary) {
      layout = summaryLayout(in, e.batch, e.heads, e.positions);
      // Whole blocks start at or after pos.lo and end at or before pos.hi; the last block of the
      // extent is shorter than kSummaryBlock and whole when pos.hi is the extent's last position.
      const int first = (pos.lo + kSummaryBlock - 1) / kSummaryBlock;
      const int end = pos.hi + 1 == e.positions ? layout.blocks : (pos.hi + 1) / kSummaryBlock;
      if (first < end) {
        head = first * kSummaryBlock - pos.lo;
        tailStart = min(end * kSummaryBlock, pos.hi + 1);
        elements = head + (pos.hi + 1 - tailStart);
        firstBlock = first;
        blocks = end - first;
      }
    }
  }
  ATTNC_HD int items() const { return elements + blocks; }
};

// The element type's bounds of an empty hull, and its NaN test (ints have none).
ATTNC_HD int empty_lo(int) { return kIntMax; }
ATTNC_HD int empty_hi(int) { return kIntMin; }
ATTNC_HD float empty_lo(float) { return kInf; }
ATTNC_HD float empty_hi(float) { return -kInf; }
ATTNC_HD bool is_nan_value(int) { return false; }
ATTNC_HD bool is_nan_value(float x) { return isNan(x); }
ATTNC_HD int bits_as(u32 bits, int) { return int(bits); }
// Widens the hull [lo, hi] (and the NaN flag) by the values [vlo, vhi] (one element: vlo == vhi;
// a summarized block with a NaN holds NaN in both).
template <class T>
ATTNC_HD void widen_hull(T& lo, T& hi, bool& nan, T vlo, T vhi) {
  nan = nan || is_nan_value(vlo);
  lo = min(lo, vlo);
  hi = max(hi, vhi);
}
ATTNC_HD float bits_as(u32 bits, float) { return __builtin_bit_cast(float, bits); }

// The hull [lo, hi] of an input over a box, with `nan` set where an element (or a summarized
// block) holds a NaN. False when the box has more than kMaxScanItems items.
template <class T>
ATTNC_HD bool scan_hull(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e, T& lo, T& hi,
                        bool& nan) {
  const IndexBox box{clamp_index(b, e.batch), clamp_index(h, e.heads),
                     clamp_index(pos, e.positions)};
  const RowPlan row(in, box.pos, e);
  if (i64(box.b.hi - box.b.lo + 1) * (box.h.hi - box.h.lo + 1) * row.items() > kMaxScanItems)
    return false;
  const ScanShare share = scan_share(box);
  const int heads = box.h.hi - box.h.lo + 1, rows = (box.b.hi - box.b.lo + 1) * heads;
  // A row's items, numbered: its elements [pos.lo, pos.lo + head), then [tailStart, pos.hi] (plain
  // strided runs), then its summary entries. Each thread takes every share.step-th item, and
  // kScanBatch of them at once: their loads are independent and in flight together, so a tile
  // walk's scans cost about one memory latency per batch instead of one per item. Rolled
  // otherwise: this runs once per tile, and more unrolling only costs compile time and code size.
  // Boxes of more than one row are rare (tile walks fix b and h); each row is shared by the warp.
  constexpr int kScanBatch = 4;
#pragma unroll 1
  for (int r = 0; r < rows; ++r) {
    const int bi = box.b.lo + r / heads, hi_ = box.h.lo + r % heads;
    const T* rowData = static_cast<const T*>(in.ptr) + (bi * in.stride_b + hi_ * in.stride_h);
    const SummaryEntry* rowSummaries =
        static_cast<const SummaryEntry*>(in.summary) + row.layout.index(bi, hi_, row.firstBlock);
    const int items = row.items();
#pragma unroll 1
    for (int j0 = share.first; j0 < items; j0 += kScanBatch * share.step) {
      T itemLo[kScanBatch], itemHi[kScanBatch];
#pragma unroll
      for (int u = 0; u < kScanBatch; ++u) {
        const int j = j0 + u * share.step;
        itemLo[u] = empty_lo(T()), itemHi[u] = empty_hi(T());
        if (j < row.elements) {
          const int pi = j < row.head ? box.pos.lo + j : row.tailStart + (j - row.head);
          itemLo[u] = itemHi[u] = rowData[pi * in.stride_pos];
        } else if (j < items) {
          const SummaryEntry s = rowSummaries[j - row.elements];
          itemLo[u] = bits_as(s.lo, T()), itemHi[u] = bits_as(s.hi, T());
        }
      }
#pragma unroll
      for (int u = 0; u < kScanBatch; ++u) widen_hull(lo, hi, nan, itemLo[u], itemHi[u]);
    }
  }
#if defined(__CUDA_ARCH__)
  if (share.warp) {
    lo = warp_min(lo), hi = warp_max(hi);
    nan = warp_max(nan ? 1 : 0) != 0;
  }
#endif
  return true;
}

ATTNC_HD IntI load_i32(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e) {
  int lo = empty_lo(0), hi = empty_hi(0);
  bool nan = false;
  if (!scan_hull(in, b, h, pos, e, lo, hi, nan)) return IntI(kIntMin, kIntMax);
  return IntI(lo, hi);
}
ATTNC_HD FltI load_f32(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e) {
  float lo = empty_lo(0.0f), hi = empty_hi(0.0f);
  bool nan = false;
  if (!scan_hull(in, b, h, pos, e, lo, hi, nan) || nan) return anyFloat();
  return FltI(lo, hi);
}

}  // namespace expr
}  // namespace attnc
