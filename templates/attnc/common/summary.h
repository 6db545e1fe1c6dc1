// The body of a kernel's `<name>_summary` entry: the block summaries (params.h) of the declared
// inputs that the mask reads over intervals, written once per launch before the attention kernels
// read them. One warp per summary entry: its lanes read the block's kSummaryBlock consecutive
// positions (coalesced where stride_pos is 1) and combine their hulls with warp reductions.
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/params.h"

namespace attnc {

// Summaries of inputs[slot], of element type T (int or float); nothing when its summary is null.
template <class T>
ATTNC_DEVICE void summarizeInput(const SummaryParams& p, int slot) {
  const InputRef& in = p.inputs[slot];
  if (!in.summary) return;
  const expr::InputExtents e = expr::input_extents(p);
  const SummaryLayout layout = summaryLayout(in, e.batch, e.heads, e.positions);
  constexpr int kWarps = kSummaryThreads / 32;
  const int lane = int(threadIdx.x % 32);
  auto* out = static_cast<SummaryEntry*>(const_cast<void*>(in.summary));
  for (i64 entry = i64(blockIdx.x) * kWarps + threadIdx.x / 32; entry < layout.entries();
       entry += i64(gridDim.x) * kWarps) {
    const int block = int(entry % layout.blocks);
    const int row = int(entry / layout.blocks);
    const int b = row / layout.heads, h = row % layout.heads;
    T lo = expr::empty_lo(T()), hi = expr::empty_hi(T());
    bool nan = false;
#pragma unroll
    for (int i = lane; i < kSummaryBlock; i += 32) {
      const int pos = block * kSummaryBlock + i;
      if (pos >= e.positions) break;  // a shorter last block
      const T v = static_cast<const T*>(in.ptr)[expr::input_offset(in, b, h, pos, e)];
      expr::widen_hull(lo, hi, nan, v, v);
    }
    lo = expr::warp_min(lo);
    hi = expr::warp_max(hi);
    nan = expr::warp_max(nan ? 1 : 0) != 0;
    if (lane == 0)
      out[entry] = nan ? SummaryEntry{0x7fffffffu, 0x7fffffffu}
                       : SummaryEntry{__builtin_bit_cast(u32, lo), __builtin_bit_cast(u32, hi)};
  }
}

}  // namespace attnc
