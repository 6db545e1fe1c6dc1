// Sample of generated code: sliding window (mask: {window: 256}) plus an ALiBi-style score hook
// reading a declared f32 input `slopes: {dims: [h]}`, fp16, head dim 128 with head_dim_v 64.
#include "attnc/sm80/forward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = true, kHasDropout = false;
  template <class I>
  ATTNC_HD static auto mask(const attnc::FwdParams& p, I, I, I q, I k) {
    using namespace attnc::expr;
    auto qa = add(q, sub(p.kv_len, p.q_len));
    return land(cmp_ge(qa, k), cmp_lt(sub(qa, k), 256));
  }
  ATTNC_DEVICE static float score(const attnc::FwdParams& p, float s, int b, int h, int q, int k) {
    using namespace attnc::expr;
    return add(s, mul(load_f32(p.inputs[1], b, h, 0, input_extents(p)), to_f32(sub(k, q))));
  }
};
using Config = attnc::sm80::FwdConfig<attnc::half, 128, 64, 128, 64, 8, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(Config::kThreads) alibi_window_hd128_fp16_fwd(const attnc::FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::forward<Config, Variant>(p, smem);
}
