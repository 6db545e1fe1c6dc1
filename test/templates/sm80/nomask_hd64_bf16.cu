// Sample of generated code: no mask, no score hook, bf16, head dim 64.
#include "attnc/sm80/forward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = false, kHasScore = false, kHasDropout = false;
};
using Config = attnc::sm80::FwdConfig<attnc::bf16, 64, 64, 128, 64, 4, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(Config::kThreads) nomask_hd64_bf16_fwd(const attnc::FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::forward<Config, Variant>(p, smem);
}
