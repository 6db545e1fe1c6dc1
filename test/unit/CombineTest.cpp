// templates/attnc/common/split_combine.h on the host: the combine of split-KV partials, each
// computed in float32 as a split's kernel would (normalized O_s, natural-log lse_s), matches one
// float64 softmax over all of the row's keys; splits that kept no key are never read, and rows
// that kept none give O = 0, LSE = -inf.
#include "attnc/common/split_combine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace attnc {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One row's keys: scores (-inf where masked) and the rows of V.
struct Row {
  std::vector<float> scores;
  std::vector<std::vector<float>> v;  // [key][dv]
};

struct Partials {
  std::vector<float> lse;  // [split]
  std::vector<float> o;    // [split][dv]
};

struct Combined {
  std::vector<double> o;
  double lse;
};

// The reference: one softmax over all keys, in float64.
Combined softmaxReference(const Row& row, int dv) {
  double m = -std::numeric_limits<double>::infinity();
  for (float s : row.scores)
    m = std::max(m, double(s));
  Combined out{std::vector<double>(dv, 0.0), -std::numeric_limits<double>::infinity()};
  if (std::isinf(m))
    return out;
  double sum = 0;
  for (size_t k = 0; k < row.scores.size(); ++k) {
    if (std::isinf(row.scores[k]))
      continue;
    const double p = std::exp(double(row.scores[k]) - m);
    sum += p;
    for (int d = 0; d < dv; ++d)
      out.o[d] += p * row.v[k][d];
  }
  for (double& x : out.o)
    x /= sum;
  out.lse = m + std::log(sum);
  return out;
}

// A split's partial over keys [begin, end), in float32 as the decode kernel leaves it. A split
// that keeps no key has lse -inf and, for the test, NaN in O: the combine must not read it
// (unused workspace may hold anything).
void splitPartial(const Row& row, int begin, int end, int dv, Partials& out) {
  float m = kNegInf;
  for (int k = begin; k < end; ++k)
    m = std::max(m, row.scores[k]);
  if (m == kNegInf) {
    out.lse.push_back(kNegInf);
    out.o.insert(out.o.end(), dv, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  float sum = 0;
  std::vector<float> o(dv, 0.0f);
  for (int k = begin; k < end; ++k) {
    if (row.scores[k] == kNegInf)
      continue;
    const float p = std::exp(row.scores[k] - m);
    sum += p;
    for (int d = 0; d < dv; ++d)
      o[d] += p * row.v[k][d];
  }
  for (float& x : o)
    out.o.push_back(x / sum);
  out.lse.push_back(m + std::log(sum));
}

struct StoreFloat {
  float* o;
  void operator()(int d, float value) { o[d] = value; }
};

Combined combine(const Partials& parts, int dv) {
  std::vector<float> o(dv, -1.0f);
  StoreFloat store{o.data()};
  const float lse = combineRow(parts.lse.data(), 1, parts.o.data(), dv, int(parts.lse.size()), dv,
                               0, 1, store);
  return {std::vector<double>(o.begin(), o.end()), lse};
}

// The same partials combined in float64: what the float32 combine is held to on its own.
Combined combineInDouble(const Partials& parts, int dv) {
  double m = -std::numeric_limits<double>::infinity();
  for (float l : parts.lse)
    m = std::max(m, double(l));
  Combined out{std::vector<double>(dv, 0.0), m};
  if (std::isinf(m))
    return out;
  double sum = 0;
  for (size_t s = 0; s < parts.lse.size(); ++s) {
    if (std::isinf(parts.lse[s]))
      continue;
    const double w = std::exp(double(parts.lse[s]) - m);
    sum += w;
    for (int d = 0; d < dv; ++d)
      out.o[d] += w * parts.o[s * dv + d];
  }
  for (double& x : out.o)
    x /= sum;
  out.lse = m + std::log(sum);
  return out;
}

// Random rows, random split boundaries (empty splits included), a share of masked keys and whole
// masked runs. The combine agrees with the float64 combine of the same partials to 1e-6, and
// end to end (partials summed over up to 2000 keys in float32) with the float64 softmax to 4e-6.
TEST(SplitCombine, MatchesOneSoftmaxOverRandomSplits) {
  std::mt19937 rng(51);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int dv = 64;
  double worstO = 0, worstLse = 0, worstCombineO = 0, worstCombineLse = 0;
  int withEmptySplit = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int keys = 1 + int(rng() % 2000);
    const float spread = trial % 3 == 0 ? 60.0f : 6.0f;  // 60: lse far apart, exp would overflow
    Row row;
    for (int k = 0; k < keys; ++k) {
      row.scores.push_back(rng() % 5 == 0 ? kNegInf : spread * uniform(rng));
      std::vector<float> v(dv);
      for (float& x : v)
        x = uniform(rng);
      row.v.push_back(v);
    }
    if (trial % 4 == 1) {  // a masked run covering whole splits
      const int begin = int(rng() % keys), end = std::min(keys, begin + 300);
      std::fill(row.scores.begin() + begin, row.scores.begin() + end, kNegInf);
    }
    const int splits = 1 + int(rng() % 40);
    std::vector<int> cuts = {0, keys};
    for (int s = 1; s < splits; ++s)
      cuts.push_back(int(rng() % (keys + 1)));
    std::sort(cuts.begin(), cuts.end());
    Partials parts;
    for (size_t s = 0; s + 1 < cuts.size(); ++s)
      splitPartial(row, cuts[s], cuts[s + 1], dv, parts);
    withEmptySplit += std::count(parts.lse.begin(), parts.lse.end(), kNegInf) > 0;

    const Combined want = softmaxReference(row, dv);
    const Combined got = combine(parts, dv);
    const Combined exact = combineInDouble(parts, dv);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ": " << keys << " keys, "
                                    << parts.lse.size() << " splits");
    if (std::isinf(want.lse)) {
      EXPECT_EQ(got.lse, kNegInf);
      continue;
    }
    double scale = 0;
    for (double x : want.o)
      scale = std::max(scale, std::abs(x));
    for (int d = 0; d < dv; ++d) {
      ASSERT_FALSE(std::isnan(got.o[d])) << "column " << d;
      worstO = std::max(worstO, std::abs(got.o[d] - want.o[d]) / scale);
      worstCombineO = std::max(worstCombineO, std::abs(got.o[d] - exact.o[d]) / scale);
    }
    const double lseScale = std::max(1.0, std::abs(want.lse));
    worstLse = std::max(worstLse, std::abs(got.lse - want.lse) / lseScale);
    worstCombineLse = std::max(worstCombineLse, std::abs(got.lse - exact.lse) / lseScale);
  }
  EXPECT_GT(withEmptySplit, 20) << "the sweep covers splits that kept no key";
  // O relative to the row's largest |O|; LSE relative to max(1, |LSE|).
  EXPECT_LT(worstCombineO, 1e-6) << "the combine's own rounding";
  EXPECT_LT(worstCombineLse, 1e-6) << "the combine's own rounding";
  EXPECT_LT(worstO, 4e-6) << "end to end";
  EXPECT_LT(worstLse, 1e-6) << "end to end";
}

TEST(SplitCombine, RowWithNoKeptKeyIsZeroWithLseMinusInfinity) {
  const int dv = 8, splits = 5;
  Partials parts;
  parts.lse.assign(splits, kNegInf);
  parts.o.assign(splits * dv, std::numeric_limits<float>::quiet_NaN());
  const Combined got = combine(parts, dv);
  EXPECT_EQ(got.lse, kNegInf);
  for (double x : got.o)
    EXPECT_EQ(x, 0.0);
}

// One live split passes through unchanged (its weight is exactly 1); the others are never read.
TEST(SplitCombine, OneLiveSplitPassesThrough) {
  const int dv = 4;
  Partials parts;
  parts.lse = {kNegInf, 3.25f, kNegInf};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  parts.o = {nan, nan, nan, nan, 0.5f, -1.5f, 2.0f, 0.125f, nan, nan, nan, nan};
  const Combined got = combine(parts, dv);
  EXPECT_EQ(got.lse, 3.25);
  EXPECT_EQ(got.o, (std::vector<double>{0.5, -1.5, 2.0, 0.125}));
}

// Strided partials and a lane-strided store, as the device's warp per row reads and writes them:
// lanes (d0, step 3) write exactly their columns.
TEST(SplitCombine, StridesAndLaneColumns) {
  const int dv = 7, splits = 3, lseStride = 5, oStride = 11;
  std::vector<float> lse(splits * lseStride, 1e30f), o(splits * oStride, 1e30f);
  const float lses[splits] = {0.0f, std::log(3.0f), kNegInf};
  for (int s = 0; s < splits; ++s) {
    lse[s * lseStride] = lses[s];
    for (int d = 0; d < dv; ++d)
      o[s * oStride + d] = s == 0 ? 1.0f : 2.0f;  // weights 1/4 and 3/4
  }
  std::vector<float> out(dv, -7.0f);
  StoreFloat store{out.data()};
  for (int lane = 0; lane < 3; ++lane) {
    const float got = combineRow(lse.data(), lseStride, o.data(), oStride, splits, dv, lane, 3,
                                 store);
    EXPECT_NEAR(got, std::log(4.0f), 1e-6);
  }
  for (int d = 0; d < dv; ++d)
    EXPECT_NEAR(out[d], 1.75f, 1e-6) << "column " << d;
}

}  // namespace
}  // namespace attnc
