// Sample of generated code: the decode kernel for a document mask (a declared input read along
// positions), GQA group 8, fp16, head dim 64, Q's fragments in registers, 16 packed rows.
#include "attnc/sm80/decode.h"

namespace {
namespace ex = attnc::expr;
struct Variant {
  static constexpr bool kHasMask = true, kHasScore = false;
  template <class P, class I>
  ATTNC_HD static auto mask(const P& p, I b, I h, I q, I k) {
    auto v1 = ex::add(q, ex::sub(p.kv_len, p.q_len));
    auto v2 = ex::load_i32(p.inputs[0], 0, 0, v1, ex::input_extents(p));
    auto v3 = ex::load_i32(p.inputs[0], 0, 0, k, ex::input_extents(p));
    return ex::mask_result(ex::land(ex::cmp_eq(v2, v3), ex::cmp_ge(v1, k)), q);
  }
};
using DecodeConfig = attnc::sm80::DecodeConfig<attnc::half, 64, 64, 8, 1, 4, true>;
}  // namespace

extern "C" __global__ void __launch_bounds__(DecodeConfig::kThreads)
    decode_document_decode(const __grid_constant__ attnc::DecodeParams p) {
  extern __shared__ __align__(128) unsigned char smem128[];
  attnc::sm80::decode<DecodeConfig, Variant>(p, smem128);
}
