// Sample of generated code: causal (bottom-right) mask, bf16, head dim 128.
#include "attnc/sm80/forward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = false, kHasDropout = false;
  template <class I>
  ATTNC_HD static auto mask(const attnc::FwdParams& p, I b, I h, I q, I k) {
    using namespace attnc::expr;
    auto v0 = add(q, sub(p.kv_len, p.q_len));
    return cmp_ge(v0, k);
  }
};
using Config = attnc::sm80::FwdConfig<attnc::bf16, 128, 128, 128, 64, 8, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(Config::kThreads) causal_hd128_bf16_fwd(const attnc::FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::forward<Config, Variant>(p, smem);
}
