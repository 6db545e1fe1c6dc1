// The decode launch's plan without a GPU (runtime/DecodeLaunch.cpp, PerSequenceLaunch.cpp): which
// launches take the decode kernel or run a sequence at a time, the row tiles, the split count
// from split_kv.h at a given SM count and occupancy, num_splits overriding it, the partials'
// workspace, and DecodeMetadata's text.
#include "attnc/attnc.h"
#include "runtime/DecodeLaunch.h"
#include "runtime/PerSequenceLaunch.h"

#include <gtest/gtest.h>

#include <vector>

namespace attnc {
namespace {

// GQA 32/8, head dim 128, bf16, a decode kernel of 32 rows and 64-key tiles.
KernelMetadata gqaMetadata() {
  KernelMetadata m;
  m.name = "gqa";
  m.entry = "gqa_fwd";
  m.target = "sm_90a";
  m.computeMajor = 9;
  m.threads = 384;
  m.smemBytes = 150000;
  m.blockQ = 128;
  m.blockKV = 128;
  m.headDim = m.headDimV = 128;
  m.headsQ = 32;
  m.headsKV = 8;
  m.dtype = "bf16";
  m.scale = 0.0883883476f;
  m.attncVersion = version();
  m.decode = DecodeMetadata{"gqa_decode", "gqa_decode_combine", 128, 32, 64, 3, 57344};
  return m;
}

ForwardArgs lengths(int64_t batch, int64_t qLen, int64_t kvLen) {
  ForwardArgs args;
  args.batch = batch;
  args.q_len = qLen;
  args.kv_len = kvLen;
  return args;
}

TEST(DecodePlan, AutoTakesTheDecodeKernelForFewPackedRows) {
  const KernelMetadata m = gqaMetadata();
  EXPECT_TRUE(takesDecode(m, lengths(8, 1, 32768)));
  EXPECT_TRUE(takesDecode(m, lengths(8, 16, 32768)));  // 4 x 16 = 64 packed rows
  EXPECT_FALSE(takesDecode(m, lengths(8, 17, 32768)));
  ForwardArgs off = lengths(8, 1, 32768);
  off.decode = DecodeChoice::Off;
  EXPECT_FALSE(takesDecode(m, off));
  ForwardArgs on = lengths(8, 1000, 1000);
  on.decode = DecodeChoice::On;
  EXPECT_TRUE(takesDecode(m, on));
  // Varlen and paged launches take it at any length.
  VarlenArg varlen;
  ForwardArgs packed = lengths(8, 4096, 4096);
  packed.varlen = &varlen;
  EXPECT_TRUE(takesDecode(m, packed));
  // Without a decode kernel (dropout) Auto keeps the forward.
  KernelMetadata none = m;
  none.decode.reset();
  EXPECT_FALSE(takesDecode(none, lengths(8, 1, 32768)));
}

// B8, kv_len 32K at 132 SMs x 2 blocks: 64 units take 4 splits of 128 tiles; the partials are 4
// splits x 32 heads x 8 rows of fp32 O (128) and LSE, each array 256-byte aligned.
TEST(DecodePlan, SplitsFillTheSlotsAndSizeThePartials) {
  const KernelMetadata m = gqaMetadata();
  DecodePlan plan = decodePlanFor(m, lengths(8, 1, 32768), 132, 2);
  EXPECT_TRUE(plan.decode);
  EXPECT_EQ(plan.rows, 32);
  EXPECT_EQ(plan.rowTiles, 1);
  EXPECT_EQ(plan.blockKV, 64);
  EXPECT_EQ(plan.splits, 4);
  EXPECT_EQ(plan.splitTiles, 128);
  // (Both arrays are whole multiples of 256 bytes here.)
  EXPECT_EQ(plan.workspaceBytes, size_t(4 * 32 * 8 * 128 * 4 + 4 * 32 * 8 * 4));
  // B64 at kv_len 8K fills the slots unsplit: no partials.
  plan = decodePlanFor(m, lengths(64, 1, 8192), 132, 2);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.workspaceBytes, 0u);
  // q_len 16: 64 packed rows in two row tiles of 32.
  plan = decodePlanFor(m, lengths(1, 16, 4096), 132, 2);
  EXPECT_EQ(plan.rowTiles, 2);
  // More SMs, more splits (B1 at kv_len 128K: 8 units).
  EXPECT_LT(decodePlanFor(m, lengths(1, 1, 131072), 66, 2).splits,
            decodePlanFor(m, lengths(1, 1, 131072), 132, 2).splits);
}

// Host copies of mixed lengths (paged or varlen) split by the batch's work; without them, or with
// every sequence of one length, the plan is the longest sequence's.
TEST(DecodePlan, HostLengthsSplitAMixedBatchByItsWork) {
  const KernelMetadata m = gqaMetadata();
  const std::vector<int32_t> lens = {27752, 641, 18701, 15534, 23778, 7950, 2650, 3860};
  PagedKVArg paged;
  paged.page_size = 16;
  ForwardArgs args = lengths(8, 1, 27752);
  args.paged = &paged;
  const DecodePlan byLongest = decodePlanFor(m, args, 132, 2);
  paged.host_seq_lens_kv = lens.data();
  const DecodePlan mixed = decodePlanFor(m, args, 132, 2);
  EXPECT_GT(mixed.splits, byLongest.splits);
  EXPECT_LT(mixed.splitTiles, byLongest.splitTiles);
  EXPECT_GT(mixed.workspaceBytes, byLongest.workspaceBytes);

  // The same from varlen offsets.
  std::vector<int32_t> cu = {0};
  for (int32_t n : lens) cu.push_back(cu.back() + n);
  VarlenArg varlen;
  varlen.cu_seqlens_kv = cu.data();
  varlen.host_cu_seqlens_kv = cu.data();
  varlen.total_kv = cu.back();
  ForwardArgs packed = lengths(8, 1, 27752);
  packed.varlen = &varlen;
  EXPECT_EQ(decodePlanFor(m, packed, 132, 2).splits, mixed.splits);

  // One length: the longest's plan with or without the copies.
  const std::vector<int32_t> same(8, 27752);
  paged.host_seq_lens_kv = same.data();
  EXPECT_EQ(decodePlanFor(m, args, 132, 2).splits, byLongest.splits);
  // num_splits still wins.
  paged.host_seq_lens_kv = lens.data();
  args.num_splits = 2;
  EXPECT_EQ(decodePlanFor(m, args, 132, 2).splits, 2);
}

TEST(DecodePlan, NumSplitsOverridesTheRule) {
  const KernelMetadata m = gqaMetadata();
  ForwardArgs args = lengths(8, 1, 32768);
  args.num_splits = 3;
  DecodePlan plan = decodePlanFor(m, args, 132, 2);
  EXPECT_EQ(plan.splits, 3);
  EXPECT_EQ(plan.splitTiles, 171);  // ceil(512 / 3)
  args.num_splits = 1;
  EXPECT_EQ(decodePlanFor(m, args, 132, 2).splits, 1);
  // More splits than tiles: one tile each.
  args = lengths(2, 1, 100);
  args.num_splits = 5;
  EXPECT_EQ(decodePlanFor(m, args, 132, 2).splits, 2);
}

// Packed Q: the partials hold total_q rows, not batch x q_len.
TEST(DecodePlan, PackedQueriesSizeThePartialsByTheirRows) {
  const KernelMetadata m = gqaMetadata();
  VarlenArg varlen;
  int32_t fake = 0;
  varlen.cu_seqlens_q = &fake;
  varlen.total_q = 10;
  ForwardArgs args = lengths(4, 7, 32768);
  args.varlen = &varlen;
  args.num_splits = 2;
  const DecodePlan plan = decodePlanFor(m, args, 132, 2);
  const size_t rows = 2 * 32 * 10;                      // splits x heads x packed rows
  const size_t oBytes = (rows * 128 * 4 + 255) / 256 * 256;  // each array 256-byte aligned
  EXPECT_EQ(plan.workspaceBytes, oBytes + (rows * 4 + 255) / 256 * 256);
}

// A prefill-shaped varlen launch with host copies of its offsets runs the contiguous kernels a
// sequence at a time; anything that needs the decode kernel's layout handling keeps it.
TEST(DecodePlan, VarlenPrefillRunsPerSequenceWhereTheHostKnowsTheOffsets) {
  const KernelMetadata m = gqaMetadata();
  const int32_t offsets[] = {0, 100, 4196, 4196 + 8000};
  const int32_t device = 0;  // never read on the host
  VarlenArg varlen;
  varlen.cu_seqlens_q = varlen.cu_seqlens_kv = &device;
  varlen.host_cu_seqlens_q = varlen.host_cu_seqlens_kv = offsets;
  varlen.total_q = varlen.total_kv = offsets[3];
  ForwardArgs args = lengths(3, 8000, 8000);
  args.varlen = &varlen;
  EXPECT_TRUE(takesPerSequence(m, args));
  ForwardArgs decodeShaped = lengths(3, 16, 8000);  // 64 packed rows: the decode kernel
  decodeShaped.varlen = &varlen;
  EXPECT_FALSE(takesPerSequence(m, decodeShaped));
  ForwardArgs on = args;
  on.decode = DecodeChoice::On;
  EXPECT_FALSE(takesPerSequence(m, on));
  float lse = 0;
  ForwardArgs withLse = args;  // the packed LSE goes through a scratch, a sequence at a time
  withLse.lse = &lse;
  EXPECT_TRUE(takesPerSequence(m, withLse));
  VarlenArg deviceOnly = varlen;
  deviceOnly.host_cu_seqlens_kv = nullptr;
  ForwardArgs noHost = args;
  noHost.varlen = &deviceOnly;
  EXPECT_FALSE(takesPerSequence(m, noHost));
  // A sequence with queries and no keys writes O = 0 and LSE -inf: the decode kernel's.
  const int32_t emptyKeys[] = {0, 100, 200, 300};
  const int32_t sameKeys[] = {0, 100, 100, 300};
  VarlenArg empty = varlen;
  empty.host_cu_seqlens_q = emptyKeys;
  empty.host_cu_seqlens_kv = sameKeys;
  ForwardArgs withEmpty = args;
  withEmpty.varlen = &empty;
  EXPECT_FALSE(takesPerSequence(m, withEmpty));
}

TEST(DecodePlan, SeqLayoutTakesThePageShift) {
  PagedKVArg paged;
  paged.page_size = 16;
  paged.max_pages = 9;
  paged.num_pages = 100;
  ForwardArgs args = lengths(2, 1, 100);
  args.paged = &paged;
  const SeqLayout seq = seqLayoutOf(args);
  EXPECT_EQ(seq.page_shift, 4);
  EXPECT_EQ(seq.max_pages, 9);
  EXPECT_EQ(seq.num_pages, 100);
  paged.page_size = 1;
  EXPECT_EQ(seqLayoutOf(args).page_shift, 0);
  paged.page_size = 256;
  EXPECT_EQ(seqLayoutOf(args).page_shift, 8);
}

TEST(KernelMetadata, RoundTripsTheDecodeKernel) {
  const KernelMetadata m = gqaMetadata();
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  ASSERT_TRUE(back->decode);
  EXPECT_EQ(back->decode->entry, "gqa_decode");
  EXPECT_EQ(back->decode->combineEntry, "gqa_decode_combine");
  EXPECT_EQ(back->decode->rows, 32);
  EXPECT_EQ(back->decode->smemBytes, 57344);
  EXPECT_EQ(back->serialize(), m.serialize());
  // All seven lines or none.
  KernelMetadata partial = m;
  partial.decode.reset();
  EXPECT_FALSE(KernelMetadata::parse(partial.serialize() + "decode_rows 32\n", &error));
  EXPECT_NE(error.find("decode"), std::string::npos) << error;
  // Rows are whole m16 fragments.
  KernelMetadata odd = m;
  odd.decode->rows = 24;
  EXPECT_FALSE(KernelMetadata::parse(odd.serialize(), &error));
  // No decode kernel with dropout.
  KernelMetadata dropout = m;
  dropout.dropout = 0.1f;
  dropout.dropoutRounds = 7;
  EXPECT_FALSE(KernelMetadata::parse(dropout.serialize(), &error));
  EXPECT_NE(error.find("dropout"), std::string::npos) << error;
}

}  // namespace
}  // namespace attnc
