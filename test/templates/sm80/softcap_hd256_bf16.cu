// Sample of generated code: tanh soft-capping score hook (score: "30 * tanh(score / 30)"), no
// mask, bf16, head dim 256.
#include "attnc/sm80/forward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = false, kHasScore = true, kHasDropout = false;
  ATTNC_DEVICE static float score(const attnc::FwdParams&, float s, int, int, int, int) {
    using namespace attnc::expr;
    return mul(30.0f, attnc::expr::tanh(div(s, 30.0f)));
  }
};
using Config = attnc::sm80::FwdConfig<attnc::bf16, 256, 256, 64, 64, 4, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(Config::kThreads) softcap_hd256_bf16_fwd(const attnc::FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::forward<Config, Variant>(p, smem);
}
