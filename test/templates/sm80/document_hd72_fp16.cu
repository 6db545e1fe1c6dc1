// Sample of generated code: causal document mask over a declared input `doc: {dtype: i32, dims:
// [b, pos]}`, fp16, head dim 72 (odd number of n8 tiles: exercises the x2 ldmatrix tail).
#include "attnc/sm80/forward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = false, kHasDropout = false;
  template <class I>
  ATTNC_HD static auto mask(const attnc::FwdParams& p, I b, I h, I q, I k) {
    using namespace attnc::expr;
    auto v0 = cmp_eq(load_i32(p.inputs[0], b, h, q, input_extents(p)), load_i32(p.inputs[0], b, h, k, input_extents(p)));
    return land(v0, cmp_ge(q, k));
  }
};
using Config = attnc::sm80::FwdConfig<attnc::half, 72, 72, 128, 64, 8, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(Config::kThreads) document_hd72_fp16_fwd(const attnc::FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::forward<Config, Variant>(p, smem);
}
