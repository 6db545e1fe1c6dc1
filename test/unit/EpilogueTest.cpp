// templates/attnc/common/epilogue.h on the host: the three ways a kernel masks a score tile (the
// sm_80 forward's per-element branch, the sm_90a forward's branch-free form, and the decisions made
// as bits before the scores exist, then applied) set the same elements to -inf, and those are the
// elements the scalar rule drops: keys at or past kv_len always, and with a per-element tile the
// Variant's mask at the clamped row, also where the Variant's mask is split into row, key and join
// parts (MaskSplit.cpp emitMaskSplit). And the forward's dropout decisions, one Philox call per four
// n8 tiles or per pair of them, are each element's own decision under philox.h's mapping.
#include "attnc/common/epilogue.h"

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

// The same kind of mask, split as EmitCUDA emits a mask that reads inputs: a part of the row, a
// part of the key, and their join (forEachKeep takes the row parts once per row and the key parts
// once per key). Each part is a different function of its index, so a row or key part handed to
// the wrong element changes the decision.
struct SplitPatternVariant {
  static constexpr bool kHasMask = true;
  static constexpr bool kMaskSplit = true;
  static int rowPart(int b, int h, int q) { return q * 7 + b + 2 * h; }
  static int colPart(int k) { return k * 3 + (k >> 2); }
  static bool mask(const FwdParams&, int b, int h, int q, int k) {
    return ((rowPart(b, h, q) + colPart(k) + (q ^ k)) % 5) != 0;
  }
  struct MaskRow {
    int v;
  };
  struct MaskCol {
    int v;
  };
  static MaskRow mask_row(const FwdParams&, int b, int h, int q) { return MaskRow{rowPart(b, h, q)}; }
  static MaskCol mask_col(const FwdParams&, int, int, int k) { return MaskCol{colPart(k)}; }
  static bool mask_join(const FwdParams&, int, int, int q, int k, const MaskRow& r, const MaskCol& c) {
    return ((r.v + c.v + (q ^ k)) % 5) != 0;
  }
};
static_assert(sm80::MaskSplitOf<SplitPatternVariant>::value && !sm80::MaskSplitOf<PatternVariant>::value,
              "MaskSplitOf detects kMaskSplit");

template <class Variant, int MTiles, int NTiles>
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
    sm80::applyMask<Variant, false>(branchy, p, b, h, qRow, kCol, perElement);
    sm80::applyMask<Variant, true>(branchFree, p, b, h, qRow, kCol, perElement);
    const sm80::KeepBits<MTiles, NTiles> keep =
        sm80::maskKeepBits<Variant, MTiles, NTiles>(p, b, h, qRow, kCol, perElement);
    sm80::applyKeepBits(fromBits, keep);
    for (int mi = 0; mi < MTiles; ++mi)
      for (int ni = 0; ni < NTiles; ++ni)
        for (int c = 0; c < 4; ++c) {
          const int q = std::min(qRow + 16 * mi + 8 * (c / 2), p.q_len - 1);
          const int k = kCol + 8 * ni + c % 2;
          const bool kept = k < p.kv_len && (!perElement || Variant::mask(p, b, h, q, k));
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
    checkTile<PatternVariant, 1, 16>(rng);  // the sm_90a forward's hd128 tile: 64 bits, two words
    checkTile<PatternVariant, 1, 8>(rng);
    checkTile<PatternVariant, 2, 4>(rng);   // the sm_80 forward's layout: two m16 tiles
    checkTile<PatternVariant, 1, 32>(rng);  // B_c = 256: four words
    checkTile<SplitPatternVariant, 1, 16>(rng);
    checkTile<SplitPatternVariant, 2, 4>(rng);
    checkTile<SplitPatternVariant, 1, 32>(rng);
  }
}

// forEachDropoutDecision visits every element of a lane's accumulator once, with the decision
// philox.h's mapping gives that element alone (dropoutKept), for kv tiles of NTiles n8 tiles at
// multiples of their width: one call per four n8 tiles where that is a multiple of 32 keys, else a
// call per pair (dropoutGroupTiles).
template <int MTiles, int NTiles>
void checkDropout(std::mt19937& rng) {
  FwdParams p{};
  const u64 seed = (u64(rng()) << 32) | rng();
  p.dropout_offset = (u64(rng()) << 32) | rng();
  dropoutKeySchedule(seed, p.dropout_offset, p.dropout_keys);
  const u32 threshold = dropoutThreshold(float(rng() % 1000) / 1000.0f);
  const u32 batchHead = rng() % 64;
  const int lane = int(rng() % 32);
  const int qRow = 16 * int(rng() % 20) + lane / 4;
  const int tileStart = 8 * NTiles * int(rng() % 40);
  const int kCol = tileStart + 2 * (lane % 4);
  int visits[MTiles][NTiles][4] = {};
  sm80::forEachDropoutDecision<kDropoutRoundsDefault, MTiles, NTiles>(
      p, batchHead, threshold, qRow, kCol, [&](int mi, int ni, int c, bool kept) {
        ++visits[mi][ni][c];
        const int q = qRow + 16 * mi + 8 * (c / 2), k = kCol + 8 * ni + c % 2;
        ASSERT_EQ(kept, dropoutKept<kDropoutRoundsDefault>(p.dropout_keys, p.dropout_offset,
                                                           batchHead, threshold, u32(q), u32(k)))
            << "q " << q << " k " << k << " threshold " << threshold;
      });
  for (int mi = 0; mi < MTiles; ++mi)
    for (int ni = 0; ni < NTiles; ++ni)
      for (int c = 0; c < 4; ++c) ASSERT_EQ(visits[mi][ni][c], 1);
}

TEST(Epilogue, DropoutDecisionsAreEachElementsOwn) {
  std::mt19937 rng(9);
  for (int round = 0; round < 100; ++round) {
    checkDropout<1, 16>(rng);  // sm_90a hd128, B_c = 128: four calls a row pair
    checkDropout<1, 14>(rng);  // hd32's B_c = 112: a call per pair of n8 tiles
    checkDropout<1, 6>(rng);   // B_c = 48: pairs, tiles at odd and even multiples of 16
    checkDropout<2, 8>(rng);   // the sm_80 forward's layout, B_c = 64
    checkDropout<1, 4>(rng);   // hd256's B_c = 32
  }
}

}  // namespace
}  // namespace attnc
