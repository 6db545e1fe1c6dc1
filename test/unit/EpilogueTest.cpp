// templates/attnc/sm80/epilogue.h on the host: the three ways a kernel masks a score tile (the
// sm_80 forward's per-element branch, the sm_90a forward's branch-free form, and the decisions made
// as bits before the scores exist, then applied) set the same elements to -inf, and those are the
// elements the scalar rule drops: keys at or past kv_len always, and with a per-element tile the
// Variant's mask at the clamped row.
#include "attnc/sm80/epilogue.h"

#include <gtest/gtest.h>

#include <random>

namespace attnc {
namespace {

// A mask with no structure a tile could hide a wrong index in.
struct PatternVariant {
  static constexpr bool kHasMask = true;
  static bool mask(const FwdParams&, int b, int h, int q, int k) {
    return ((q * 7 + k * 3 + b + 2 * h) % 5) != 0;
  }
};

template <int MTiles, int NTiles>
void checkTile(std::mt19937& rng) {
  FwdParams p{};
  p.q_len = 1 + int(rng() % 300);
  p.kv_len = 1 + int(rng() % 300);
  const int b = int(rng() % 3), h = int(rng() % 4);
  // A lane's first row and key, as in the mma / wgmma accumulator layouts (epilogue.h).
  const int lane = int(rng() % 32);
  const int qRow = 16 * int(rng() % 20) + lane / 4;
  const int kCol = 8 * int(rng() % 40) + 2 * (lane % 4);
  for (const bool perElement : {false, true}) {
    float branchy[MTiles][NTiles][4], branchFree[MTiles][NTiles][4], fromBits[MTiles][NTiles][4];
    for (int mi = 0; mi < MTiles; ++mi)
      for (int ni = 0; ni < NTiles; ++ni)
        for (int c = 0; c < 4; ++c)
          branchy[mi][ni][c] = branchFree[mi][ni][c] = fromBits[mi][ni][c] = 1.0f + float(c);
    sm80::applyMask<PatternVariant, false>(branchy, p, b, h, qRow, kCol, perElement);
    sm80::applyMask<PatternVariant, true>(branchFree, p, b, h, qRow, kCol, perElement);
    const sm80::KeepBits<MTiles, NTiles> keep =
        sm80::maskKeepBits<PatternVariant, MTiles, NTiles>(p, b, h, qRow, kCol, perElement);
    sm80::applyKeepBits(fromBits, keep);
    for (int mi = 0; mi < MTiles; ++mi)
      for (int ni = 0; ni < NTiles; ++ni)
        for (int c = 0; c < 4; ++c) {
          const int q = std::min(qRow + 16 * mi + 8 * (c / 2), p.q_len - 1);
          const int k = kCol + 8 * ni + c % 2;
          const bool kept = k < p.kv_len && (!perElement || PatternVariant::mask(p, b, h, q, k));
          const float want = kept ? 1.0f + float(c) : -kInfinity;
          ASSERT_EQ(branchy[mi][ni][c], want) << "per-element branch, element " << mi << "," << ni << "," << c;
          ASSERT_EQ(branchFree[mi][ni][c], want) << "branch-free, element " << mi << "," << ni << "," << c;
          ASSERT_EQ(fromBits[mi][ni][c], want) << "keep bits, element " << mi << "," << ni << "," << c;
          ASSERT_EQ(keep.kept(mi, ni, c), kept);
        }
  }
}

TEST(Epilogue, MaskFormsAgreeWithTheScalarRule) {
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    checkTile<1, 16>(rng);  // the sm_90a forward's hd128 tile: 64 bits, two words
    checkTile<1, 8>(rng);
    checkTile<2, 4>(rng);   // the sm_80 forward's layout: two m16 tiles
    checkTile<1, 32>(rng);  // B_c = 256: four words
  }
}

}  // namespace
}  // namespace attnc
