// Sample TU: seq_params.h and packed_rows.h in device code, the way the decode kernel uses them (a
// block's view of its sequence, its packed rows' (q, h), the score and mask steps on a packed
// score tile, a kv tile walk over the view), so nvcc and NVRTC see them instantiated and not only
// parsed. The Variant is a softcapped document-causal one in the emitted form (EmitVariant.cpp).
#include "attnc/common/packed_rows.h"
#include "attnc/common/seq_params.h"

namespace {
namespace ex = attnc::expr;

struct SoftcapDocumentVariant {
  static constexpr bool kHasMask = true;
  template <class P, class I>
  ATTNC_HD static auto mask(const P& p, I b, I h, I q, I k) {
    auto v0 = ex::sub(p.kv_len, p.q_len);
    auto v1 = ex::add(q, v0);
    auto v2 = ex::load_i32(p.inputs[0], 0, 0, v1, ex::input_extents(p));
    auto v3 = ex::load_i32(p.inputs[0], 0, 0, k, ex::input_extents(p));
    auto v4 = ex::land(ex::cmp_eq(v2, v3), ex::cmp_ge(v1, k));
    return ex::mask_result(v4, q);
  }
  template <class P, class Q = int, class S = float>
  ATTNC_DEVICE static float score(const P& p, S score, int b, int h, Q q, Q k) {
    return ex::mul(30.0f, ex::score_tanh<P>(ex::fast_div(score, 30.0f)));
  }
};

constexpr int kGroup = 4, kMTiles = 1, kNTiles = 8, kBlockKV = 64;
}  // namespace

// One warp per (sequence, kv head): a 16 x 64 packed score tile of made-up scores, scored and
// masked against each live kv tile of the sequence, the row sums written out.
extern "C" __global__ void __launch_bounds__(32)
    seq_view_sample(const attnc::FwdParams p, const attnc::SeqLayout seq, float* rowSums) {
  const int b = int(blockIdx.y), hKv = int(blockIdx.x), lane = int(threadIdx.x);
  const attnc::SeqView<attnc::FwdParams> view = attnc::seqView(p, seq, b);
  if (view.q_len == 0 || view.kv_len == 0) return;
  using Rows = attnc::PackedRows<kGroup>;
  const int rowHi = attnc::minOf(Rows::rows(view.q_len), 16) - 1;
  const ex::IntI queries = Rows::queries(0, rowHi, view.q_len);
  const attnc::KvTiles<SoftcapDocumentVariant, kBlockKV, attnc::SeqView<attnc::FwdParams>, false>
      tiles(view, b, Rows::head(0, hKv), queries.lo, queries.hi);
  const attnc::sm80::PackedLaneRows<kGroup, kMTiles> rows(lane / 4, hKv, view.q_len);
  float sum[kMTiles][2] = {};
  ex::Tri cls;
  const int last = tiles.last();
  for (int t = tiles.nextLive(tiles.first(), last, cls); t <= last;
       t = tiles.nextLive(t + 1, last, cls)) {
    float s[kMTiles][kNTiles][4];
    attnc::sm80::forEachIndex<kMTiles, kNTiles>(
        [&](int mi, int ni, int c) { s[mi][ni][c] = float(lane + ni - c) * 0.25f; });
    const int kCol = t * kBlockKV + 2 * (lane % 4);
    attnc::sm80::applyScorePacked<SoftcapDocumentVariant, kGroup>(s, view, b, rows, kCol);
    attnc::sm80::applyMaskPacked<SoftcapDocumentVariant, kGroup>(
        s, view, b, rows, kCol, cls != ex::Tri::True || tiles.isTail(t));
    attnc::sm80::forEachIndex<kMTiles, kNTiles>(
        [&](int mi, int ni, int c) { sum[mi][c >> 1] += __expf(s[mi][ni][c]); });
  }
  float* out = rowSums + ((attnc::i64(b) * p.heads_kv + hKv) * 32 + lane) * 2 * kMTiles;
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int j = 0; j < 2; ++j) out[2 * mi + j] = sum[mi][j];
}
