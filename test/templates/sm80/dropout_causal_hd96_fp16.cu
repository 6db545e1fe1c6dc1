// Sample of generated code: causal mask (top-left) with dropout, fp16, head dim 96, GQA-ready
// (the kv head is derived from heads_q / heads_kv inside the template).
#include "attnc/sm80/forward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = false, kHasDropout = true;
  static constexpr int kDropoutRounds = 7;  // Philox4x32 rounds (philox.h)
  template <class I>
  ATTNC_HD static auto mask(const attnc::FwdParams&, I, I, I q, I k) {
    using namespace attnc::expr;
    return cmp_ge(q, k);
  }
};
using Config = attnc::sm80::FwdConfig<attnc::half, 96, 96, 128, 64, 8, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(Config::kThreads) dropout_causal_hd96_fp16_fwd(const attnc::FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::forward<Config, Variant>(p, smem);
}
