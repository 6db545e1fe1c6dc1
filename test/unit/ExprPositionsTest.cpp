// expr::Pos (templates/attnc/common/expr.h), the positions the sm_90a forward hands a score hook:
// position arithmetic in that form gives what it gives on the int positions, bit for bit while the
// values stay below 2^24, and every other operation sees the int value.
#include "attnc/common/expr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace attnc {
namespace {

namespace ex = expr;
using ex::Pos;

// The shape of the arithmetic generated hooks do on positions (ALiBi: slope * (q + kv_len - q_len
// - k)), written once as a template over the position type like the generated code.
template <class Q>
float distance(Q q, Q k, int shift) {
  return ex::to_f32(ex::sub(ex::add(q, shift), k));
}
template <class Q>
float mixed(Q q, Q k, int shift) {
  auto d = ex::neg(ex::sub(ex::add(shift, q), ex::add(k, k)));
  return ex::add(ex::to_f32(ex::sub(shift, d)), ex::to_f32(ex::mul(d, 3)));
}

TEST(ExprPositions, ArithmeticMatchesIntPositionsBelow2To24) {
  std::mt19937 rng(20261129);
  std::uniform_int_distribution<int> base(0, (1 << 21) - 1), off(0, 255), shift(-(1 << 21), 1 << 21);
  for (int i = 0; i < 100000; ++i) {
    const Pos q{base(rng), off(rng)}, k{base(rng), off(rng)};
    const int s = shift(rng);
    const int qi = q.base + q.off, ki = k.base + k.off;
    ASSERT_EQ(distance(q, k, s), distance(qi, ki, s)) << q.base << "+" << q.off << " " << k.base << "+" << k.off;
    ASSERT_EQ(mixed(q, k, s), mixed(qi, ki, s));
  }
}

TEST(ExprPositions, SumsKeepTheFormOtherOperationsSeeTheIntValue) {
  const Pos q{1000, 9}, k{990, 3};
  const Pos d = ex::sub(q, k);
  EXPECT_EQ(d.base, 10);
  EXPECT_EQ(d.off, 6);
  EXPECT_EQ(int(d), 16);
  EXPECT_EQ(ex::mul(d, 2), 32);
  EXPECT_TRUE(ex::cmp_ge(q, k));
  EXPECT_FALSE(ex::cmp_lt(q, ex::add(k, 16)));
  EXPECT_TRUE(ex::cmp_lt(q, ex::add(k, 17)));
  EXPECT_EQ(ex::abs(ex::neg(d)), 16);
  EXPECT_EQ(ex::select(true, q, k), 1009);
}

TEST(ExprPositions, PastTwoTo24WithinAnUlpOfTheBase) {
  const Pos q{(1 << 25) + 1, 1};
  const float exact = float(q.base + q.off);
  EXPECT_LE(std::fabs(ex::to_f32(q) - exact), std::nextafter(float(q.base), 1e30f) - float(q.base));
}

}  // namespace
}  // namespace attnc
