// expr::Scaled and expr::FPos (templates/attnc/common/expr.h), the raw score with the softmax
// scale and the float of a position that the sm_90a forward hands a score hook: every operation
// a generated hook can apply to them resolves to one overload and gives, within a few ulp, what it
// gives on the plain float score and int positions.
#include "attnc/common/expr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace attnc {
namespace {

namespace ex = expr;
using ex::FPos;
using ex::Pos;
using ex::Scaled;

// Hooks in the generated code's shape: a template over the score's and the positions' types, one
// ex:: call a step. Each mixes the score and positions as the spec language allows.
template <class S, class Q>
float alibi(S score, Q q, Q k, float slope) {
  return ex::sub(score, ex::mul(slope, ex::to_f32(ex::sub(q, k))));
}
template <class S, class Q>
float selected(S score, Q q, Q k) {
  auto far = ex::cmp_gt(q, ex::add(k, 10));
  auto half = ex::mul(score, 0.5f);
  return ex::sub(ex::select(far, half, score), ex::mul(0.01f, ex::to_f32(ex::sub(q, k))));
}
template <class S, class Q>
float product(S score, Q q, Q k) {
  auto d = ex::to_f32(ex::sub(q, k));
  return ex::add(ex::mul(ex::mul(score, d), 0.001f), ex::min(score, d));
}
template <class S, class Q>
float itself(S score, Q q, Q k) {
  auto d = ex::to_f32(ex::sub(k, q));
  return ex::add(ex::add(ex::mul(ex::mul(score, score), 0.001f), ex::max(score, d)),
                 ex::sub(ex::sub(ex::to_f32(ex::sub(q, k)), score), ex::neg(score)));
}
template <class S, class Q>
float quotient(S score, Q q, Q k) {
  auto d = ex::abs(ex::to_f32(ex::sub(q, k)));
  return ex::add(ex::fast_div(score, ex::add(1.0f, d)), ex::fast_div(score, 30.0f));
}

// |a - b| within `ulps` ulp of the larger magnitude among a, b and `scale` (a term whose rounding
// the sum carries).
void expectNear(float a, float b, float scale, float ulps) {
  const float mag = std::fmax(std::fmax(std::fabs(a), std::fabs(b)), std::fabs(scale));
  EXPECT_LE(std::fabs(a - b), ulps * (std::nextafter(mag, 1e30f) - mag)) << a << " vs " << b;
}

TEST(ExprScaled, HooksAgreeWithThePlainScoreAndPositions) {
  std::mt19937 rng(20261204);
  std::uniform_real_distribution<float> raw(-8.0f, 8.0f), slope(0.0039f, 0.71f);
  std::uniform_int_distribution<int> base(0, 8191), off(0, 127);
  const float scale = 1.0f / std::sqrt(128.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = raw(rng), s = slope(rng);
    const Pos q{base(rng), off(rng)}, k{base(rng), off(rng)};
    const int qi = int(q), ki = int(k);
    const Scaled sx{x, scale};
    const float plain = x * scale;
    // The products with a distance carry the rounding of slope * base (up to 8191 * 0.71).
    const float far = s * float(q.base - k.base);
    expectNear(alibi(sx, q, k, s), alibi(plain, qi, ki, s), far, 4);
    expectNear(selected(sx, q, k), selected(plain, qi, ki), 0.01f * float(q.base - k.base), 4);
    expectNear(product(sx, q, k), product(plain, qi, ki), 0.001f * plain * float(q.base - k.base), 8);
    expectNear(itself(sx, q, k), itself(plain, qi, ki), float(q.base - k.base), 8);
    expectNear(quotient(sx, q, k), quotient(plain, qi, ki), plain, 4);
  }
}

TEST(ExprScaled, FirstStepsFoldTheScale) {
  const Scaled sx{3.0f, 0.125f};
  EXPECT_EQ(ex::sub(sx, 0.25f), std::fmaf(3.0f, 0.125f, -0.25f));
  EXPECT_EQ(ex::add(sx, 0.25f), std::fmaf(3.0f, 0.125f, 0.25f));
  EXPECT_EQ(ex::add(0.25f, sx), std::fmaf(3.0f, 0.125f, 0.25f));
  const Scaled halved = ex::mul(sx, 0.5f);  // stays unmultiplied: x and scale * 0.5
  EXPECT_EQ(halved.x, 3.0f);
  EXPECT_EQ(halved.scale, 0.0625f);
  EXPECT_EQ(float(ex::fast_div(sx, 2.0f)), 0.1875f);
  EXPECT_EQ(float(sx), 0.375f);
}

TEST(ExprScaled, PositionProductsAreOneFmaOfTheOffset) {
  const FPos d = ex::to_f32(ex::sub(Pos{1000, 9}, Pos{990, 3}));  // 10 + 6
  EXPECT_EQ(d.base, 10.0f);
  EXPECT_EQ(d.off, 6.0f);
  EXPECT_EQ(float(d), 16.0f);
  EXPECT_EQ(ex::mul(0.5f, d), std::fmaf(0.5f, 6.0f, 0.5f * 10.0f));
  EXPECT_EQ(ex::mul(d, 0.5f), 8.0f);
  EXPECT_EQ(ex::mul(d, d), 256.0f);
}

}  // namespace
}  // namespace attnc
