// Block summaries of declared inputs (templates/attnc/common/params.h, expr.h) on the host: the
// interval loads that read whole blocks from the summaries give the exact hull of every range, as
// the element-by-element scan does, and the tile walk (kv_tiles.h) of a document mask over them
// agrees with a brute-force classification of every element.
#include "attnc/common/block_order.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/tile_classes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace attnc {
namespace {

using expr::FltI;
using expr::IntI;
using expr::InputExtents;

// What a `<name>_summary` entry writes (summary.h), computed plainly: min and max per block, NaN
// in both words of a block that holds one.
template <class T>
std::vector<SummaryEntry> summarize(const InputRef& in, InputExtents e) {
  const SummaryLayout layout = summaryLayout(in, e.batch, e.heads, e.positions);
  std::vector<SummaryEntry> entries(size_t(layout.entries()));
  for (int b = 0; b < layout.batches; ++b)
    for (int h = 0; h < layout.heads; ++h)
      for (int block = 0; block < layout.blocks; ++block) {
        T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
        bool nan = false;
        for (int pos = block * kSummaryBlock;
             pos < std::min(e.positions, (block + 1) * kSummaryBlock); ++pos) {
          const T v = static_cast<const T*>(in.ptr)[expr::input_offset(in, b, h, pos, e)];
          nan = nan || v != v;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        SummaryEntry& s = entries[size_t(layout.index(b, h, block))];
        s = nan ? SummaryEntry{0x7fffffffu, 0x7fffffffu}
                : SummaryEntry{__builtin_bit_cast(u32, lo), __builtin_bit_cast(u32, hi)};
      }
  return entries;
}

// The exact hull over a box, clamped like the loads clamp.
template <class T>
void exactHull(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e, T& lo, T& hi,
               bool& nan) {
  lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest(), nan = false;
  for (int bi = b.lo; bi <= b.hi; ++bi)
    for (int hi_ = h.lo; hi_ <= h.hi; ++hi_)
      for (int pi = pos.lo; pi <= pos.hi; ++pi) {
        const T v = static_cast<const T*>(in.ptr)[expr::input_offset(in, bi, hi_, pi, e)];
        nan = nan || v != v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
}

// A random [lo, hi] inside [-8, extent + 8), often at or next to block boundaries.
IntI randomRange(std::mt19937& rng, int extent) {
  auto point = [&]() {
    switch (rng() % 4) {
    case 0: return int(rng() % unsigned(extent + 16)) - 8;
    case 1: return int(rng() % unsigned(extent / kSummaryBlock + 1)) * kSummaryBlock - 1 + int(rng() % 3);
    case 2: return extent - 1 - int(rng() % 3);
    default: return int(rng() % 3) - 1;
    }
  };
  int a = point(), b = point();
  if (rng() % 4 == 0) b = a + int(rng() % 8);  // inside one block, mostly
  return IntI(std::min(a, b), std::max(a, b));
}

// An input of [batch, heads, positions] with random strides order (b, h or pos fastest) or a
// stride-0 (broadcast) batch dimension.
struct RandomInput {
  std::vector<int> ints;
  std::vector<float> floats;
  InputRef ref{};
  InputExtents extents{};
};
RandomInput randomInput(std::mt19937& rng, bool f32) {
  RandomInput r;
  r.extents = InputExtents{1 + int(rng() % 3), 1 + int(rng() % 3), 1 + int(rng() % 700)};
  const InputExtents& e = r.extents;
  const size_t n = size_t(e.batch) * e.heads * e.positions;
  const bool broadcastB = rng() % 3 == 0;
  r.ref.stride_pos = 1;
  r.ref.stride_h = e.positions;
  r.ref.stride_b = broadcastB ? 0 : i64(e.positions) * e.heads;
  if (rng() % 2) {  // heads fastest
    r.ref.stride_h = 1;
    r.ref.stride_pos = e.heads;
    r.ref.stride_b = broadcastB ? 0 : i64(e.positions) * e.heads;
  }
  const int spread = 1 + int(rng() % 1000);
  if (f32) {
    r.floats.resize(n);
    const bool withNan = rng() % 2 == 0;
    for (float& v : r.floats)
      v = (withNan && rng() % 500 == 0) ? std::nanf("") : float(int(rng() % unsigned(2 * spread)) - spread) * 0.25f;
    r.ref.ptr = r.floats.data();
  } else {
    r.ints.resize(n);
    for (int& v : r.ints) v = int(rng() % unsigned(2 * spread)) - spread;
    r.ref.ptr = r.ints.data();
  }
  return r;
}

TEST(InputSummary, I32HullIsExactOverRandomRanges) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    RandomInput input = randomInput(rng, false);
    const InputExtents e = input.extents;
    std::vector<SummaryEntry> summaries = summarize<int>(input.ref, e);
    InputRef withSummary = input.ref;
    withSummary.summary = summaries.data();
    for (int query = 0; query < 60; ++query) {
      IntI b = rng() % 3 ? IntI(int(rng() % unsigned(e.batch))) : randomRange(rng, e.batch);
      IntI h = rng() % 3 ? IntI(int(rng() % unsigned(e.heads))) : randomRange(rng, e.heads);
      IntI pos = randomRange(rng, e.positions);
      int lo, hi;
      bool nan;
      exactHull(input.ref, expr::clamp_index(b, e.batch), expr::clamp_index(h, e.heads),
                expr::clamp_index(pos, e.positions), e, lo, hi, nan);
      IntI fromSummary = expr::load_i32(withSummary, b, h, pos, e);
      IntI fromElements = expr::load_i32(input.ref, b, h, pos, e);
      ASSERT_EQ(fromSummary.lo, lo) << "round " << round << " pos [" << pos.lo << ", " << pos.hi
                                    << "] of " << e.positions;
      ASSERT_EQ(fromSummary.hi, hi) << "round " << round << " pos [" << pos.lo << ", " << pos.hi
                                    << "] of " << e.positions;
      ASSERT_EQ(fromElements.lo, lo);
      ASSERT_EQ(fromElements.hi, hi);
    }
  }
}

TEST(InputSummary, F32HullIsExactAndNanMakesAnything) {
  std::mt19937 rng(11);
  int nanRanges = 0;
  for (int round = 0; round < 300; ++round) {
    RandomInput input = randomInput(rng, true);
    const InputExtents e = input.extents;
    std::vector<SummaryEntry> summaries = summarize<float>(input.ref, e);
    InputRef withSummary = input.ref;
    withSummary.summary = summaries.data();
    for (int query = 0; query < 60; ++query) {
      IntI b = IntI(int(rng() % unsigned(e.batch)));
      IntI h = rng() % 3 ? IntI(int(rng() % unsigned(e.heads))) : randomRange(rng, e.heads);
      IntI pos = randomRange(rng, e.positions);
      float lo, hi;
      bool nan;
      exactHull(input.ref, expr::clamp_index(b, e.batch), expr::clamp_index(h, e.heads),
                expr::clamp_index(pos, e.positions), e, lo, hi, nan);
      FltI got = expr::load_f32(withSummary, b, h, pos, e);
      if (nan) {
        ++nanRanges;
        ASSERT_EQ(got.lo, -expr::kInf);
        ASSERT_EQ(got.hi, expr::kInf);
      } else {
        ASSERT_EQ(got.lo, lo) << "round " << round << " pos [" << pos.lo << ", " << pos.hi << "]";
        ASSERT_EQ(got.hi, hi) << "round " << round << " pos [" << pos.lo << ", " << pos.hi << "]";
      }
    }
  }
  EXPECT_GT(nanRanges, 100);  // the NaN path was exercised
}

// Ranges of whole blocks are cheap now: a long prefix is exact with summaries, "anything" without
// (more than kMaxScanItems elements).
TEST(InputSummary, LongRangesAreScannableWithSummaries) {
  const int positions = 200000;
  std::vector<int> doc(positions);
  for (int i = 0; i < positions; ++i) doc[size_t(i)] = i / 1000;
  InputRef in{doc.data(), 0, 0, 1, nullptr};
  const InputExtents e{1, 1, positions};
  std::vector<SummaryEntry> summaries = summarize<int>(in, e);
  IntI without = expr::load_i32(in, IntI(0), IntI(0), IntI(5, positions - 3), e);
  EXPECT_EQ(without.lo, expr::kIntMin);
  EXPECT_EQ(without.hi, expr::kIntMax);
  in.summary = summaries.data();
  IntI with = expr::load_i32(in, IntI(0), IntI(0), IntI(5, positions - 3), e);
  EXPECT_EQ(with.lo, 0);
  EXPECT_EQ(with.hi, (positions - 3) / 1000);
  // Past the limit even with summaries: sound, merely imprecise.
  const int huge = int(expr::kMaxScanItems + 1) * kSummaryBlock;
  std::vector<int> big(size_t(huge), 3);
  InputRef bigIn{big.data(), 0, 0, 1, nullptr};
  std::vector<SummaryEntry> bigSummaries = summarize<int>(bigIn, InputExtents{1, 1, huge});
  bigIn.summary = bigSummaries.data();
  IntI all = expr::load_i32(bigIn, IntI(0), IntI(0), IntI(0, huge - 1), InputExtents{1, 1, huge});
  EXPECT_EQ(all.lo, expr::kIntMin);
}

// The document mask as CodeGen emits it for `mask: {document: doc, causal: true}`.
struct DocumentVariant {
  static constexpr bool kHasMask = true;
  template <class P, class I>
  static auto mask(const P& p, I, I, I q, I k) {
    namespace ex = expr;
    auto shift = ex::sub(p.kv_len, p.q_len);
    auto aligned = ex::add(q, shift);
    auto sameDoc = ex::cmp_eq(ex::load_i32(p.inputs[0], 0, 0, aligned, ex::input_extents(p)),
                              ex::load_i32(p.inputs[0], 0, 0, k, ex::input_extents(p)));
    return ex::mask_result(ex::land(sameDoc, ex::cmp_ge(aligned, k)), q);
  }
};

// The same mask, with its forward launches precomputing the tile classes (tile_classes.h).
struct DocumentClassesVariant : DocumentVariant {
  static constexpr bool kTileClasses = true;
};

// Random documents: packed (ids 0, 1, 2, ... in order, random lengths) or shuffled ids.
// One head of one batch with kv_len in [1, 1500] and q_len equal to it three times in four, else
// shorter.
template <class Params>
Params randomLengths(std::mt19937& rng) {
  Params p{};
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.kv_len = 1 + int(rng() % 1500);
  p.q_len = rng() % 4 ? p.kv_len : 1 + int(rng() % unsigned(p.kv_len));
  return p;
}

std::vector<int> randomDocuments(std::mt19937& rng, int positions, bool packed) {
  std::vector<int> doc(static_cast<size_t>(positions));
  int id = 0, left = 0;
  const int meanLength = 1 + int(rng() % 300);
  for (int& d : doc) {
    if (left == 0) {
      left = 1 + int(rng() % unsigned(2 * meanLength));
      id = packed ? id + 1 : int(rng() % 6);
    }
    d = id;
    --left;
  }
  return doc;
}

// The sm_90a forward's end-aligned first q tile (block_order.h qTileStart) starts below row 0:
// the tile-classes pass gives each 64-row group the class of its rows inside the sequence
// (tileGroupBits), and a kernel without precomputed classes classifies the group's rows from its
// negative first row (a superset). Both must be sound for the group's real rows: True only if
// every (row, key) is kept, False only if none is.
TEST(InputSummary, EndAlignedFirstTileGroupClassesAreSound) {
  std::mt19937 rng(5);
  constexpr int kBlock = 64, kBlockQ = 192, kGroups = kBlockQ / 64;
  using Tri = expr::Tri;
  int checked = 0, negativeStarts = 0;
  for (int round = 0; round < 200; ++round) {
    FwdParams p = randomLengths<FwdParams>(rng);
    const InputExtents e = expr::input_extents(p);
    std::vector<int> doc = randomDocuments(rng, e.positions, round % 3 != 0);
    p.inputs[0] = InputRef{doc.data(), 0, 0, 1, nullptr};
    const int shift = p.kv_len - p.q_len;
    auto keep = [&](int q, int k) {
      const int aligned = q + shift;
      return doc[size_t(expr::clamp_index(aligned, e.positions))] == doc[size_t(k)] && aligned >= k;
    };
    const int q0 = qTileStart<true>(0, p.q_len, kBlockQ);
    ASSERT_LE(q0, 0);
    negativeStarts += q0 < 0;
    const KvTiles<DocumentVariant, kBlock> walk(p, 0, 0, std::max(q0, 0),
                                                 std::min(q0 + kBlockQ, p.q_len) - 1);
    for (int t = 0; t < walk.numTiles; ++t) {
      const Tri cls = walk.tileClass(t);
      const u32 bits = tileGroupBits(walk, t, cls, q0, p.q_len, kGroups);
      for (int g = 0; g < kGroups; ++g) {
        const int lo = q0 + 64 * g, hi = std::min(lo + 63, p.q_len - 1);
        if (hi < 0 || lo >= p.q_len) continue;  // no row in the sequence: never read
        int kept = 0, total = 0;
        for (int q = std::max(lo, 0); q <= hi; ++q)
          for (int k = t * kBlock; k < std::min(p.kv_len, (t + 1) * kBlock); ++k, ++total)
            kept += keep(q, k);
        const Tri truth = kept == 0 ? Tri::False : kept == total ? Tri::True : Tri::Unknown;
        for (Tri got : {Tri((bits >> (2 * g)) & 3u),
                        walk.classify(lo, hi, t * kBlock, walk.tileEnd(t))}) {
          if (got != Tri::Unknown)
            ASSERT_EQ(got, truth) << "round " << round << " tile " << t << " group " << g
                                  << " rows [" << lo << ", " << hi << "]";
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(negativeStarts, 100);
  EXPECT_GT(checked, 1000);
}

TEST(InputSummary, DocumentTileWalkAgreesWithBruteForce) {
  std::mt19937 rng(3);
  constexpr int kBlock = 64;
  using Tri = expr::Tri;
  int liveTiles = 0, skippedTiles = 0;
  for (int round = 0; round < 120; ++round) {
    const bool packed = round % 3 != 0;
    FwdParams p = randomLengths<FwdParams>(rng);
    const InputExtents e = expr::input_extents(p);
    std::vector<int> doc = randomDocuments(rng, e.positions, packed);
    p.inputs[0] = InputRef{doc.data(), 0, 0, 1, nullptr};
    std::vector<SummaryEntry> summaries = summarize<int>(p.inputs[0], e);
    const int shift = p.kv_len - p.q_len;
    auto keep = [&](int q, int k) {
      const int aligned = q + shift;
      return doc[size_t(expr::clamp_index(aligned, e.positions))] == doc[size_t(k)] && aligned >= k;
    };
    for (int q0 = 0; q0 < p.q_len; q0 += 1 + int(rng() % 200)) {
      const int q1 = std::min(p.q_len - 1, q0 + int(rng() % 128));
      // The truth per kv tile: empty, full or partial.
      const int tiles = (p.kv_len + kBlock - 1) / kBlock;
      std::vector<Tri> truth(static_cast<size_t>(tiles));
      for (int t = 0; t < tiles; ++t) {
        int kept = 0, total = 0;
        for (int q = q0; q <= q1; ++q)
          for (int k = t * kBlock; k < std::min(p.kv_len, (t + 1) * kBlock); ++k, ++total)
            kept += keep(q, k);
        truth[size_t(t)] = kept == 0 ? Tri::False : kept == total ? Tri::True : Tri::Unknown;
      }
      auto walk = [&](bool withSummaries) {
        p.inputs[0].summary = withSummaries ? summaries.data() : nullptr;
        const KvTiles<DocumentVariant, kBlock> walk(p, 0, 0, q0, q1);
        std::vector<int> visited;
        std::vector<Tri> classes;
        int first, last;
        walk.bounds(first, last);
        EXPECT_EQ(first, walk.first());  // the sm80 kernels call these two
        EXPECT_EQ(last, walk.last());
        Tri cls;
        for (int t = walk.nextLive(first, last, cls); t <= last;
             t = walk.nextLive(t + 1, last, cls)) {
          visited.push_back(t);
          classes.push_back(cls);
        }
        return std::make_pair(visited, classes);
      };
      auto [visited, classes] = walk(true);
      // Sound: every live tile is visited, no visited tile is called full unless it is, and
      // none is empty.
      std::vector<int> live;
      for (int t = 0; t < tiles; ++t)
        if (truth[size_t(t)] != Tri::False) live.push_back(t);
      // The forward's walk over precomputed classes (one row, as <name>_tile_classes writes it)
      // visits exactly the tiles whose own class is not False, with those classes: the live
      // tiles and, being per tile, never more than the search above.
      {
        const KvTiles<DocumentVariant, kBlock> search(p, 0, 0, q0, q1);
        const int words = tileClassWords(p.kv_len, kBlock);
        std::vector<int> rowBounds(4, -7);
        std::vector<u32> rowClasses(size_t(2 * words), 0xdeadbeefu);
        tileClassRow(search, &rowBounds[2], &rowClasses[size_t(words)], words);  // row 1 of 2
        p.kv_tile_bounds = rowBounds.data();
        p.kv_tile_classes = rowClasses.data();
        p.kv_class_words = words;
        KvTiles<DocumentClassesVariant, kBlock> read(p, 0, 0, q0, q1);
        static_assert(decltype(read)::kReadsClasses, "the walk reads precomputed classes");
        read.useTileClasses(1);
        int first, last;
        read.bounds(first, last);
        std::vector<int> readVisited;
        Tri cls;
        for (int t = read.nextLive(first, last, cls); t <= last; t = read.nextLive(t + 1, last, cls)) {
          readVisited.push_back(t);
          ASSERT_EQ(cls, search.tileClass(t)) << "round " << round << " tile " << t;
        }
        std::vector<int> ownClassLive;
        for (int t = 0; t < tiles; ++t)
          if (search.tileClass(t) != Tri::False) ownClassLive.push_back(t);
        ASSERT_EQ(readVisited, ownClassLive) << "round " << round;
        for (int t : live) ASSERT_TRUE(std::count(readVisited.begin(), readVisited.end(), t));
        // The sm_90a forward's 64-row groups (two consumer warpgroups): groupClass() reads
        // tileGroupBits' byte, and a group's class is its rows' own.
        const int groupWords = (tiles + 3) / 4;
        std::vector<u32> groupClasses(static_cast<size_t>(2 * groupWords), 0u);
        for (int t = 0; t < tiles; ++t)
          groupClasses[size_t(groupWords + t / 4)] |=
              tileGroupBits(search, t, search.tileClass(t), q0, p.q_len, 2) << (8 * (t % 4));
        p.kv_group_classes = groupClasses.data();
        p.kv_group_words = groupWords;
        KvTiles<DocumentClassesVariant, kBlock> groupsRead(p, 0, 0, q0, q1);
        groupsRead.useTileClasses(1);
        for (int t : ownClassLive)
          for (int g = 0; g < 2 && q0 + 64 * g <= q1; ++g) {
            const int lo = q0 + 64 * g, hi = std::min(lo + 63, p.q_len - 1);
            const Tri own = search.classify(lo, hi, t * kBlock, search.tileEnd(t));
            const Tri got = groupsRead.groupClass(t, g, lo, hi);
            if (search.tileClass(t) == Tri::True)
              ASSERT_EQ(got, Tri::True);
            else
              ASSERT_EQ(got, own) << "round " << round << " tile " << t << " group " << g;
          }
        p.kv_group_classes = nullptr;
        for (int t : readVisited) ASSERT_TRUE(std::count(visited.begin(), visited.end(), t));
        p.kv_tile_bounds = nullptr;
        p.kv_tile_classes = nullptr;
      }
      for (int t : live)
        ASSERT_TRUE(std::count(visited.begin(), visited.end(), t))
            << "round " << round << ": live kv tile " << t << " of rows [" << q0 << ", " << q1
            << "] skipped";
      for (size_t i = 0; i < visited.size(); ++i) {
        ASSERT_NE(classes[i], Tri::False);
        if (classes[i] == Tri::True) ASSERT_EQ(truth[size_t(visited[i])], Tri::True);
      }
      // Packed documents with the causal mask are classified exactly: the walk visits the live
      // tiles and nothing else (consecutive ids in order leave interval evaluation no slack).
      if (packed) ASSERT_EQ(visited, live) << "round " << round << " rows [" << q0 << ", " << q1 << "]";
      // Summaries change the cost, never the answer, while the element scan is within its limit.
      if (e.positions <= expr::kMaxScanItems) ASSERT_EQ(walk(false).first, visited);
      liveTiles += int(live.size());
      skippedTiles += tiles - int(visited.size());
    }
  }
  EXPECT_GT(liveTiles, 1000);
  EXPECT_GT(skippedTiles, 1000);  // the walk did skip tiles
}

// Random lengths and documents for the backward's walks, with their summaries (the parameters
// point into `doc` and `summaries`).
struct BackwardDocuments {
  BwdParams p;
  std::vector<int> doc;
  std::vector<SummaryEntry> summaries;
  BackwardDocuments(std::mt19937& rng, bool packed) : p(randomLengths<BwdParams>(rng)) {
    const InputExtents e = expr::input_extents(p);
    doc = randomDocuments(rng, e.positions, packed);
    p.inputs[0] = InputRef{doc.data(), 0, 0, 1, nullptr};
    summaries = summarize<int>(p.inputs[0], e);
    p.inputs[0].summary = summaries.data();
  }
  BackwardDocuments(const BackwardDocuments&) = delete;
  BackwardDocuments& operator=(const BackwardDocuments&) = delete;
};

// A row of classes as a tile-classes entry writes it (tileClassRow), from `search`.
struct ClassRow {
  std::vector<int> bounds = std::vector<int>(2);
  std::vector<u32> words;
};
template <class Walk>
ClassRow classRowOf(const Walk& search, int words) {
  ClassRow row;
  row.words.resize(static_cast<size_t>(words));
  tileClassRow(search, row.bounds.data(), row.words.data(), words);
  return row;
}

// A walk over a row of precomputed classes (`read`, its row set) against the walk that classifies
// by itself (`search`, whose classes made the row): the tiles `read` visits, each checked to have
// its own class; `live` gets the tiles whose own class is not empty, which they must equal.
template <class Search, class Read>
std::vector<int> classWalkVisits(const Search& search, const Read& read, std::vector<int>& live) {
  std::vector<int> visited;
  expr::Tri cls;
  for (int t = read.nextLive(read.first(), read.last(), cls); t <= read.last();
       t = read.nextLive(t + 1, read.last(), cls)) {
    visited.push_back(t);
    EXPECT_EQ(cls, search.tileClass(t)) << "tile " << t;
  }
  live.clear();
  for (int t = 0; t < search.numTiles; ++t)
    if (search.tileClass(t) != expr::Tri::False) live.push_back(t);
  return visited;
}

// The backward's walks over rows of precomputed classes, along the keys (AlongKeys: the sm_90a dQ
// kernel's, kv tiles of one q tile of 128 rows, BwdParams::kv_tile_*) or the queries (the dK/dV
// kernel's, q tiles of one kv tile of 128 keys, BwdParams::q_tile_*), with the other walk's rows
// beside them all empty: each visits exactly the tiles whose own class is live, with those classes,
// from its own rows; a walk that opts out (Precomputed false, the sm80 dQ kernel's) searches by
// itself whatever the rows say. Returns the tiles visited.
template <bool AlongKeys>
int checkBackwardClassWalks(std::mt19937& rng) {
  constexpr int kBlock = 64;
  int visitedTiles = 0;
  for (int round = 0; round < 60; ++round) {
    BackwardDocuments docs(rng, round % 2 == 0);
    BwdParams& p = docs.p;
    const std::vector<int> emptyBounds = {1 << 20, -1};
    const std::vector<u32> emptyClasses(64, 0u);
    (AlongKeys ? p.q_tile_bounds : p.kv_tile_bounds) = emptyBounds.data();
    (AlongKeys ? p.q_tile_classes : p.kv_tile_classes) = emptyClasses.data();
    (AlongKeys ? p.q_class_words : p.kv_class_words) = 1;
    const int fixedLength = AlongKeys ? p.q_len : p.kv_len;
    for (int f0 = 0; f0 < fixedLength; f0 += 128) {
      SCOPED_TRACE(testing::Message() << "round " << round << " fixed range from " << f0);
      const int f1 = std::min(fixedLength, f0 + 128) - 1;
      const TileWalk<DocumentVariant, kBlock, BwdParams, AlongKeys> search(p, 0, 0, f0, f1);
      const ClassRow row =
          classRowOf(search, tileClassWords(AlongKeys ? p.kv_len : p.q_len, kBlock));
      (AlongKeys ? p.kv_tile_bounds : p.q_tile_bounds) = row.bounds.data();
      (AlongKeys ? p.kv_tile_classes : p.q_tile_classes) = row.words.data();
      (AlongKeys ? p.kv_class_words : p.q_class_words) = int(row.words.size());
      TileWalk<DocumentClassesVariant, kBlock, BwdParams, AlongKeys> read(p, 0, 0, f0, f1);
      static_assert(decltype(read)::kReadsClasses && !decltype(read)::kReadsGroupClasses,
                    "the backward's walks read precomputed classes (and no group classes)");
      read.useTileClasses(0);
      std::vector<int> live;
      const std::vector<int> visited = classWalkVisits(search, read, live);
      EXPECT_EQ(visited, live);
      visitedTiles += int(visited.size());
      TileWalk<DocumentClassesVariant, kBlock, BwdParams, AlongKeys, false> own(p, 0, 0, f0, f1);
      static_assert(!decltype(own)::kReadsClasses, "Precomputed false never reads classes");
      own.useTileClasses(0);
      (AlongKeys ? p.kv_tile_bounds : p.q_tile_bounds) = emptyBounds.data();
      EXPECT_EQ(own.first(), search.first());
      EXPECT_EQ(own.last(), search.last());
    }
  }
  return visitedTiles;
}

TEST(InputSummary, BackwardQTileWalkReadsPrecomputedClasses) {
  std::mt19937 rng(5);
  EXPECT_GT(checkBackwardClassWalks<false>(rng), 200);
}

TEST(InputSummary, BackwardKvTileWalkReadsPrecomputedClasses) {
  std::mt19937 rng(7);
  EXPECT_GT(checkBackwardClassWalks<true>(rng), 200);
}

// tileOrderRank: a permutation of the q tiles, longest kv range first, ties by the
// higher index first (the ordered grid's own order).
TEST(TileOrder, LongestFirstPermutation) {
  const std::vector<std::vector<int>> cases = {
      {3, 1, 4, 1, 5, 9, 2, 6}, {0, 0, 0}, {7}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
      {5, 5, 1, 5, 0, 8, 8}};
  for (const std::vector<int>& counts : cases) {
    const int n = int(counts.size());
    std::vector<int> order(n, -1);
    for (int t = 0; t < n; ++t) {
      const int rank = tileOrderRank(counts.data(), n, t);
      ASSERT_GE(rank, 0);
      ASSERT_LT(rank, n);
      ASSERT_EQ(order[rank], -1) << "two tiles with rank " << rank;
      order[rank] = t;
    }
    for (int r = 1; r < n; ++r) {
      const int a = order[r - 1], b = order[r];
      EXPECT_TRUE(counts[a] > counts[b] || (counts[a] == counts[b] && a > b))
          << "rank " << r - 1 << " runs tile " << a << " (" << counts[a] << " kv tiles) before "
          << b << " (" << counts[b] << ")";
    }
  }
}

}  // namespace
}  // namespace attnc
