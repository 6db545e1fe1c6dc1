// The LLVM-free runtime without a GPU: kernel metadata text, launch-argument validation (every
// message names the argument and says expected vs given), targets, and the kernel cache's file
// format (truncation and flipped bits are caught, the entry deleted).
#include "attnc/attnc.h"
#include "attnc/kernel_names.h"
#include "runtime/KernelCache.h"
#include "runtime/LaunchGrid.h"
#include "runtime/ModuleSymbols.h"
#include "runtime/Summaries.h"
#include "test/unit/ScratchDir.h"

#include <gtest/gtest.h>

#include <cstring>

#include <cstdlib>
#include <fstream>
#include <set>
#include <type_traits>
#include <unistd.h>

namespace attnc {
namespace {

KernelMetadata documentMetadata() {
  KernelMetadata m;
  m.name = "document";
  m.entry = "attnc_document_fwd";
  m.target = "sm_80";
  m.computeMajor = 8;
  m.threads = 128;
  m.smemBytes = 81920;
  m.blockQ = 64;
  m.blockKV = 64;
  m.headDim = m.headDimV = 128;
  m.headsQ = 16;
  m.headsKV = 16;
  m.dtype = "bf16";
  m.scale = 0.0883883476f;
  m.inputs = {{"doc", "i32", "pos"}};
  m.attncVersion = version();
  return m;
}

// Enough of an ELF header for fromCubin's check; validation never reads further.
const char kFakeCubin[16] = {'\x7f', 'E', 'L', 'F', 2, 1, 1};

Kernel documentKernel() {
  Status status;
  Kernel kernel = Kernel::fromCubin(documentMetadata(), kFakeCubin, sizeof kFakeCubin, &status);
  EXPECT_TRUE(status) << status.message;
  return kernel;
}

// Valid BHSD arguments for documentKernel() at batch 2, length 256 (pointers are never read).
ForwardArgs validArgs() {
  auto* base = reinterpret_cast<char*>(uintptr_t(1) << 20);
  Strides s = bhsdStrides(16, 256, 128);
  ForwardArgs args;
  args.q = tensorArg(base, s);
  args.k = tensorArg(base + (1 << 22), s);
  args.v = tensorArg(base + (2 << 22), s);
  args.o = outputArg(base + (3 << 22), s);
  args.batch = 2;
  args.q_len = args.kv_len = 256;
  args.inputs = {InputArg{base + (4 << 22), 0, 0, 1}};
  return args;
}

BackwardArgs validBackwardArgs();

// A broken argument: how to break validArgs() (or validBackwardArgs()) and the start of the
// message its validation must give.
template <class Args>
struct Rejection {
  void (*mutate)(Args&);
  const char* message;
};

// Each rejection's broken arguments fail validation with its message.
template <class Args, size_t N>
void expectRejected(const Kernel& kernel, const Rejection<Args> (&cases)[N]) {
  for (const Rejection<Args>& c : cases) {
    Args args;
    Status status;
    if constexpr (std::is_same_v<Args, ForwardArgs>) {
      args = validArgs();
      c.mutate(args);
      status = kernel.validate(args);
    } else {
      args = validBackwardArgs();
      c.mutate(args);
      status = kernel.validateBackward(args);
    }
    EXPECT_FALSE(status.ok) << c.message;
    EXPECT_EQ(status.message.rfind(c.message, 0), 0u) << status.message;
  }
}

TEST(KernelMetadata, RoundTrips) {
  KernelMetadata m = documentMetadata();
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->serialize(), m.serialize());
  EXPECT_EQ(back->scale, m.scale);
  ASSERT_EQ(back->inputs.size(), 1u);
  EXPECT_EQ(back->inputs[0].dims, "pos");
}

TEST(KernelMetadata, RejectsUnknownAndMissing) {
  std::string error;
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() + "colour blue\n", &error));
  EXPECT_NE(error.find("unknown key 'colour'"), std::string::npos) << error;
  EXPECT_FALSE(KernelMetadata::parse("name x\n", &error));
}

// The forward template decides the launch ABI (FwdParams or FwdParamsTma): it must survive the
// cache, and an entry without it or with an unknown one is rebuilt, never launched.
TEST(KernelMetadata, ForwardKernelRoundTripsAndIsRequired) {
  KernelMetadata m = documentMetadata();
  m.forwardKernel = KernelFamily::Sm90;
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->forwardKernel, KernelFamily::Sm90);

  std::string text = m.serialize();
  size_t at = text.find("fwd_kernel sm90\n");
  ASSERT_NE(at, std::string::npos) << text;
  std::string unknown = text;
  unknown.replace(at, strlen("fwd_kernel sm90"), "fwd_kernel sm70");
  EXPECT_FALSE(KernelMetadata::parse(unknown, &error));
  EXPECT_NE(error.find("fwd_kernel sm70"), std::string::npos) << error;
  std::string missing = text;
  missing.erase(at, strlen("fwd_kernel sm90\n"));
  EXPECT_FALSE(KernelMetadata::parse(missing, &error));
  EXPECT_NE(error.find("expected 17 fields"), std::string::npos) << error;
}

// A dropout kernel's Philox rounds decide its mask (the tests' and users' host copies need them):
// they survive the cache, and an entry with dropout but without them, or with rounds the spec
// rejects, is rebuilt.
TEST(KernelMetadata, DropoutRoundsRoundTripAndAreRequired) {
  KernelMetadata m = documentMetadata();
  m.dropout = 0.1f;
  m.dropoutRounds = 10;
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->dropoutRounds, 10);

  const std::string text = m.serialize();
  const size_t at = text.find("dropout_rounds 10\n");
  ASSERT_NE(at, std::string::npos) << text;
  std::string missing = text;
  missing.erase(at, strlen("dropout_rounds 10\n"));
  EXPECT_FALSE(KernelMetadata::parse(missing, &error));
  EXPECT_NE(error.find("a dropout needs a dropout_rounds line"), std::string::npos) << error;
  std::string six = text;
  six.replace(at, strlen("dropout_rounds 10"), "dropout_rounds 6");
  EXPECT_FALSE(KernelMetadata::parse(six, &error));
  EXPECT_NE(error.find("dropout_rounds 6"), std::string::npos) << error;
  // Without dropout there are no rounds to record.
  EXPECT_EQ(documentMetadata().serialize().find("dropout_rounds"), std::string::npos);
}

TEST(Kernel, FromCubinRejectsNonElf) {
  Status status;
  Kernel kernel = Kernel::fromCubin(documentMetadata(), "PTX?", 4, &status);
  EXPECT_FALSE(kernel.valid());
  EXPECT_NE(status.message.find("expected a cubin"), std::string::npos) << status.message;
}

// What forward() and prepareInputs() check of ForwardArgs::prepared without a GPU (a real
// PreparedInputs needs one: the mismatches are checked by test/gpu/test_forward.py).
TEST(Kernel, PreparedInputsChecksWithoutAGpu) {
  Kernel kernel = documentKernel();
  ForwardArgs args = validArgs();
  PreparedInputs empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.bytes(), 0u);
  args.prepared = &empty;
  Status status = kernel.validate(args);
  EXPECT_EQ(status.message, "ForwardArgs.prepared: expected one made by Kernel::prepareInputs, got "
                            "an empty PreparedInputs");
  PreparedInputs out;
  status = kernel.prepareInputs(args, nullptr, &out);
  EXPECT_EQ(status.message, "ForwardArgs.prepared: expected null for prepareInputs (it makes one), "
                            "got a PreparedInputs");
  EXPECT_FALSE(out.valid());
  args.prepared = nullptr;
  status = kernel.prepareInputs(args, nullptr, nullptr);
  EXPECT_EQ(status.message, "Kernel::prepareInputs: out: expected a PreparedInputs, got null");
  args.q_len = 0;  // prepareInputs validates as forward() does, before any launch
  status = kernel.prepareInputs(args, nullptr, &out);
  EXPECT_NE(status.message.find("ForwardArgs.q_len"), std::string::npos) << status.message;
}

TEST(Kernel, Accessors) {
  Kernel kernel = documentKernel();
  EXPECT_EQ(kernel.name(), "document");
  EXPECT_EQ(kernel.entry(), "attnc_document_fwd");
  EXPECT_EQ(kernel.threads(), 128);
  EXPECT_EQ(kernel.smemBytes(), 81920);
  EXPECT_EQ(kernel.inputNames(), std::vector<std::string>{"doc"});
  Kernel moved = std::move(kernel);
  EXPECT_EQ(moved.headDim(), 128);
}

TEST(Kernel, ValidArgumentsPass) {
  Status status = documentKernel().validate(validArgs());
  EXPECT_TRUE(status) << status.message;
}

// Each broken argument yields exactly the message a user should see.
TEST(Kernel, ValidationNamesTheArgument) {
  Kernel kernel = documentKernel();
  const Rejection<ForwardArgs> cases[] = {
      {[](ForwardArgs& a) { a.q.stride_s = 100; },
       "ForwardArgs.q.stride_s: expected a multiple of 8 elements, got 100"},
      {[](ForwardArgs& a) { a.k.data = nullptr; }, "ForwardArgs.k.data: expected a device pointer, got null"},
      {[](ForwardArgs& a) { a.v.data = static_cast<const char*>(a.v.data) + 4; },
       "ForwardArgs.v.data: expected 16-byte alignment, got 0x"},
      {[](ForwardArgs& a) { a.o.stride_h = 0; }, "ForwardArgs.o.stride_h: expected a positive stride, got 0"},
      {[](ForwardArgs& a) { a.k.stride_b = -8; },
       "ForwardArgs.k.stride_b: expected a non-negative stride, got -8"},
      {[](ForwardArgs& a) { a.batch = 0; }, "ForwardArgs.batch: expected a value in [1, 65535], got 0"},
      {[](ForwardArgs& a) { a.q_len = int64_t(1) << 31; },
       "ForwardArgs.q_len: expected a value in [1, 1073741824], got 2147483648"},
      {[](ForwardArgs& a) { a.kv_len = -1; },
       "ForwardArgs.kv_len: expected a value in [1, 1073741824], got -1"},
      {[](ForwardArgs& a) { a.inputs.clear(); }, "ForwardArgs.inputs: expected 1 input(s) (doc), got 0"},
      {[](ForwardArgs& a) { a.inputs[0].data = nullptr; },
       "ForwardArgs.inputs[0] (doc).data: expected a device pointer, got null"},
      {[](ForwardArgs& a) { a.inputs[0].stride_pos = -1; },
       "ForwardArgs.inputs[0] (doc).stride_pos: expected a non-negative stride, got -1"},
      {[](ForwardArgs& a) { a.lse = reinterpret_cast<float*>(uintptr_t(0x1002)); },
       "ForwardArgs.lse: expected 4-byte alignment, got 0x1002"},
  };
  expectRejected(kernel, cases);
}

KernelMetadata backwardMetadata() {
  KernelMetadata m = documentMetadata();
  m.backward = BackwardMetadata{"document_bwd", 256, 256, 128, 64, 64, 98304, 81920,
                                KernelFamily::Sm80, 256};
  return m;
}

Kernel backwardKernel() {
  Status status;
  Kernel kernel = Kernel::fromCubin(backwardMetadata(), kFakeCubin, sizeof kFakeCubin, &status);
  EXPECT_TRUE(status) << status.message;
  return kernel;
}

// Valid BHSD backward arguments for backwardKernel() at batch 2, length 256.
BackwardArgs validBackwardArgs() {
  auto* base = reinterpret_cast<char*>(uintptr_t(1) << 20);
  Strides s = bhsdStrides(16, 256, 128);
  BackwardArgs args;
  args.q = tensorArg(base, s);
  args.k = tensorArg(base + (1 << 22), s);
  args.v = tensorArg(base + (2 << 22), s);
  args.o = tensorArg(base + (3 << 22), s);
  args.d_o = tensorArg(base + (4 << 22), s);
  args.dq = outputArg(base + (5 << 22), s);
  args.dk = outputArg(base + (6 << 22), s);
  args.dv = outputArg(base + (7 << 22), s);
  args.lse = reinterpret_cast<const float*>(base + (8 << 22));
  args.batch = 2;
  args.q_len = args.kv_len = 256;
  args.inputs = {InputArg{base + (9 << 22), 0, 0, 1}};
  return args;
}

TEST(KernelMetadata, RoundTripsWithBackward) {
  KernelMetadata m = backwardMetadata();
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->serialize(), m.serialize());
  ASSERT_TRUE(back->hasBackward());
  EXPECT_EQ(back->backward->entryStem, "document_bwd");
  EXPECT_EQ(back->backward->kvThreads, 256);
  EXPECT_EQ(back->backward->qBlockQ, 64);
  EXPECT_EQ(back->backward->kvSmemBytes, 98304);
  EXPECT_EQ(back->backward->qSmemBytes, 81920);
  // Forward-only (and pre-backward) entries parse without backward.
  std::optional<KernelMetadata> forward = KernelMetadata::parse(documentMetadata().serialize(), &error);
  ASSERT_TRUE(forward) << error;
  EXPECT_FALSE(forward->hasBackward());
  // A partial backward is rejected.
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() + "bwd_kv_threads 256\n", &error));
  EXPECT_NE(error.find("expected 10 backward fields"), std::string::npos) << error;
}

// The summary entry and which inputs it summarizes survive the cache; half of it is rejected.
TEST(KernelMetadata, RoundTripsWithSummaries) {
  KernelMetadata m = documentMetadata();
  m.summaryEntry = "document_summary";
  m.inputs[0].summarized = true;
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->serialize(), m.serialize());
  EXPECT_EQ(back->summaryEntry, "document_summary");
  EXPECT_TRUE(back->inputs[0].summarized);
  EXPECT_NE(m.serialize().find("input doc i32 pos summarized\n"), std::string::npos) << m.serialize();

  KernelMetadata classes = m;
  classes.tileClassesEntry = "document_tile_classes";
  back = KernelMetadata::parse(classes.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->tileClassesEntry, "document_tile_classes");
  KernelMetadata classesOnly = documentMetadata();
  classesOnly.tileClassesEntry = "document_tile_classes";
  EXPECT_FALSE(KernelMetadata::parse(classesOnly.serialize(), &error));
  EXPECT_NE(error.find("tile_classes_entry"), std::string::npos) << error;

  KernelMetadata entryOnly = documentMetadata();
  entryOnly.summaryEntry = "document_summary";
  EXPECT_FALSE(KernelMetadata::parse(entryOnly.serialize(), &error));
  EXPECT_NE(error.find("summary_entry"), std::string::npos) << error;
  KernelMetadata flagOnly = documentMetadata();
  flagOnly.inputs[0].summarized = true;
  EXPECT_FALSE(KernelMetadata::parse(flagOnly.serialize(), &error));
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() + "input x i32 pos maybe\n", &error));
}

// The forward's launch grid: plain (q tiles, heads_q, batch), or the ordered grid the kernel was
// built for, and clear errors where either would pass the hardware's limits.
TEST(Kernel, ForwardGrid) {
  KernelMetadata m = documentMetadata();  // 16 heads, 64-row q tiles
  OrderedGrid grid;
  ASSERT_TRUE(forwardGrid(m, 4, 4096, grid));
  EXPECT_EQ(grid.x, 64u);
  EXPECT_EQ(grid.y, 16u);
  EXPECT_EQ(grid.z, 4u);
  m.orderedGrid = true;
  ASSERT_TRUE(forwardGrid(m, 4, 4096, grid));
  EXPECT_EQ(grid.x, 4u);  // 256 / 64 q tiles: groups of 4 (head, batch) pairs
  EXPECT_EQ(grid.y, 64u);
  EXPECT_EQ(grid.z, 16u);
  ASSERT_TRUE(forwardGrid(m, 3, 100, grid));  // 2 q tiles: one group of all 48 pairs
  EXPECT_EQ(grid.x, 48u);
  EXPECT_EQ(grid.y, 2u);
  EXPECT_EQ(grid.z, 1u);
  Status tooLong = forwardGrid(m, 1, int64_t(65536) * 64, grid);
  EXPECT_FALSE(tooLong);
  EXPECT_NE(tooLong.message.find("65536 q tiles"), std::string::npos) << tooLong.message;
  m.headsQ = 65535;
  Status tooMany = forwardGrid(m, 65535, 64, grid);
  EXPECT_FALSE(tooMany);
  EXPECT_NE(tooMany.message.find("4294836225"), std::string::npos) << tooMany.message;
  m.orderedGrid = false;
  EXPECT_TRUE(forwardGrid(m, 65535, 64, grid));  // the plain grid takes them
}

TEST(Kernel, BackwardKvGrid) {
  BackwardMetadata b;
  b.kvBlockKV = 128;
  OrderedGrid grid;
  ASSERT_TRUE(backwardKvGrid("k", b, 8, 4, 4096, grid));
  EXPECT_EQ(grid.x, 32u);
  EXPECT_EQ(grid.y, 8u);
  EXPECT_EQ(grid.z, 4u);
  b.kvOrderedGrid = true;  // orderedGrid(kv tiles, heads_kv x batch): groups of ~256 blocks
  ASSERT_TRUE(backwardKvGrid("k", b, 8, 4, 4000, grid));
  EXPECT_EQ(grid.x, 8u);  // 32 tiles: 8 (kv head, batch) pairs a group
  EXPECT_EQ(grid.y, 32u);
  EXPECT_EQ(grid.z, 4u);
  ASSERT_TRUE(backwardKvGrid("k", b, 16, 1, 16384, grid));
  EXPECT_EQ(grid.x, 2u);  // 128 tiles: two kv heads a group, not all 16 at once
  EXPECT_EQ(grid.y, 128u);
  EXPECT_EQ(grid.z, 8u);
  ASSERT_TRUE(backwardKvGrid("k", b, 3, 1, 128, grid));
  EXPECT_EQ(grid.x, 3u);  // one tile: every pair in one group
  EXPECT_EQ(grid.y, 1u);
  EXPECT_EQ(grid.z, 1u);
  Status tooLong = backwardKvGrid("k", b, 8, 1, int64_t(65536) * 128, grid);
  EXPECT_FALSE(tooLong);
  EXPECT_NE(tooLong.message.find("65536 kv tiles"), std::string::npos) << tooLong.message;
  b.kvOrderedGrid = false;
  EXPECT_TRUE(backwardKvGrid("k", b, 8, 1, int64_t(65536) * 128, grid));  // along x
}

// The dK/dV kernel's ordered grid survives the cache, and needs the backward fields.
TEST(KernelMetadata, RoundTripsTheBackwardOrderedGrid) {
  KernelMetadata m = backwardMetadata();
  m.backward->kvOrderedGrid = true;
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  ASSERT_TRUE(back->hasBackward());
  EXPECT_TRUE(back->backward->kvOrderedGrid);
  EXPECT_EQ(back->serialize(), m.serialize());
  back = KernelMetadata::parse(backwardMetadata().serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_FALSE(back->backward->kvOrderedGrid);
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() + "bwd_kv_grid ordered\n", &error));
  EXPECT_NE(error.find("bwd_kv_grid"), std::string::npos) << error;
  EXPECT_FALSE(KernelMetadata::parse(backwardMetadata().serialize() + "bwd_kv_grid tiles\n", &error));
}

// The sm_90a dQ kernel (its kv tile) and the default backward's separate dQ survive the cache; each
// line needs the others it goes with.
TEST(KernelMetadata, RoundTripsTheHopperDqKernel) {
  KernelMetadata m = backwardMetadata();
  m.backward->qKernel = KernelFamily::Sm90;
  m.backward->qBlockKV = 32;
  m.backward->separateDq = true;
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->backward->qKernel, KernelFamily::Sm90);
  EXPECT_EQ(back->backward->qBlockKV, 32);
  EXPECT_TRUE(back->backward->separateDq);
  EXPECT_EQ(back->serialize(), m.serialize());
  back = KernelMetadata::parse(backwardMetadata().serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->backward->qKernel, KernelFamily::Sm80);
  EXPECT_FALSE(back->backward->separateDq);
  const std::string plain = backwardMetadata().serialize();
  EXPECT_FALSE(KernelMetadata::parse(plain + "bwd_q_kernel sm90\n", &error));
  EXPECT_NE(error.find("bwd_q_block_kv"), std::string::npos) << error;
  EXPECT_FALSE(KernelMetadata::parse(plain + "bwd_dq separate\n", &error));
  EXPECT_NE(error.find("bwd_q_kernel"), std::string::npos) << error;
  EXPECT_FALSE(KernelMetadata::parse(plain + "bwd_q_kernel sm80\nbwd_q_block_kv 32\n", &error));
  EXPECT_FALSE(KernelMetadata::parse(plain + "bwd_q_kernel sm90\nbwd_q_block_kv 0\n", &error));
  EXPECT_FALSE(KernelMetadata::parse(plain + "bwd_dq atomics\n", &error));
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() +
                                         "bwd_q_kernel sm90\nbwd_q_block_kv 32\n",
                                     &error));
}

// The forward's ordered grid (block_order.h) survives the cache; only "ordered" is understood.
TEST(KernelMetadata, RoundTripsTheOrderedGrid) {
  KernelMetadata m = documentMetadata();
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_FALSE(back->orderedGrid);
  EXPECT_EQ(m.serialize().find("fwd_grid"), std::string::npos);
  m.orderedGrid = true;
  back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_TRUE(back->orderedGrid);
  EXPECT_EQ(back->serialize(), m.serialize());
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() + "fwd_grid tiles\n", &error));
  EXPECT_NE(error.find("fwd_grid"), std::string::npos) << error;
}

// Tile classes of one head (a mask that ignores the head) survive the cache; the line needs a
// tile-classes entry and understands only "one".
TEST(KernelMetadata, RoundTripsTileClassesOfOneHead) {
  KernelMetadata m = documentMetadata();
  m.inputs[0].summarized = true;
  m.summaryEntry = "attnc_document_summary";
  m.tileClassesEntry = "attnc_document_tile_classes";
  std::string error;
  std::optional<KernelMetadata> back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_FALSE(back->maskIgnoresHead);
  EXPECT_EQ(m.serialize().find("tile_class_heads"), std::string::npos);
  m.maskIgnoresHead = true;
  back = KernelMetadata::parse(m.serialize(), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_TRUE(back->maskIgnoresHead);
  EXPECT_EQ(back->serialize(), m.serialize());
  EXPECT_FALSE(KernelMetadata::parse(documentMetadata().serialize() + "tile_class_heads one\n", &error));
  EXPECT_NE(error.find("tile_class_heads"), std::string::npos) << error;
  m.maskIgnoresHead = false;
  EXPECT_FALSE(KernelMetadata::parse(m.serialize() + "tile_class_heads all\n", &error));
  EXPECT_NE(error.find("tile_class_heads all"), std::string::npos) << error;
}

// One 256-byte aligned region per summarized input, sized by the layout the kernels index with:
// a broadcast (stride 0) batch keeps one row of entries; positions are max(q_len, kv_len).
TEST(Kernel, SummaryPlanSizes) {
  KernelMetadata m = documentMetadata();  // 16 heads
  m.inputs = {{"doc", "i32", "b,pos", true}, {"slopes", "f32", "h", false}, {"w", "f32", "h,pos", true}};
  m.summaryEntry = "document_summary";
  InputRef inputs[kMaxInputs] = {};
  inputs[0] = InputRef{nullptr, 1000, 0, 1, nullptr};
  inputs[1] = InputRef{nullptr, 0, 1, 0, nullptr};
  inputs[2] = InputRef{nullptr, 0, 1000, 1, nullptr};
  SummaryPlan plan = planSummaries(m, inputs, 3, 100, 130);  // 130 positions: 3 blocks
  auto up = [](size_t n) { return (n + 255) / 256 * 256; };
  EXPECT_TRUE(plan.used[0]);
  EXPECT_FALSE(plan.used[1]);
  EXPECT_TRUE(plan.used[2]);
  EXPECT_EQ(plan.offset[0], 0u);
  EXPECT_EQ(plan.offset[2], up(3 * 3 * sizeof(SummaryEntry)));
  EXPECT_EQ(plan.totalBytes, up(3 * 3 * sizeof(SummaryEntry)) + up(16 * 3 * sizeof(SummaryEntry)));
  EXPECT_EQ(plan.mostEntries, 16 * 3);
  inputs[0].stride_b = 0;  // one document layout for every batch
  EXPECT_EQ(planSummaries(m, inputs, 3, 100, 130).offset[2], up(3 * sizeof(SummaryEntry)));
  m.inputs[0].summarized = m.inputs[2].summarized = false;
  EXPECT_EQ(planSummaries(m, inputs, 3, 100, 130).totalBytes, 0u);
  EXPECT_EQ(summaryBlocks(0), 1u);
  EXPECT_EQ(summaryBlocks(17), 3u);  // 8 warps per block
  EXPECT_EQ(summaryBlocks(i64(1) << 40), 65535u);
}

TEST(Kernel, BackwardWorkspaceBytes) {
  Kernel kernel = backwardKernel();
  // dq_accum covers either dK/dV kernel's layout: q_len rounded up to the sm_90a kernel's 64-row
  // tiles (the head dim, 128, is already whole 64-column blocks).
  size_t accum = size_t(2) * 16 * 128 * 128 * 4, delta = size_t(2) * 16 * 100 * 4;
  auto up = [](size_t n) { return (n + 255) / 256 * 256; };
  EXPECT_EQ(kernel.backwardWorkspaceBytes(2, 100, false), up(accum) + up(delta));
  EXPECT_EQ(kernel.backwardWorkspaceBytes(2, 100, true), up(delta));
  EXPECT_EQ(documentKernel().backwardWorkspaceBytes(2, 100, false), 0u);
  EXPECT_TRUE(kernel.hasBackward());
  EXPECT_FALSE(documentKernel().hasBackward());
}

// The families' text in a stored cache entry (the sm_90a forward, dK/dV and dQ kernels here): it
// parses to those families and writes back byte for byte, so entries already on disk stay valid.
TEST(KernelMetadata, ReadsAndWritesTheFamiliesAsStored) {
  const std::string stored =
      "name document\n"
      "entry attnc_document_fwd\n"
      "target sm_90a\n"
      "compute 9.0\n"
      "fwd_kernel sm90\n"
      "threads 384\n"
      "smem_bytes 200000\n"
      "block_q 128\n"
      "block_kv 128\n"
      "head_dim 128\n"
      "head_dim_v 128\n"
      "heads_q 16\n"
      "heads_kv 16\n"
      "dtype bf16\n"
      "scale 0.0883883461\n"
      "dropout 0\n"
      "attnc_version 0.1.0\n"
      "bwd_entry_stem document_bwd\n"
      "bwd_kv_threads 384\n"
      "bwd_q_threads 384\n"
      "bwd_kv_block_kv 128\n"
      "bwd_q_block_q 128\n"
      "bwd_preprocess_rows 64\n"
      "bwd_kv_smem_bytes 200000\n"
      "bwd_q_smem_bytes 150000\n"
      "bwd_kv_kernel sm90\n"
      "bwd_preprocess_threads 256\n"
      "bwd_kv_grid ordered\n"
      "bwd_q_kernel sm90\n"
      "bwd_q_block_kv 64\n"
      "bwd_dq separate\n"
      "summary_entry document_summary\n"
      "input doc i32 pos summarized\n";
  std::string error;
  std::optional<KernelMetadata> m = KernelMetadata::parse(stored, &error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->forwardKernel, KernelFamily::Sm90);
  ASSERT_TRUE(m->backward);
  EXPECT_EQ(m->backward->kvKernel, KernelFamily::Sm90);
  EXPECT_EQ(m->backward->qKernel, KernelFamily::Sm90);
  EXPECT_EQ(m->serialize(), stored);

  std::string sm80 = stored;
  for (const char* key : {"fwd_kernel ", "bwd_kv_kernel "}) {
    const size_t at = sm80.find(std::string("\n") + key + "sm90\n");
    ASSERT_NE(at, std::string::npos) << key;
    sm80.replace(at + 1 + strlen(key), 4, "sm80");
  }
  m = KernelMetadata::parse(sm80, &error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->forwardKernel, KernelFamily::Sm80);
  EXPECT_EQ(m->backward->kvKernel, KernelFamily::Sm80);
  EXPECT_EQ(m->serialize(), sm80);
}

// Each family is named by its own spelling and nothing else (a cache entry naming another is
// rebuilt, never launched with a guessed ABI).
TEST(KernelNames, FamiliesAreNamedByTheirOwnSpellingOnly) {
  for (KernelFamily family : {KernelFamily::Sm80, KernelFamily::Sm90})
    EXPECT_EQ(kernelFamilyNamed(kernelFamilyName(family)), family) << kernelFamilyName(family);
  EXPECT_STRNE(kernelFamilyName(KernelFamily::Sm80), kernelFamilyName(KernelFamily::Sm90));
  for (const char* other : {"", "sm70", "SM90", "sm90 ", "sm9", "sm_90a"})
    EXPECT_FALSE(kernelFamilyNamed(other)) << "'" << other << "'";
}

// The runtime keeps a kernel's backward functions in a table indexed by BackwardEntry and looks
// each up by <stem><suffix>: kAllBackwardEntries lists them in index order, and no two entries
// share a suffix.
TEST(KernelNames, BackwardEntriesHaveDistinctSuffixesInIndexOrder) {
  std::set<std::string> seen;
  for (int i = 0; i < kBackwardEntries; ++i) {
    const BackwardEntry entry = kAllBackwardEntries[i];
    EXPECT_EQ(int(entry), i);
    const std::string suffix = backwardEntrySuffix(entry);
    EXPECT_EQ(suffix.rfind('_', 0), 0u) << "'" << suffix << "'";
    EXPECT_GT(suffix.size(), 1u) << "'" << suffix << "'";
    EXPECT_TRUE(seen.insert(suffix).second) << suffix << " names two entries";
  }
}

// With a separate dQ (BackwardMetadata::separateDq) the default backward needs no dq_accum, but
// only where every compiled form says so: a device may load any of them.
TEST(Kernel, BackwardWorkspaceWithoutDqAccumWhereEveryFormSeparatesDq) {
  KernelMetadata separate = backwardMetadata();
  separate.backward->qKernel = KernelFamily::Sm90;
  separate.backward->qBlockKV = 32;
  separate.backward->separateDq = true;
  const size_t delta = (size_t(2) * 16 * 100 * 4 + 255) / 256 * 256;
  Status status;
  Kernel one = Kernel::fromImages({{separate, kFakeCubin, sizeof kFakeCubin, nullptr}}, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(one.backwardWorkspaceBytes(2, 100, false), delta);
  EXPECT_EQ(one.backwardWorkspaceBytes(2, 100, true), delta);
  KernelMetadata other = backwardMetadata();
  other.target = "sm_80";
  other.computeMajor = 8;
  Kernel both = Kernel::fromImages({{separate, kFakeCubin, sizeof kFakeCubin, nullptr},
                                    {other, kFakeCubin, sizeof kFakeCubin, nullptr}},
                                   &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(both.backwardWorkspaceBytes(2, 100, false),
            backwardKernel().backwardWorkspaceBytes(2, 100, false));
  EXPECT_EQ(both.backwardWorkspaceBytes(2, 100, true), delta);
}

TEST(Kernel, ValidBackwardArgumentsPass) {
  Status status = backwardKernel().validateBackward(validBackwardArgs());
  EXPECT_TRUE(status) << status.message;
  BackwardArgs args = validBackwardArgs();
  args.deterministic = true;
  args.workspace = reinterpret_cast<void*>(uintptr_t(1) << 30);
  args.workspace_bytes = backwardKernel().backwardWorkspaceBytes(2, 256, true);
  status = backwardKernel().validateBackward(args);
  EXPECT_TRUE(status) << status.message;
}

TEST(Kernel, BackwardPreparedInputsChecksWithoutAGpu) {
  BackwardArgs args = validBackwardArgs();
  PreparedInputs empty;
  args.prepared = &empty;
  Status status = backwardKernel().validateBackward(args);
  EXPECT_EQ(status.message, "BackwardArgs.prepared: expected one made by Kernel::prepareInputs, "
                            "got an empty PreparedInputs");
}

TEST(Kernel, BackwardValidationNamesTheArgument) {
  Kernel kernel = backwardKernel();
  const Rejection<BackwardArgs> cases[] = {
      {[](BackwardArgs& a) { a.d_o.data = nullptr; },
       "BackwardArgs.d_o.data: expected a device pointer, got null"},
      {[](BackwardArgs& a) { a.dq.data = static_cast<char*>(a.dq.data) + 8; },
       "BackwardArgs.dq.data: expected 16-byte alignment, got 0x"},
      {[](BackwardArgs& a) { a.dk.stride_s = 132; },
       "BackwardArgs.dk.stride_s: expected a multiple of 8 elements, got 132"},
      {[](BackwardArgs& a) { a.lse = nullptr; }, "BackwardArgs.lse: expected a device pointer, got null"},
      {[](BackwardArgs& a) { a.kv_len = 0; },
       "BackwardArgs.kv_len: expected a value in [1, 1073741824], got 0"},
      {[](BackwardArgs& a) { a.inputs.clear(); }, "BackwardArgs.inputs: expected 1 input(s) (doc), got 0"},
      {[](BackwardArgs& a) {
         a.workspace = reinterpret_cast<void*>(uintptr_t(1) << 30);
         a.workspace_bytes = 1024;
       },
       "BackwardArgs.workspace_bytes: expected at least 4227072 (backwardWorkspaceBytes(2, 256, "
       "false)), got 1024"},
      {[](BackwardArgs& a) {
         a.workspace = reinterpret_cast<void*>((uintptr_t(1) << 30) + 4);
         a.workspace_bytes = size_t(1) << 24;
       },
       "BackwardArgs.workspace: expected 16-byte alignment, got 0x"},
  };
  expectRejected(kernel, cases);
}

// Packed [batch, seq, 3, heads, dim] Q, K and V (or dQ, dK and dV) of documentKernel()'s shape
// at batch 2, length 256: the three interleave in one buffer without sharing a byte.
struct Packed {
  Strides strides = {256 * 3 * 16 * 128, 128, 3 * 16 * 128};
  char* at(char* base, int which) const { return base + which * 16 * 128 * 2; }
};

// Reading tensors that overlap is legal (self-attention passes Q == K); what the launch writes
// must share no byte with anything, rows of one written tensor included. Each case is the
// message a user sees; the first ones must pass.
TEST(Kernel, ValidationRejectsOverlappingWrites) {
  Kernel kernel = documentKernel();
  ForwardArgs same = validArgs();
  same.k = same.v = same.q;  // read three times
  Status status = kernel.validate(same);
  EXPECT_TRUE(status) << status.message;
  ForwardArgs packed = validArgs();
  char* base = reinterpret_cast<char*>(uintptr_t(1) << 30);
  Packed layout;
  packed.q = tensorArg(layout.at(base, 0), layout.strides);
  packed.k = tensorArg(layout.at(base, 1), layout.strides);
  packed.v = tensorArg(layout.at(base, 2), layout.strides);
  packed.o = outputArg(base + (1 << 24), bshdStrides(16, 256, 128));
  packed.lse = reinterpret_cast<float*>(base + (1 << 25));
  status = kernel.validate(packed);
  EXPECT_TRUE(status) << status.message;

  const Rejection<ForwardArgs> cases[] = {
      {[](ForwardArgs& a) { a.o.data = const_cast<void*>(a.q.data); },
       "ForwardArgs.o: expected no byte in common with q, got o at [0x"},
      {[](ForwardArgs& a) { a.o.data = static_cast<char*>(const_cast<void*>(a.k.data)) - 16; },
       "ForwardArgs.o: expected no byte in common with k, got o at [0x"},
      {[](ForwardArgs& a) { a.lse = static_cast<float*>(a.o.data) + 4; },
       "ForwardArgs.o: expected no byte in common with lse, got o at [0x"},
      {[](ForwardArgs& a) { a.lse = static_cast<float*>(const_cast<void*>(a.inputs[0].data)); },
       "ForwardArgs.lse: expected no byte in common with inputs[0] (doc), got lse at [0x"},
      {[](ForwardArgs& a) { a.o.stride_s = 64; },  // two rows share half a row
       "ForwardArgs.o.stride_s: expected a stride of at least 128 elements (the rows of a written "
       "tensor must not overlap"},
      {[](ForwardArgs& a) { a.o.stride_h = a.o.stride_s; },  // two heads share every row
       "ForwardArgs.o.stride_s: expected a stride of at least 2048 elements"},
      {[](ForwardArgs& a) { a.o.stride_b = 16 * 256 * 128 - 8; },  // one row of batch 1 in 0's
       "ForwardArgs.o.stride_b: expected a stride of at least 524288 elements"},
  };
  expectRejected(kernel, cases);
}

// Strides whose extent passes int64 (or the address space) are errors naming the stride, never
// a wrapped offset.
TEST(Kernel, ValidationRejectsExtentsPastInt64) {
  Kernel kernel = documentKernel();
  ForwardArgs one = validArgs();  // the stride of a dimension of extent 1 is never used
  one.batch = 1;
  one.q.stride_b = one.o.stride_b = INT64_MAX - 7;
  Status status = kernel.validate(one);
  EXPECT_TRUE(status) << status.message;
  const Rejection<ForwardArgs> cases[] = {
      {[](ForwardArgs& a) { a.q.stride_b = int64_t(1) << 62; },  // x 2 bytes alone overflows
       "ForwardArgs.q.stride_b: expected a stride that keeps the tensor's last byte within 2^63 "
       "bytes of its start (2 along it, 2-byte elements), got 4611686018427387904"},
      {[](ForwardArgs& a) { a.k.stride_s = int64_t(1) << 56; },  // x 2 bytes x 255 overflows
       "ForwardArgs.k.stride_s: expected a stride that keeps the tensor's last byte within 2^63"},
      {[](ForwardArgs& a) {  // each term fits, their sum does not
         a.v.stride_b = int64_t(1) << 61;
         a.v.stride_h = int64_t(1) << 58;
       },
       "ForwardArgs.v.stride_h: expected a stride that keeps the tensor's last byte within 2^63"},
      {[](ForwardArgs& a) { a.inputs[0].stride_pos = INT64_MAX / 4; },
       "ForwardArgs.inputs[0] (doc).stride_pos: expected a stride that keeps the tensor's last byte "
       "within 2^63 bytes of its start (256 along it, 4-byte elements)"},
      {[](ForwardArgs& a) { a.o.data = reinterpret_cast<void*>(~uintptr_t(0) - 4095); },
       "ForwardArgs.o.data: expected a tensor that ends inside the address space, got 0x"},
  };
  expectRejected(kernel, cases);
}

// The backward writes dQ, dK, dV and the workspace: none may share a byte with another or with
// what it reads. Packed dQ, dK and dV (one [batch, seq, 3, heads, dim] buffer) are fine.
TEST(Kernel, BackwardValidationRejectsOverlappingWrites) {
  Kernel kernel = backwardKernel();
  BackwardArgs packed = validBackwardArgs();
  char* base = reinterpret_cast<char*>(uintptr_t(1) << 31);
  Packed layout;
  packed.dq = outputArg(layout.at(base, 0), layout.strides);
  packed.dk = outputArg(layout.at(base, 1), layout.strides);
  packed.dv = outputArg(layout.at(base, 2), layout.strides);
  packed.workspace = base + (1 << 25);
  packed.workspace_bytes = kernel.backwardWorkspaceBytes(2, 256, false);
  Status status = kernel.validateBackward(packed);
  EXPECT_TRUE(status) << status.message;

  const Rejection<BackwardArgs> cases[] = {
      {[](BackwardArgs& a) { a.dk = a.dv = a.dq; },
       "BackwardArgs.dq: expected no byte in common with dk, got dq at [0x"},
      {[](BackwardArgs& a) { a.dv.data = static_cast<char*>(a.dk.data) + (1 << 20); },
       "BackwardArgs.dk: expected no byte in common with dv"},
      {[](BackwardArgs& a) { a.dq.data = const_cast<void*>(a.d_o.data); },
       "BackwardArgs.dq: expected no byte in common with d_o"},
      {[](BackwardArgs& a) { a.dk.stride_b = 8; },  // batch 1's rows start inside batch 0's
       "BackwardArgs.dk.stride_b: expected a stride of at least 128 elements"},
      {[](BackwardArgs& a) {
         a.workspace = a.dq.data;
         a.workspace_bytes = size_t(1) << 24;
       },
       "BackwardArgs.dq: expected no byte in common with workspace"},
      {[](BackwardArgs& a) {
         a.workspace = const_cast<float*>(a.lse) - 64;
         a.workspace_bytes = size_t(1) << 24;
       },
       "BackwardArgs.workspace: expected no byte in common with lse"},
  };
  expectRejected(kernel, cases);
}

// The workspace size is exact or 0: never negative, never wrapped. Lengths past the launch
// bounds (batch 65535, lengths 2^30) and sizes past INT64_MAX give 0, and validateBackward
// rejects a launch whose workspace would not fit.
TEST(Kernel, BackwardWorkspaceBytesIsExactOrZero) {
  Kernel kernel = backwardKernel();  // 16 heads, head dim 128
  EXPECT_EQ(kernel.backwardWorkspaceBytes(2, INT32_MAX, false), 0u);
  EXPECT_EQ(kernel.backwardWorkspaceBytes(2, INT32_MAX, true), 0u);
  EXPECT_EQ(kernel.backwardWorkspaceBytes(2, (int64_t(1) << 30) + 1, true), 0u);
  EXPECT_EQ(kernel.backwardWorkspaceBytes((int64_t(1) << 32) + 1, 64, false), 0u);
  EXPECT_EQ(kernel.backwardWorkspaceBytes(65536, 64, false), 0u);
  EXPECT_EQ(kernel.backwardWorkspaceBytes(-1, 64, false), 0u);
  EXPECT_EQ(kernel.backwardWorkspaceBytes(1, 0, true), 0u);
  // The largest lengths: 65535 x 16 rows of 2^30 positions, 128 fp32 dq_accum columns and one
  // delta: exact.
  using u128 = unsigned __int128;
  const u128 rows = 65535 * 16, q = int64_t(1) << 30;
  EXPECT_EQ(kernel.backwardWorkspaceBytes(65535, int64_t(q), false),
            size_t(rows * q * 128 * 4 + rows * q * 4));
  EXPECT_EQ(kernel.backwardWorkspaceBytes(65535, int64_t(q), true), size_t(rows * q * 4));
  // With 65535 heads and batch 1024 the dq_accum passes INT64_MAX bytes (the delta alone does not).
  KernelMetadata wide = backwardMetadata();
  wide.headsQ = wide.headsKV = 65535;
  Status status;
  Kernel many = Kernel::fromCubin(wide, kFakeCubin, sizeof kFakeCubin, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(many.backwardWorkspaceBytes(1024, int64_t(q), false), 0u);
  const u128 deltaBytes = u128(1024) * 65535 * q * 4;
  EXPECT_EQ(many.backwardWorkspaceBytes(1024, int64_t(q), true), size_t(deltaBytes));
  EXPECT_EQ(many.backwardWorkspaceBytes(65535, int64_t(q), true), 0u);
  BackwardArgs args = validBackwardArgs();
  args.batch = 65535;
  args.q_len = args.kv_len = int64_t(q);
  args.q = args.k = args.v = args.o = args.d_o = TensorArg{args.q.data, 0, 0, 0};
  status = many.validateBackward(args);
  EXPECT_EQ(status.message.rfind("BackwardArgs.q_len: expected a backward workspace (fp32 rows of "
                                 "batch x heads_q x q_len) within 2^63 bytes, got batch 65535, "
                                 "heads_q 65535, q_len 1073741824", 0),
            0u)
      << status.message;
}

TEST(Kernel, BackwardNeedsBackwardKernels) {
  Status status = documentKernel().validateBackward(validBackwardArgs());
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("this kernel was compiled without backward kernels: compile with "
                                "backward enabled"),
            std::string::npos)
      << status.message;
  EXPECT_NE(documentKernel().backward(validBackwardArgs(), nullptr).message.find(
                "compiled without backward kernels"),
            std::string::npos);
}

TEST(Kernel, EmptyKernelIsAnError) {
  Kernel kernel;
  EXPECT_FALSE(kernel.validate(validArgs()).ok);
  EXPECT_FALSE(kernel.forward(validArgs(), nullptr).ok);
}

TEST(Target, ComputeCapabilityNames) {
  EXPECT_EQ(Target::nameForComputeCapability(9, 0), "sm_90a");
  EXPECT_EQ(Target::nameForComputeCapability(8, 0), "sm_80");
  EXPECT_EQ(Target::nameForComputeCapability(8, 6), "sm_86");
  EXPECT_EQ(Target::nameForComputeCapability(8, 9), "sm_89");
  EXPECT_EQ(Target::nameForComputeCapability(7, 5), "");
}

TEST(Target, FromDeviceWithoutGpuIsAnError) {
  Status status;
  Target target = Target::fromDevice(4096, &status);
  EXPECT_FALSE(status.ok);  // no driver here, or no device 4096 anywhere
  EXPECT_TRUE(target.name.empty());
  EXPECT_NE(status.message.find("Target::fromDevice(4096)"), std::string::npos) << status.message;
}

// copyFrom checks both ranges before it touches the driver (empty buffers: no GPU needed).
TEST(DeviceBuffer, CopyFromChecksBothRangesFirst) {
  DeviceBuffer destination, source;
  EXPECT_TRUE(destination.copyFrom(0, source, 0, 0).ok);
  Status status = destination.copyFrom(0, source, 0, 1);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("DeviceBuffer::copyFrom: offset + bytes = 0 + 1: expected at "
                                "most the buffer's 0 bytes"),
            std::string::npos)
      << status.message;
  status = destination.copyFrom(0, source, 1, 0);
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("sourceOffset + bytes = 1 + 0"), std::string::npos)
      << status.message;
  status = destination.copyFrom(1, source, 0, 0);
  EXPECT_NE(status.message.find("copyFrom: offset + bytes = 1 + 0"), std::string::npos)
      << status.message;
}

std::string readFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

CacheEntry sampleEntry() {
  return {documentMetadata(), std::vector<char>(kFakeCubin, kFakeCubin + 16), ".version 8.0\n"};
}

TEST(KernelCache, StoresAndLoads) {
  const attnc::testing::ScratchDir dir("store");
  KernelCache cache(dir.path() + "/nested/dir");
  ASSERT_TRUE(cache.store("k1", sampleEntry()));
  CacheEntry entry;
  std::string why;
  ASSERT_EQ(cache.load("k1", &entry, &why), KernelCache::Lookup::Hit) << why;
  EXPECT_EQ(entry.cubin, sampleEntry().cubin);
  EXPECT_EQ(entry.ptx, sampleEntry().ptx);
  EXPECT_EQ(entry.metadata.serialize(), documentMetadata().serialize());
  EXPECT_EQ(cache.load("k2", &entry, &why), KernelCache::Lookup::Missing);
}

// The JIT's entry groups: the further modules come back in order, each with its PTX; an entry whose
// last module is cut short is corrupt.
TEST(KernelCache, StoresFurtherModules) {
  const attnc::testing::ScratchDir dir("modules");
  KernelCache cache(dir.path());
  CacheEntry stored = sampleEntry();
  stored.moreModules.push_back({std::vector<char>(kFakeCubin, kFakeCubin + 12), ".version 8.1\n"});
  stored.moreModules.push_back({std::vector<char>(kFakeCubin, kFakeCubin + 8), ""});
  ASSERT_TRUE(cache.store("m", stored));
  CacheEntry entry;
  std::string why;
  ASSERT_EQ(cache.load("m", &entry, &why), KernelCache::Lookup::Hit) << why;
  ASSERT_EQ(entry.moreModules.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(entry.moreModules[i].cubin, stored.moreModules[i].cubin) << i;
    EXPECT_EQ(entry.moreModules[i].ptx, stored.moreModules[i].ptx) << i;
  }
  EXPECT_EQ(entry.cubin, stored.cubin);
  // The module count is what was stored: an entry of one further module decodes as one.
  CacheEntry shorter = stored;
  shorter.moreModules.pop_back();
  std::string bytes = encodeCacheEntry("m", shorter);
  EXPECT_TRUE(decodeCacheEntry(bytes, "m", &entry, &why)) << why;
  EXPECT_EQ(entry.moreModules.size(), 1u);
}

// An entry point is found only under its whole name: the dK/dV kernel's name is a prefix of its
// deterministic twin's, and the two may sit in different modules.
TEST(ModuleSymbols, WholeNamesOnly) {
  static const char kTable[] = "\0x_fwd\0x_bwd_kv_nodq\0x_bwd_q";  // and the literal's NUL
  const std::vector<char> cubin(kTable, kTable + sizeof kTable);
  EXPECT_TRUE(cubinDefines(cubin, "x_fwd"));
  EXPECT_TRUE(cubinDefines(cubin, "x_bwd_kv_nodq"));
  EXPECT_TRUE(cubinDefines(cubin, "x_bwd_q"));
  EXPECT_FALSE(cubinDefines(cubin, "x_bwd_kv"));
  EXPECT_FALSE(cubinDefines(cubin, "bwd_q"));
  const std::string ptx = ".visible .entry x_bwd_kv_nodq(\n.param .align 8 .b8 p[1]\n)\n";
  EXPECT_TRUE(ptxDefines(ptx, "x_bwd_kv_nodq"));
  EXPECT_FALSE(ptxDefines(ptx, "x_bwd_kv"));
  EXPECT_FALSE(ptxDefines(ptx, "kv_nodq"));
}

// Kernel::fromImages keeps every module of a form, and names a module that is not a cubin.
TEST(Kernel, FromImagesKeepsFurtherModules) {
  static const char kOther[] = "\x7f" "ELF" "other module";
  KernelImage image{documentMetadata(), kFakeCubin, sizeof kFakeCubin, nullptr};
  image.moreModules.push_back({kOther, sizeof kOther, nullptr});
  Status status;
  Kernel kernel = Kernel::fromImages({image}, &status);
  ASSERT_TRUE(status) << status.message;
  ASSERT_EQ(kernel.moduleCount(), 2u);
  EXPECT_EQ(kernel.cubin(0), kernel.cubin());
  EXPECT_EQ(std::string(kernel.cubin(1).begin(), kernel.cubin(1).end()),
            std::string(kOther, sizeof kOther));
  EXPECT_TRUE(kernel.cubin(2).empty());

  image.moreModules.push_back({"PTX?", 4, nullptr});
  Kernel bad = Kernel::fromImages({image}, &status);
  EXPECT_FALSE(bad.valid());
  EXPECT_NE(status.message.find("module 2: expected a cubin"), std::string::npos) << status.message;
}

TEST(KernelCache, TruncatedAndFlippedEntriesAreDeleted) {
  const attnc::testing::ScratchDir dir("corrupt");
  KernelCache cache(dir.path());
  std::string bytes = encodeCacheEntry("k", sampleEntry());
  for (size_t cut : {size_t(3), size_t(30), bytes.size() / 2, bytes.size() - 1}) {
    writeFile(cache.pathFor("k"), bytes.substr(0, cut));
    CacheEntry entry;
    std::string why;
    EXPECT_EQ(cache.load("k", &entry, &why), KernelCache::Lookup::Corrupt) << cut;
    EXPECT_TRUE(readFile(cache.pathFor("k")).empty()) << "a corrupt entry is deleted";
  }
  for (size_t bit : {size_t(0), bytes.size() * 8 / 2, bytes.size() * 8 - 1}) {
    std::string flipped = bytes;
    flipped[bit / 8] ^= char(1 << (bit % 8));
    writeFile(cache.pathFor("k"), flipped);
    CacheEntry entry;
    std::string why;
    EXPECT_EQ(cache.load("k", &entry, &why), KernelCache::Lookup::Corrupt) << bit;
  }
  writeFile(cache.pathFor("other"), bytes);  // a whole entry under the wrong name
  CacheEntry entry;
  std::string why;
  EXPECT_EQ(cache.load("other", &entry, &why), KernelCache::Lookup::Corrupt);
  EXPECT_NE(why.find("another key"), std::string::npos) << why;
}

TEST(KernelCache, GetOrBuildRebuildsCorruptEntries) {
  const attnc::testing::ScratchDir dir("rebuild");
  KernelCache cache(dir.path());
  int builds = 0;
  auto build = [&](CacheEntry* entry) {
    ++builds;
    *entry = sampleEntry();
    return Status::success();
  };
  CacheEntry entry;
  KernelCache::Outcome outcome;
  ASSERT_TRUE(cache.getOrBuild("k", build, &entry, &outcome));
  EXPECT_FALSE(outcome.hit);
  ASSERT_TRUE(cache.getOrBuild("k", build, &entry, &outcome));
  EXPECT_TRUE(outcome.hit);
  EXPECT_EQ(builds, 1);
  std::string bytes = readFile(cache.pathFor("k"));
  writeFile(cache.pathFor("k"), bytes.substr(0, bytes.size() - 10));
  ASSERT_TRUE(cache.getOrBuild("k", build, &entry, &outcome));
  EXPECT_TRUE(outcome.rebuilt);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(readFile(cache.pathFor("k")), bytes);
}

TEST(KernelCache, DirectoryFromEnvironment) {
  std::string saved[3];
  const char* names[3] = {"ATTNC_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  bool had[3];
  for (int i = 0; i < 3; ++i)
    if ((had[i] = std::getenv(names[i]) != nullptr)) saved[i] = std::getenv(names[i]);
  setenv("HOME", "/home/u", 1);
  unsetenv("ATTNC_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(KernelCache::defaultDirectory(), "/home/u/.cache/attnc");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(KernelCache::defaultDirectory(), "/xdg/attnc");
  setenv("ATTNC_CACHE_DIR", "/explicit", 1);
  EXPECT_EQ(KernelCache::defaultDirectory(), "/explicit");
  for (int i = 0; i < 3; ++i) had[i] ? (void)setenv(names[i], saved[i].c_str(), 1) : (void)unsetenv(names[i]);
}

}  // namespace
}  // namespace attnc
