// Sample of generated backward code: soft-capping + causal mask, bf16, head dim 256.
// GQA/MQA (heads_q != heads_kv) is a runtime matter: nothing here depends on it.
//
// Launch geometry (Bq, Bkv: the tile sizes of the Config each kernel is instantiated with):
//   softcap_causal_hd256_bf16_bwd_preprocess  grid (ceil(q_len / 64), heads_q, batch),   block KvConfig::kThreads, smem 0
//   softcap_causal_hd256_bf16_bwd_kv          grid (ceil(kv_len / 64), heads_kv, batch), block KvConfig::kThreads,
//                          smem KvConfig::kSmemBytes (dq_accum zeroed by preprocess)
//   softcap_causal_hd256_bf16_bwd_kv_nodq     as _bwd_kv (no dq_accum writes; deterministic mode)
//   softcap_causal_hd256_bf16_bwd_convert_dq  grid (ceil(q_len / 64), heads_q, batch),   block KvConfig::kThreads, smem 0
//   softcap_causal_hd256_bf16_bwd_q           grid (ceil(q_len / 64), heads_q, batch),  block QConfig::kThreads,
//                          smem QConfig::kSmemBytesQ
// Default order: preprocess, kv, convert_dq. Deterministic: preprocess (dq_accum = null), kv_nodq, q.
// (minBlocks = 1 in __launch_bounds__: without it ptxas may cap registers at 128 for occupancy
// and spill, as it did for hd32.)
#include "attnc/sm80/backward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = true, kHasDropout = false;
  template <class P, class I>
  ATTNC_HD static auto mask(const P& p, I b, I h, I q, I k) {
    using namespace attnc::expr;
    auto v0 = add(q, sub(p.kv_len, p.q_len));
    return mask_result(cmp_ge(v0, k), q);
  }
  // score: "30 * tanh(score / 30)"; d/ds = 1 - tanh^2(s / 30).
  template <class P>
  ATTNC_DEVICE static float score(const P&, float score, int, int, int, int) {
    using namespace attnc::expr;
    return mul(30.0f, attnc::expr::tanh(div(score, 30.0f)));
  }
  template <class P>
  ATTNC_DEVICE static float score_grad(const P&, float score, int, int, int, int) {
    using namespace attnc::expr;
    auto t = attnc::expr::tanh(div(score, 30.0f));
    return sub(1.0f, mul(t, t));
  }
};
using KvConfig = attnc::sm80::BwdConfig<attnc::bf16, 256, 256, 64, 64, 8, 1>;
using QConfig = attnc::sm80::BwdConfig<attnc::bf16, 256, 256, 64, 16, 4, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) softcap_causal_hd256_bf16_bwd_preprocess(const attnc::BwdParams p) {
  attnc::sm80::backwardPreprocess<KvConfig, Variant>(p, nullptr);
}

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) softcap_causal_hd256_bf16_bwd_kv(const attnc::BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::backwardKV<KvConfig, Variant, true>(p, smem);
}

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) softcap_causal_hd256_bf16_bwd_kv_nodq(const attnc::BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::backwardKV<KvConfig, Variant, false>(p, smem);
}

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) softcap_causal_hd256_bf16_bwd_convert_dq(const attnc::BwdParams p) {
  attnc::sm80::backwardConvertDQ<KvConfig, Variant>(p, nullptr);
}

extern "C" __global__ void __launch_bounds__(QConfig::kThreads, 1) softcap_causal_hd256_bf16_bwd_q(const attnc::BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::backwardQ<QConfig, Variant>(p, smem);
}
