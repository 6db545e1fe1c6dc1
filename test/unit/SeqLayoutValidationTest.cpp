// Kernel::validate on the inference options (ForwardArgs::varlen, paged, decode, num_splits,
// workspace) without a GPU: each refused value gives the message that names it with expected vs
// given, and the footprints follow the layout (packed rows, paged pools, the int32 arrays).
#include "attnc/attnc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnc {

namespace {

// GQA 8/2, head dim 128, a decode kernel, no declared inputs.
KernelMetadata decodeMetadata() {
  KernelMetadata m;
  m.name = "gqa";
  m.entry = "attnc_gqa_fwd";
  m.target = "sm_80";
  m.computeMajor = 8;
  m.threads = 128;
  m.smemBytes = 81920;
  m.blockQ = 64;
  m.blockKV = 64;
  m.headDim = m.headDimV = 128;
  m.headsQ = 8;
  m.headsKV = 2;
  m.dtype = "bf16";
  m.scale = 0.0883883476f;
  m.decode = DecodeMetadata{"attnc_gqa_decode", "attnc_gqa_decode_combine", 128, 16, 64, 4, 49152};
  m.attncVersion = version();
  return m;
}

// Enough of an ELF header for fromCubin's check; validation never reads further.
const char kFakeCubin[16] = {'\x7f', 'E', 'L', 'F', 2, 1, 1};

Kernel kernelOf(const KernelMetadata& m) {
  Status status;
  Kernel kernel = Kernel::fromCubin(m, kFakeCubin, sizeof kFakeCubin, &status);
  EXPECT_TRUE(status) << status.message;
  return kernel;
}

// Device addresses 256 MiB apart (never read): every tensor below fits in one slot.
char* slot(int i) {
  return reinterpret_cast<char*>((uintptr_t(1) << 32) + uintptr_t(i) * (256 << 20));
}
const int32_t* indexSlot(int i) { return reinterpret_cast<const int32_t*>(slot(i)); }

constexpr int64_t kBatch = 8, kDim = 128, kHeadsQ = 8, kHeadsKV = 2;

// A launch and the layout it points to, with host copies of the arrays.
struct Launch {
  ForwardArgs args;
  VarlenArg varlen;
  PagedKVArg paged;
  std::vector<int32_t> cuQ, cuKV, lens, table;
  Launch() = default;
  Launch(const Launch&) = delete;
};

// A decode step over a paged cache: 8 sequences of one query, up to 4096 keys in pages of 256
// (vLLM's [pages, page_size, heads, dim] pools of 512 pages), Q and O [batch, heads_q, 1, dim].
std::unique_ptr<Launch> pagedLaunch() {
  auto l = std::make_unique<Launch>();
  ForwardArgs& a = l->args;
  Strides s = bhsdStrides(kHeadsQ, 1, kDim);
  a.q = tensorArg(slot(0), s);
  a.o = outputArg(slot(1), s);
  const int64_t rowStride = kHeadsKV * kDim, pageStride = 256 * rowStride;
  a.k = TensorArg{slot(2), 0, kDim, rowStride};
  a.v = TensorArg{slot(3), 0, kDim, rowStride};
  a.batch = kBatch;
  a.q_len = 1;
  a.kv_len = 4096;
  PagedKVArg& p = l->paged;
  p.block_table = indexSlot(4);
  p.seq_lens_kv = indexSlot(5);
  p.block_table_stride = p.max_pages = 16;
  p.page_size = 256;
  p.num_pages = 512;
  p.k_stride_page = p.v_stride_page = pageStride;
  l->lens = {4096, 1, 0, 257, 4000, 256, 17, 3000};
  l->table.resize(kBatch * 16, -1);  // unused entries: -1, as vLLM pads
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t j = 0; j < (l->lens[b] + 255) / 256; ++j)
      l->table[b * 16 + j] = int32_t(b * 16 + j);
  p.host_seq_lens_kv = l->lens.data();
  p.host_block_table = l->table.data();
  a.paged = &l->paged;
  return l;
}

// A prefill of 8 sequences packed along rows: Q/O [800 rows, heads_q, dim], K/V [3000 rows,
// heads_kv, dim], sequences of at most 256 queries and 1024 keys.
std::unique_ptr<Launch> varlenLaunch() {
  auto l = std::make_unique<Launch>();
  ForwardArgs& a = l->args;
  a.q = TensorArg{slot(0), 3, kDim, kHeadsQ * kDim};  // stride_b is never used: any value
  a.o = OutputArg{slot(1), 0, kDim, kHeadsQ * kDim};
  a.k = TensorArg{slot(2), 0, kDim, kHeadsKV * kDim};
  a.v = TensorArg{slot(3), 0, kDim, kHeadsKV * kDim};
  a.batch = kBatch;
  a.q_len = 256;
  a.kv_len = 1024;
  l->cuQ = {0, 100, 200, 300, 400, 500, 600, 700, 800};
  l->cuKV = {0, 1000, 1000, 1500, 2000, 2500, 2600, 2999, 3000};
  VarlenArg& v = l->varlen;
  v.cu_seqlens_q = indexSlot(4);
  v.cu_seqlens_kv = indexSlot(5);
  v.total_q = 800;
  v.total_kv = 3000;
  v.host_cu_seqlens_q = l->cuQ.data();
  v.host_cu_seqlens_kv = l->cuKV.data();
  a.varlen = &l->varlen;
  return l;
}

// The message validate() gives once `mutate` has changed `launch` ("" where it passes).
std::string messageOf(const Kernel& kernel, std::unique_ptr<Launch> launch,
                      void (*mutate)(Launch&)) {
  mutate(*launch);
  Status status = kernel.validate(launch->args);
  return status.ok ? "" : status.message;
}

TEST(SeqLayoutValidation, ValidLayoutsPass) {
  Kernel kernel = kernelOf(decodeMetadata());
  auto keep = [](Launch&) {};
  EXPECT_EQ(messageOf(kernel, pagedLaunch(), keep), "");
  EXPECT_EQ(messageOf(kernel, varlenLaunch(), keep), "");
  // Packed Q over a paged cache; host copies are optional.
  EXPECT_EQ(messageOf(kernel, pagedLaunch(), [](Launch& l) {
              l.varlen = {indexSlot(6), nullptr, 8, 0, nullptr, nullptr};
              l.args.q = TensorArg{slot(0), -5, kDim, kHeadsQ * kDim};
              l.args.o = OutputArg{slot(1), 0, kDim, kHeadsQ * kDim};
              l.args.varlen = &l.varlen;
              l.paged.host_block_table = l.paged.host_seq_lens_kv = nullptr;
            }),
            "");
  EXPECT_EQ(messageOf(kernel, varlenLaunch(), [](Launch& l) {
              l.args.decode = DecodeChoice::On;
              l.args.num_splits = 128;
            }),
            "");
}

// Each case: how to break a valid paged (or varlen) launch, and the whole message.
struct Case {
  bool paged;
  void (*mutate)(Launch&);
  const char* message;
};

void expectMessages(const Kernel& kernel, const std::vector<Case>& cases) {
  for (const Case& c : cases)
    EXPECT_EQ(messageOf(kernel, c.paged ? pagedLaunch() : varlenLaunch(), c.mutate), c.message);
}

TEST(SeqLayoutValidation, HostScalarsNameTheField) {
  Kernel kernel = kernelOf(decodeMetadata());
  expectMessages(
      kernel,
      {
          {true, [](Launch& l) { l.paged.page_size = 48; },
           "ForwardArgs.paged.page_size = 48: a power of two in [1, 256]"},
          {true, [](Launch& l) { l.paged.page_size = 512; },
           "ForwardArgs.paged.page_size = 512: a power of two in [1, 256]"},
          {true, [](Launch& l) { l.paged.num_pages = 0; },
           "ForwardArgs.paged.num_pages = 0: in [1, 2147483647]"},
          {true, [](Launch& l) { l.paged.max_pages = 17; },
           "ForwardArgs.paged.max_pages = 17: in [1, block_table_stride = 16]"},
          {true, [](Launch& l) { l.paged.max_pages = 0; },
           "ForwardArgs.paged.max_pages = 0: in [1, block_table_stride = 16]"},
          {true, [](Launch& l) { l.args.kv_len = 4097; },
           "ForwardArgs.kv_len = 4097: at most paged.max_pages x page_size = 16 x 256 = 4096 "
           "(the longest sequence's pages fit a table row)"},
          {true, [](Launch& l) { l.paged.k_stride_page = 65540; },
           "ForwardArgs.paged.k_stride_page = 65540: a multiple of 8 elements (16-byte rows)"},
          {true, [](Launch& l) { l.paged.v_stride_page = 65528; },
           "ForwardArgs.paged.v_stride_page = 65528: at least 65536 elements (a page: 256 rows "
           "x 2 heads x 128 by v.stride_s = 256, v.stride_h = 128)"},
          {true, [](Launch& l) { l.paged.seq_lens_kv = nullptr; },
           "ForwardArgs.paged.seq_lens_kv = null: a device pointer (int32) (required with "
           "block_table)"},
          {true, [](Launch& l) { l.paged.block_table = nullptr; },
           "ForwardArgs.paged.block_table = null: a device pointer (int32) (a paged K/V cache's "
           "pages)"},
          {true,
           [](Launch& l) { l.paged.block_table = reinterpret_cast<const int32_t*>(slot(4) + 2); },
           "ForwardArgs.paged.block_table = 0x140000002: 4-byte aligned (int32 elements)"},
          {false, [](Launch& l) { l.varlen.total_q = 0; },
           "ForwardArgs.varlen.total_q = 0: at least 1 with cu_seqlens_q (the packed tensors' "
           "rows)"},
          {false, [](Launch& l) { l.varlen.total_kv = 0; },
           "ForwardArgs.varlen.total_kv = 0: at least 1 with cu_seqlens_kv (the packed tensors' "
           "rows)"},
          {false,
           [](Launch& l) {
             l.varlen.cu_seqlens_q = nullptr;
             l.varlen.host_cu_seqlens_q = nullptr;
             l.args.q.stride_b = l.args.o.stride_b = 800 * kHeadsQ * kDim;
           },
           "ForwardArgs.varlen.total_q = 800: 0 without cu_seqlens_q"},
          {false,
           [](Launch& l) {
             l.varlen.cu_seqlens_q = l.varlen.cu_seqlens_kv = nullptr;
             l.varlen.host_cu_seqlens_q = l.varlen.host_cu_seqlens_kv = nullptr;
             l.args.q.stride_b = l.args.o.stride_b = 800 * kHeadsQ * kDim;
           },
           "ForwardArgs.varlen.cu_seqlens_q = null: an array with cu_seqlens_kv null (or varlen "
           "null for contiguous Q, K, V)"},
          {false, [](Launch& l) { l.varlen.cu_seqlens_kv = nullptr; },
           "ForwardArgs.varlen.total_kv = 3000: 0 without cu_seqlens_kv"},
          {true,
           [](Launch& l) {
             l.varlen = {nullptr, indexSlot(6), 0, 100, nullptr, nullptr};
             l.args.varlen = &l.varlen;
           },
           "ForwardArgs.varlen.cu_seqlens_kv = 0x160000000: null with paged.block_table "
           "(either packed K/V or a paged pool)"},
          {false, [](Launch& l) { l.args.num_splits = 129; },
           "ForwardArgs.num_splits = 129: in [0, 128] (0: derived from the device and the "
           "lengths)"},
          {false, [](Launch& l) { l.args.num_splits = -1; },
           "ForwardArgs.num_splits = -1: in [0, 128] (0: derived from the device and the "
           "lengths)"},
          {false, [](Launch& l) { l.args.decode = static_cast<DecodeChoice>(7); },
           "ForwardArgs.decode = 7: Auto (0), Off (1) or On (2)"},
          {false, [](Launch& l) { l.args.decode = DecodeChoice::Off; },
           "ForwardArgs.decode = Off: Auto or On with varlen (the forward kernel takes "
           "contiguous Q, K, V only)"},
          {true, [](Launch& l) { l.args.decode = DecodeChoice::Off; },
           "ForwardArgs.decode = Off: Auto or On with paged (the forward kernel takes "
           "contiguous Q, K, V only)"},
          {true, [](Launch& l) { l.paged.host_seq_lens_kv = nullptr; },
           "ForwardArgs.paged.host_seq_lens_kv = null: a host copy with host_block_table (the "
           "entries a sequence uses follow from its length)"},
      });
}

// Host copies are checked element by element, each message naming the element.
TEST(SeqLayoutValidation, HostCopiesNameTheElement) {
  Kernel kernel = kernelOf(decodeMetadata());
  expectMessages(
      kernel,
      {
          {true,
           [](Launch& l) {
             l.lens[3] = 2000;  // 8 pages
             for (int j = 0; j < 8; ++j) l.table[3 * 16 + j] = 100 + j;
             l.table[3 * 16 + 7] = 912;
           },
           "ForwardArgs.paged.block_table[3][7] = 912: outside [0, 512) pages"},
          {true, [](Launch& l) { l.table[0] = -1; },
           "ForwardArgs.paged.block_table[0][0] = -1: outside [0, 512) pages"},
          {true, [](Launch& l) { l.lens[2] = 5000; },
           "ForwardArgs.paged.seq_lens_kv[2] = 5000 needs 20 pages of 256; the table row has 16"},
          {true,
           [](Launch& l) {
             l.args.kv_len = 3000;
             l.lens[0] = 3001;
           },
           "ForwardArgs.paged.seq_lens_kv[0] = 3001: in [0, kv_len = 3000]"},
          {true, [](Launch& l) { l.lens[6] = -1; },
           "ForwardArgs.paged.seq_lens_kv[6] = -1: in [0, kv_len = 4096]"},
          {false, [](Launch& l) { l.cuQ = {0, 10, 20, 30, 41, 40, 600, 700, 800}; },
           "ForwardArgs.varlen.cu_seqlens_q[5] = 40 < cu_seqlens_q[4] = 41: not increasing"},
          {false, [](Launch& l) { l.cuQ[0] = 3; },
           "ForwardArgs.varlen.cu_seqlens_q[0] = 3: the first offset is 0"},
          {false, [](Launch& l) { l.cuQ[8] = 900; },
           "ForwardArgs.varlen.cu_seqlens_q[8] = 900 > total_q = 800"},
          {false, [](Launch& l) { l.cuQ[2] = 457; },
           "ForwardArgs.varlen.cu_seqlens_q[2] = 457, cu_seqlens_q[1] = 100: sequence 1 has 357 "
           "rows, more than q_len = 256"},
          {false, [](Launch& l) { l.cuKV[1] = 1025; },
           "ForwardArgs.varlen.cu_seqlens_kv[1] = 1025, cu_seqlens_kv[0] = 0: sequence 0 has "
           "1025 rows, more than kv_len = 1024"},
      });
  // (the host copy's address is the test's own)
  EXPECT_EQ(messageOf(kernel, varlenLaunch(),
                      [](Launch& l) {
                        l.varlen.cu_seqlens_kv = nullptr;
                        l.varlen.total_kv = 0;
                      })
                .rfind("ForwardArgs.varlen.host_cu_seqlens_kv = 0x", 0),
            0u);
}

// The decode kernel has no dropout; a kernel without one refuses decode = On.
TEST(SeqLayoutValidation, KernelsWithoutDecodeRefuseIt) {
  KernelMetadata dropout = decodeMetadata();
  dropout.dropout = 0.125f;
  dropout.dropoutRounds = 10;
  dropout.decode.reset();
  Kernel kernel = kernelOf(dropout);
  expectMessages(kernel,
                 {
                     {true, [](Launch&) {},
                      "ForwardArgs.paged = given: null for kernel 'gqa', whose spec has dropout "
                      "0.125 (varlen and paged launches run the decode kernel, which has no "
                      "dropout)"},
                     {false, [](Launch&) {},
                      "ForwardArgs.varlen = given: null for kernel 'gqa', whose spec has dropout "
                      "0.125 (varlen and paged launches run the decode kernel, which has no "
                      "dropout)"},
                 });
  Launch contiguous;
  contiguous.args = pagedLaunch()->args;
  contiguous.args.paged = nullptr;
  contiguous.args.k = tensorArg(slot(2), bhsdStrides(kHeadsKV, 4096, kDim));
  contiguous.args.v = tensorArg(slot(3), bhsdStrides(kHeadsKV, 4096, kDim));
  EXPECT_TRUE(kernel.validate(contiguous.args).ok) << kernel.validate(contiguous.args).message;
  contiguous.args.decode = DecodeChoice::On;
  EXPECT_EQ(kernel.validate(contiguous.args).message,
            "ForwardArgs.decode = On: Auto or Off for kernel 'gqa' (it has no decode kernel: "
            "specs with dropout have none)");
}

bool startsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// Packed Q/O are [total_q rows] and their LSE [heads_q, total_q]; a paged K/V is num_pages pages;
// the int32 arrays and the workspace are footprints too: O shares a byte with none of them.
TEST(SeqLayoutValidation, FootprintsFollowTheLayout) {
  Kernel kernel = kernelOf(decodeMetadata());
  // O in the K pool's last page (past the [batch, heads, kv_len] rows a contiguous K would span).
  EXPECT_PRED2(startsWith, messageOf(kernel, pagedLaunch(), [](Launch& l) {
                 l.args.o.data = slot(2) + 511 * 65536 * 2;
               }),
               "ForwardArgs.o: expected no byte in common with k");
  EXPECT_PRED2(startsWith, messageOf(kernel, varlenLaunch(), [](Launch& l) {
                 l.args.o.data = slot(0) + 799 * kHeadsQ * kDim * 2;
               }),
               "ForwardArgs.o: expected no byte in common with q");
  EXPECT_PRED2(startsWith, messageOf(kernel, varlenLaunch(), [](Launch& l) {
                 l.args.o.data = slot(5) + 32;
               }),
               "ForwardArgs.o: expected no byte in common with varlen.cu_seqlens_kv");
  EXPECT_PRED2(startsWith, messageOf(kernel, pagedLaunch(), [](Launch& l) {
                 l.args.o.data = slot(4) + 7 * 16 * 4;  // the table's last row
               }),
               "ForwardArgs.o: expected no byte in common with paged.block_table");
  EXPECT_PRED2(startsWith, messageOf(kernel, pagedLaunch(), [](Launch& l) {
                 l.args.o.data = slot(5) + 16;
               }),
               "ForwardArgs.o: expected no byte in common with paged.seq_lens_kv");
  // The LSE of 800 packed rows of 8 heads: 25,600 bytes.
  EXPECT_PRED2(startsWith, messageOf(kernel, varlenLaunch(), [](Launch& l) {
                 l.args.lse = reinterpret_cast<float*>(slot(6));
                 l.args.o.data = slot(6) + 25600 - 16;
               }),
               "ForwardArgs.o: expected no byte in common with lse");
  EXPECT_EQ(messageOf(kernel, varlenLaunch(), [](Launch& l) {
              l.args.lse = reinterpret_cast<float*>(slot(6));
              l.args.o.data = slot(6) + 25600;
            }),
            "");
}

TEST(SeqLayoutValidation, WorkspaceIsAlignedLargeEnoughAndApart) {
  Kernel kernel = kernelOf(decodeMetadata());
  std::unique_ptr<Launch> launch = pagedLaunch();
  // Without a GPU the plan takes the target's reference part (sm_80: 108 SMs): a few sequences
  // over 4096 keys split, so the partials need a workspace.
  const size_t needed = kernel.forwardWorkspaceBytes(launch->args);
  ASSERT_GT(needed, 0u);
  launch->args.workspace = slot(7);
  launch->args.workspace_bytes = needed;
  EXPECT_TRUE(kernel.validate(launch->args).ok) << kernel.validate(launch->args).message;
  launch->args.workspace = slot(7) + 8;
  EXPECT_PRED2(startsWith, kernel.validate(launch->args).message,
               "ForwardArgs.workspace: expected 16-byte alignment, got 0x");
  {
    launch->args.workspace = slot(7);
    launch->args.workspace_bytes = needed - 1;
    EXPECT_EQ(kernel.validate(launch->args).message,
              "ForwardArgs.workspace_bytes: expected at least " + std::to_string(needed) +
                  " (forwardWorkspaceBytes(args)), got " + std::to_string(needed - 1));
    // The size it needs is what a caller growing its workspace asks with the short one in args.
    EXPECT_EQ(kernel.forwardWorkspaceBytes(launch->args), needed);
    launch->args.workspace = slot(1);  // O's bytes
    launch->args.workspace_bytes = needed;
    EXPECT_PRED2(startsWith, kernel.validate(launch->args).message,
                 "ForwardArgs.o: expected no byte in common with workspace");
  }
}

}  // namespace
}  // namespace attnc
