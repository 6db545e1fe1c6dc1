// templates/attnc/common/seq_params.h and packed_rows.h on the host: a Variant's hooks called
// through a sequence's view see that sequence's lengths (bottom-right causal aligns per sequence)
// while declared inputs keep the launch's extents; bad lengths and offsets are clamped; a tile
// walk over a view covers the sequence's keys; packed rows map to (q, h) and back, and the packed
// score and mask steps use each row's own (q, h).
#include "attnc/common/packed_rows.h"
#include "attnc/common/seq_params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace attnc {
namespace {

namespace ex = attnc::expr;

// The mask `{document: doc, causal: true}` as EmitVariant.cpp emits it (examples/document.yaml):
// bottom-right causal from p.q_len and p.kv_len, doc ids read through input_extents(p).
struct DocumentCausalVariant {
  static constexpr bool kHasMask = true;
  static constexpr bool kHasScore = false;
  template <class P, class I>
  static auto mask(const P& p, I b, I h, I q, I k) {
    auto v0 = ex::sub(p.kv_len, p.q_len);
    auto v1 = ex::add(q, v0);
    auto v2 = ex::load_i32(p.inputs[0], 0, 0, v1, ex::input_extents(p));
    auto v3 = ex::load_i32(p.inputs[0], 0, 0, k, ex::input_extents(p));
    auto v4 = ex::cmp_eq(v2, v3);
    auto v5 = ex::sub(p.kv_len, p.q_len);
    auto v6 = ex::add(q, v5);
    auto v7 = ex::cmp_ge(v6, k);
    auto v8 = ex::land(v4, v7);
    return ex::mask_result(v8, q);
  }
};

// `mask: causal` as emitted.
struct CausalVariant {
  static constexpr bool kHasMask = true;
  static constexpr bool kHasScore = false;
  template <class P, class I>
  static auto mask(const P& p, I b, I h, I q, I k) {
    auto v0 = ex::sub(p.kv_len, p.q_len);
    auto v1 = ex::add(q, v0);
    auto v2 = ex::cmp_ge(v1, k);
    return ex::mask_result(v2, q);
  }
};

// A launch of 4 sequences, q_len <= 7 and kv_len <= 300 (its maxima), packed Q and paged K/V.
struct Launch {
  FwdParams p{};
  SeqLayout seq{};
  std::vector<int> cuQ{0, 1, 8, 12, 13};   // q lengths 1, 7, 4, 1
  std::vector<int> kvLens{17, 300, 4, 0};  // the last sequence is empty
  std::vector<int> table = std::vector<int>(4 * 5, 0);

  Launch() {
    p.batch = 4;
    p.heads_q = 8;
    p.heads_kv = 2;
    p.q_len = 7;
    p.kv_len = 300;
    p.scale = 0.125f;
    seq.cu_seqlens_q = cuQ.data();
    seq.seq_lens_kv = kvLens.data();
    seq.block_table = table.data();
    seq.block_table_stride = 5;
    seq.max_pages = 5;
    seq.page_shift = 6;  // 5 pages of 64 rows: 320 >= 300
    seq.num_pages = 20;
    seq.total_q = 13;
  }
};

TEST(SeqView, LengthsAndStartsAreTheSequences) {
  Launch l;
  const int wantQ[] = {1, 7, 4, 1}, wantStart[] = {0, 1, 8, 12};
  for (int b = 0; b < 4; ++b) {
    const SeqView<FwdParams> v = seqView(l.p, l.seq, b);
    EXPECT_EQ(v.q_len, wantQ[b]) << b;
    EXPECT_EQ(v.q_start, wantStart[b]) << b;
    EXPECT_EQ(v.kv_len, l.kvLens[b]) << b;
    EXPECT_EQ(v.kv_start, 0) << b;
    EXPECT_EQ(v.batch, 4);
    EXPECT_EQ(v.heads_q, 8);
    EXPECT_EQ(v.scale, 0.125f);
    EXPECT_EQ(v.inputs, l.p.inputs);
    EXPECT_EQ(&v.base, &l.p);
  }
  // No layout: the launch's own lengths.
  const SeqView<FwdParams> contiguous = seqView(l.p, SeqLayout{}, 2);
  EXPECT_EQ(contiguous.q_len, 7);
  EXPECT_EQ(contiguous.kv_len, 300);
  EXPECT_EQ(contiguous.q_start, 0);
}

// Bottom-right causal through a view keeps (q, k) where k <= q + kv_b - q_b: sequence 1 (7
// queries, 300 keys) and 2 (4 queries, 4 keys) align differently from each other and from the
// launch's 7 x 300.
TEST(SeqView, CausalAlignsPerSequence) {
  Launch l;
  int differFromLaunch = 0;
  for (int b = 0; b < 4; ++b) {
    const SeqView<FwdParams> v = seqView(l.p, l.seq, b);
    for (int q = 0; q < v.q_len; ++q)
      for (int k = 0; k < v.kv_len; ++k) {
        const bool want = k <= q + v.kv_len - v.q_len;
        ASSERT_EQ(bool(CausalVariant::mask(v, b, 0, q, k)), want) << b << " " << q << " " << k;
        differFromLaunch += bool(CausalVariant::mask(l.p, b, 0, q, k)) != want;
      }
  }
  EXPECT_GT(differFromLaunch, 0);
}

// Declared inputs keep the launch's extents: positions = max(q_len, kv_len) of the launch, not
// of the sequence, so the document mask reads doc at the sequence's positions up to the launch's
// longest (a clamp to the sequence's would read doc[kv_b - 1] for every later key).
TEST(SeqView, InputExtentsKeepTheLaunchPositions) {
  Launch l;
  std::vector<int> doc(300);
  for (int i = 0; i < 300; ++i) doc[i] = i / 10;
  l.p.inputs[0] = InputRef{doc.data(), 0, 0, 1, nullptr};
  for (int b = 0; b < 4; ++b) {
    const SeqView<FwdParams> v = seqView(l.p, l.seq, b);
    const ex::InputExtents e = ex::input_extents(v);
    EXPECT_EQ(e.batch, 4);
    EXPECT_EQ(e.heads, 8);
    EXPECT_EQ(e.positions, 300) << b;
  }
  // Sequence 2 has 4 keys: position 250 is past it but inside the launch's extent; the mask of
  // (q 0, k 250) compares doc[q'] with doc[250], where q' = 0 + 4 - 4 = 0.
  const SeqView<FwdParams> v = seqView(l.p, l.seq, 2);
  EXPECT_EQ(ex::load_i32(v.inputs[0], 2, 0, 250, ex::input_extents(v)), 25);
  EXPECT_EQ(ex::load_i32(v.inputs[0], 2, 0, 350, ex::input_extents(v)), 29);
  // Over intervals the hull is over the launch's positions too.
  const ex::IntI hull =
      ex::load_i32(v.inputs[0], ex::IntI(2), ex::IntI(0), ex::IntI(0, 299), ex::input_extents(v));
  EXPECT_EQ(hull.lo, 0);
  EXPECT_EQ(hull.hi, 29);
  // The per-element mask matches its definition at the sequence's alignment.
  const SeqView<FwdParams> s1 = seqView(l.p, l.seq, 1);
  for (int q = 0; q < s1.q_len; ++q)
    for (int k = 0; k < s1.kv_len; ++k) {
      const int qa = q + s1.kv_len - s1.q_len;
      ASSERT_EQ(bool(DocumentCausalVariant::mask(s1, 1, 0, q, k)), doc[qa] == doc[k] && k <= qa);
    }
}

// A kv tile walk over a view has the sequence's tiles and bounds (tiles of 8 keys): sequence 1's
// first query sees keys 0..293 (tile 36 last), its last query all 300 (tile 37, the tail);
// sequence 0 (1 query, 17 keys) 3 tiles; the empty sequence 3 none.
TEST(SeqView, TileWalkCoversTheSequence) {
  Launch l;
  using Walk = KvTiles<CausalVariant, 8, SeqView<FwdParams>, false>;
  static_assert(!Walk::kReadsClasses, "a view never reads the launch's class rows");
  static_assert(IsForwardParams<SeqView<FwdParams>>::value, "a view of FwdParams walks as it");
  const SeqView<FwdParams> s1 = seqView(l.p, l.seq, 1);
  const Walk first(s1, 1, 0, 0, 0);
  EXPECT_EQ(first.numTiles, 38);
  EXPECT_EQ(first.first(), 0);
  EXPECT_EQ(first.last(), 36);
  const Walk all(s1, 1, 0, 0, 6);
  EXPECT_EQ(all.last(), 37);
  EXPECT_TRUE(all.isTail(37));
  const SeqView<FwdParams> s0 = seqView(l.p, l.seq, 0);
  const Walk one(s0, 0, 0, 0, 0);
  EXPECT_EQ(one.numTiles, 3);
  EXPECT_EQ(one.last(), 2);
  const SeqView<FwdParams> s3 = seqView(l.p, l.seq, 3);
  EXPECT_EQ(Walk(s3, 3, 0, 0, 0).numTiles, 0);
}

// Device arrays are not trusted: offsets outside the packed rows, decreasing offsets, negative
// lengths and lengths past the table's pages or the launch's longest are clamped.
TEST(SeqView, BadLengthsAreClamped) {
  Launch l;
  l.cuQ = {-5, 3, 2, 40, 2000000000};
  l.kvLens = {-1, 1000, 299, 2000000000};
  l.seq.cu_seqlens_q = l.cuQ.data();
  l.seq.seq_lens_kv = l.kvLens.data();
  l.seq.max_pages = 4;  // 256 rows a sequence
  const SeqView<FwdParams> v0 = seqView(l.p, l.seq, 0);
  EXPECT_EQ(v0.q_start, 0);  // -5 -> 0
  EXPECT_EQ(v0.q_len, 3);
  EXPECT_EQ(v0.kv_len, 0);  // -1
  const SeqView<FwdParams> v1 = seqView(l.p, l.seq, 1);
  EXPECT_EQ(v1.q_start, 3);
  EXPECT_EQ(v1.q_len, 0);     // 2 < 3: not increasing
  EXPECT_EQ(v1.kv_len, 256);  // 4 pages of 64
  const SeqView<FwdParams> v2 = seqView(l.p, l.seq, 2);
  EXPECT_EQ(v2.q_start, 2);
  EXPECT_EQ(v2.q_len, 7);     // 40 -> total_q 13, then the launch's 7
  EXPECT_EQ(v2.kv_len, 256);  // 299 > 4 pages
  const SeqView<FwdParams> v3 = seqView(l.p, l.seq, 3);
  EXPECT_EQ(v3.q_start, 13);
  EXPECT_EQ(v3.q_len, 0);
  EXPECT_EQ(v3.kv_len, 256);
  // Without a table, the launch's kv_len bounds a length; packed K/V bounds it by total_kv.
  l.seq.block_table = nullptr;
  EXPECT_EQ(seqView(l.p, l.seq, 1).kv_len, 300);
  std::vector<int> cuKv{0, 10, 5, 400, 400};
  l.seq.seq_lens_kv = nullptr;
  l.seq.cu_seqlens_kv = cuKv.data();
  l.seq.total_kv = 350;
  EXPECT_EQ(seqView(l.p, l.seq, 0).kv_len, 10);
  EXPECT_EQ(seqView(l.p, l.seq, 1).kv_len, 0);  // decreasing
  EXPECT_EQ(seqView(l.p, l.seq, 2).kv_start, 5);
  EXPECT_EQ(seqView(l.p, l.seq, 2).kv_len, 300);  // 345 rows left, the launch's 300
  EXPECT_EQ(seqView(l.p, l.seq, 3).kv_start, 350);
  EXPECT_EQ(seqView(l.p, l.seq, 3).kv_len, 0);
}

template <int G>
void checkRoundTrip() {
  using Rows = PackedRows<G>;
  for (int hKv = 0; hKv < 3; ++hKv)
    for (int r = 0; r < Rows::rows(9); ++r) {
      const int q = Rows::query(r), h = Rows::head(r, hKv);
      ASSERT_GE(h, hKv * G);
      ASSERT_LT(h, hKv * G + G);
      ASSERT_LT(q, 9);
      ASSERT_EQ(Rows::row(q, h), r) << "G " << G << " row " << r;
      // The hulls of every row range hold each row's (q, h).
      for (int hi = r; hi < std::min(r + 20, Rows::rows(9)); ++hi) {
        const ex::IntI qs = Rows::queries(r, hi, 9), hs = Rows::heads(r, hi, hKv);
        for (int x = r; x <= hi; ++x) {
          ASSERT_TRUE(qs.lo <= Rows::query(x) && Rows::query(x) <= qs.hi);
          ASSERT_TRUE(hs.lo <= Rows::head(x, hKv) && Rows::head(x, hKv) <= hs.hi);
        }
        ASSERT_GE(hs.lo, hKv * G);
        ASSERT_LT(hs.hi, hKv * G + G);
      }
    }
  for (int q = 0; q < 9; ++q)
    for (int h = 0; h < 3 * G; ++h) {
      const int r = Rows::row(q, h);
      ASSERT_EQ(Rows::query(r), q);
      ASSERT_EQ(Rows::head(r, h / G), h);
    }
}

TEST(PackedRows, RowToQueryAndHeadRoundTrips) {
  checkRoundTrip<1>();
  checkRoundTrip<2>();
  checkRoundTrip<3>();
  checkRoundTrip<4>();
  checkRoundTrip<6>();
  checkRoundTrip<8>();
  checkRoundTrip<16>();
  checkRoundTrip<64>();
}

// A mask and a score with no structure a wrong (q, h) could hide in.
struct PatternVariant {
  static constexpr bool kHasMask = true;
  template <class P>
  static bool mask(const P&, int b, int h, int q, int k) {
    return ((q * 7 + k * 3 + b + 5 * h) % 4) != 0;
  }
  template <class P>
  static float score(const P&, float s, int b, int h, int q, int k) {
    return s + float(1000 * h + 100 * q + k + 10000 * b);
  }
};

// The packed score and mask steps give each element the hooks' result at its own row's (q, h):
// q = r / G clamped to the sequence, h = hKv G + r % G.
template <int G, int MTiles, int NTiles>
void checkPackedTile(std::mt19937& rng) {
  Launch l;
  const int b = 1 + int(rng() % 2);
  const SeqView<FwdParams> v = seqView(l.p, l.seq, b);
  const int hKv = int(rng() % 2), lane = int(rng() % 32);
  const int rowBase = 16 * MTiles * int(rng() % 2) + lane / 4;
  const int kCol = 8 * int(rng() % 40) + 2 * (lane % 4);
  const sm80::PackedLaneRows<G, MTiles> rows(rowBase, hKv, v.q_len);
  for (const bool perElement : {false, true}) {
    float s[MTiles][NTiles][4], m[MTiles][NTiles][4];
    for (int mi = 0; mi < MTiles; ++mi)
      for (int ni = 0; ni < NTiles; ++ni)
        for (int c = 0; c < 4; ++c) s[mi][ni][c] = m[mi][ni][c] = 8.0f + float(c);
    sm80::applyScorePacked<PatternVariant, G>(s, v, b, rows, kCol);
    sm80::applyMaskPacked<PatternVariant, G>(m, v, b, rows, kCol, perElement);
    for (int mi = 0; mi < MTiles; ++mi)
      for (int ni = 0; ni < NTiles; ++ni)
        for (int c = 0; c < 4; ++c) {
          const int r = rowBase + 16 * mi + 8 * (c / 2);
          const int q = std::min(r / G, v.q_len - 1), h = hKv * G + r % G;
          const int k = kCol + 8 * ni + c % 2;
          const float score = PatternVariant::score(v, (8.0f + float(c)) * v.scale, b, h, q,
                                                    std::min(k, v.kv_len - 1));
          ASSERT_EQ(s[mi][ni][c], score) << "G " << G << " row " << r << " key " << k;
          const bool kept = k < v.kv_len && (!perElement || PatternVariant::mask(v, b, h, q, k));
          ASSERT_EQ(m[mi][ni][c], kept ? 8.0f + float(c) : -kInfinity)
              << "G " << G << " row " << r << " key " << k << " perElement " << perElement;
        }
  }
}

TEST(PackedRows, ScoreAndMaskUseEachRowsQueryAndHead) {
  std::mt19937 rng(51);
  for (int i = 0; i < 200; ++i) {
    checkPackedTile<1, 1, 8>(rng);
    checkPackedTile<4, 2, 8>(rng);
    checkPackedTile<6, 1, 4>(rng);
    checkPackedTile<8, 2, 4>(rng);
    checkPackedTile<16, 1, 8>(rng);
  }
}

}  // namespace
}  // namespace attnc
