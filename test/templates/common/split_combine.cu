// Sample TU: split_kv.h and split_combine.h in device code, the way the decode's combine kernel
// uses them (a warp per (b, h, q) row, lanes striding over dv, bf16 O), so nvcc and NVRTC see
// them instantiated and not only parsed.
#include "attnc/common/split_combine.h"
#include "attnc/common/split_kv.h"

namespace {
struct StoreBf16 {
  attnc::bf16* o;
  ATTNC_DEVICE void operator()(int d, float value) {
    o[d] = attnc::Convert<attnc::bf16>::fromFloat(value);
  }
};
}  // namespace

// Partials as [split][row][dv] and [split][row]; one warp per row.
extern "C" __global__ void __launch_bounds__(128)
    split_combine_sample(const float* oPart, const float* lsePart, attnc::bf16* o, float* lse,
                         int rows, int dv, int splits) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  StoreBf16 store{o + attnc::i64(row) * dv};
  const float rowLse = attnc::combineRow(lsePart + row, rows, oPart + attnc::i64(row) * dv,
                                         attnc::i64(rows) * dv, splits, dv, lane, 32, store);
  if (lane == 0)
    lse[row] = rowLse;
}

// The split rule on the device: what a kernel that sizes its own splits would call.
extern "C" __global__ void split_count_sample(const attnc::SplitProblem* problem, int* splits) {
  const attnc::SmLimits hopper = {65536, 233472, 2048, 32};
  const int slots = 132 * attnc::blocksPerSM(128, 168, 40 * 1024, hopper);
  attnc::SplitProblem p = *problem;
  p.slots = slots;
  splits[0] = attnc::splitCount(p).splits;
}
