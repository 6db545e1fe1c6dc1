// Sample of generated backward code: dropout, no mask, fp16, head dim 72 (padded to 80 in the GEMMs).
// GQA/MQA (heads_q != heads_kv) is a runtime matter: nothing here depends on it.
//
// Launch geometry (Bq, Bkv: the tile sizes of the Config each kernel is instantiated with):
//   dropout_hd72_fp16_bwd_preprocess  grid (ceil(q_len / 64), heads_q, batch),   block KvConfig::kThreads, smem 0
//   dropout_hd72_fp16_bwd_kv          grid (ceil(kv_len / 128), heads_kv, batch), block KvConfig::kThreads,
//                          smem KvConfig::kSmemBytes (dq_accum zeroed by preprocess)
//   dropout_hd72_fp16_bwd_kv_nodq     as _bwd_kv (no dq_accum writes; deterministic mode)
//   dropout_hd72_fp16_bwd_convert_dq  grid (ceil(q_len / 64), heads_q, batch),   block KvConfig::kThreads, smem 0
//   dropout_hd72_fp16_bwd_q           grid (ceil(q_len / 128), heads_q, batch),  block QConfig::kThreads,
//                          smem QConfig::kSmemBytesQ
// Default order: preprocess, kv, convert_dq. Deterministic: preprocess (dq_accum = null), kv_nodq, q.
// (minBlocks = 1 in __launch_bounds__: without it ptxas may cap registers at 128 for occupancy
// and spill, as it did for hd32.)
#include "attnc/sm80/backward.h"

namespace {
struct Variant {
  static constexpr bool kHasMask = false, kHasScore = false, kHasDropout = true;
  static constexpr int kDropoutRounds = 7;  // Philox4x32 rounds (philox.h)
  template <class P, class I>
  ATTNC_HD static auto mask(const P&, I, I, I q, I) {
    return attnc::expr::mask_result(true, q);
  }
  template <class P>
  ATTNC_DEVICE static float score(const P&, float score, int, int, int, int) { return score; }
  template <class P>
  ATTNC_DEVICE static float score_grad(const P&, float, int, int, int, int) { return 1.0f; }
};
using KvConfig = attnc::sm80::BwdConfig<attnc::half, 72, 72, 64, 128, 8, 1>;
using QConfig = attnc::sm80::BwdConfig<attnc::half, 72, 72, 128, 64, 8, 2>;
}  // namespace

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) dropout_hd72_fp16_bwd_preprocess(const attnc::BwdParams p) {
  attnc::sm80::backwardPreprocess<KvConfig, Variant>(p, nullptr);
}

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) dropout_hd72_fp16_bwd_kv(const attnc::BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::backwardKV<KvConfig, Variant, true>(p, smem);
}

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) dropout_hd72_fp16_bwd_kv_nodq(const attnc::BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::backwardKV<KvConfig, Variant, false>(p, smem);
}

extern "C" __global__ void __launch_bounds__(KvConfig::kThreads, 1) dropout_hd72_fp16_bwd_convert_dq(const attnc::BwdParams p) {
  attnc::sm80::backwardConvertDQ<KvConfig, Variant>(p, nullptr);
}

extern "C" __global__ void __launch_bounds__(QConfig::kThreads, 1) dropout_hd72_fp16_bwd_q(const attnc::BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  attnc::sm80::backwardQ<QConfig, Variant>(p, smem);
}
