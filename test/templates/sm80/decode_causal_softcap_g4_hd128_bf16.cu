// Sample of generated code: the decode kernel and its combine for a softcapped bottom-right causal
// spec, GQA group 4, bf16, head dim 128, 32 packed rows (the tiles attn-select-decode-tiles derives
// for sm_90a).
#include "attnc/sm80/decode.h"

namespace {
namespace ex = attnc::expr;
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = true;
  template <class P, class I>
  ATTNC_HD static auto mask(const P& p, I b, I h, I q, I k) {
    auto v0 = ex::add(q, ex::sub(p.kv_len, p.q_len));
    return ex::cmp_ge(v0, k);
  }
  template <class P, class Q = int, class S = float>
  ATTNC_DEVICE static float score(const P& p, S score, int b, int h, Q q, Q k) {
    return ex::mul(30.0f, ex::score_tanh<P>(ex::fast_div(score, 30.0f)));
  }
};
using DecodeConfig = attnc::sm80::DecodeConfig<attnc::bf16, 128, 128, 4, 2, 3, false>;
}  // namespace

extern "C" __global__ void __launch_bounds__(DecodeConfig::kThreads)
    decode_causal_softcap_decode(const __grid_constant__ attnc::DecodeParams p) {
  extern __shared__ __align__(128) unsigned char smem128[];
  attnc::sm80::decode<DecodeConfig, Variant>(p, smem128);
}

extern "C" __global__ void __launch_bounds__(attnc::sm80::kCombineThreads)
    decode_causal_softcap_decode_combine(const attnc::CombineParams p) {
  attnc::sm80::decodeCombine<attnc::bf16, DecodeConfig::kHeadDimV>(p);
}
