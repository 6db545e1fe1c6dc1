// The C API's argument conversion and validation, through libattnc.so itself (no GPU: validation
// runs before any launch). Each error names the struct field, and the expected and given values.
#include "attnc/attnc_c.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace {

const char* kSpec =
    "name: capi_document\nhead_dim: 64\nheads: 2\nmask: {document: doc}\n"
    "inputs:\n  doc: {dtype: i32, dims: [pos]}\n";

struct CompiledKernel {
  attnc_kernel* kernel = nullptr;
  std::string error;
  CompiledKernel() {
    char* message = nullptr;
    if (attnc_compile_text_ex(kSpec, "sm_90a", ATTNC_COMPILE_BACKWARD, &kernel, &message) != ATTNC_OK)
      error = message ? message : "?";
    attnc_free_string(message);
  }
  ~CompiledKernel() { attnc_kernel_free(kernel); }
};

std::string takeError(char* message) {
  std::string text = message ? message : "";
  attnc_free_string(message);
  return text;
}

attnc_tensor tensorAt(uintptr_t address) {
  const int64_t s = 64;  // BHSD, 2 heads, 256 positions
  return attnc_tensor{reinterpret_cast<const void*>(address), 2 * 256 * s, 256 * s, s};
}

TEST(CApi, ForwardAndBackwardArgumentsAreConvertedAndChecked) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  const uintptr_t base = uintptr_t(1) << 20;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};

  attnc_forward_args fwd{};
  fwd.q = tensorAt(base);
  fwd.k = tensorAt(base + (1 << 22));
  fwd.v = tensorAt(base + (2 << 22));
  fwd.o = tensorAt(base + (3 << 22));
  fwd.batch = 2;
  fwd.q_len = fwd.kv_len = 256;
  fwd.inputs = &doc;
  fwd.num_inputs = 1;
  char* message = nullptr;
  EXPECT_EQ(attnc_kernel_validate(compiled.kernel, &fwd, &message), ATTNC_OK) << takeError(message);

  fwd.inputs = nullptr;
  EXPECT_NE(attnc_kernel_validate(compiled.kernel, &fwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_forward_args.inputs: expected 1 inputs, got null");
  fwd.inputs = &doc;
  fwd.q_len = 0;  // reaches Kernel::validate through the conversion
  EXPECT_NE(attnc_kernel_validate(compiled.kernel, &fwd, &message), ATTNC_OK);
  EXPECT_NE(takeError(message).find("q_len"), std::string::npos);

  attnc_backward_args bwd{};
  bwd.q = fwd.q, bwd.k = fwd.k, bwd.v = fwd.v, bwd.o = fwd.o;
  bwd.d_o = tensorAt(base + (4 << 22));
  bwd.dq = tensorAt(base + (5 << 22));
  bwd.dk = tensorAt(base + (6 << 22));
  bwd.dv = tensorAt(base + (7 << 22));
  bwd.lse = reinterpret_cast<const float*>(base + (8 << 22));
  bwd.batch = 2;
  bwd.q_len = bwd.kv_len = 256;
  bwd.inputs = &doc;
  bwd.num_inputs = 1;
  EXPECT_EQ(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK)
      << takeError(message);
  bwd.num_inputs = -1;
  EXPECT_NE(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_backward_args.num_inputs: expected 1 (the kernel's declared "
                                "inputs: doc), got -1");
  bwd.num_inputs = 1;
  bwd.workspace_bytes = -5;
  EXPECT_NE(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message),
            "attnc_backward_args.workspace_bytes: expected a non-negative size, got -5");
  EXPECT_NE(attnc_kernel_validate(compiled.kernel, nullptr, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_forward_args: null");

  // Prepared inputs: the checks that come before any launch.
  EXPECT_NE(attnc_kernel_forward_prepared(compiled.kernel, &fwd, nullptr, nullptr, &message),
            ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_kernel_forward_prepared: prepared: expected one made by "
                                "attnc_kernel_prepare_inputs, got null");
  EXPECT_NE(attnc_kernel_prepare_inputs(compiled.kernel, &fwd, nullptr, nullptr, &message),
            ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_kernel_prepare_inputs: out is null");
  attnc_prepared* prepared = reinterpret_cast<attnc_prepared*>(&docIds);  // overwritten
  fwd.q_len = 0;
  EXPECT_NE(attnc_kernel_prepare_inputs(compiled.kernel, &fwd, nullptr, &prepared, &message),
            ATTNC_OK);
  EXPECT_NE(takeError(message).find("q_len"), std::string::npos);
  EXPECT_EQ(prepared, nullptr);
  EXPECT_NE(attnc_kernel_backward_prepared(compiled.kernel, &bwd, nullptr, nullptr, &message),
            ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_kernel_backward_prepared: prepared: expected one made by "
                                "attnc_kernel_prepare_inputs, got null");
  attnc_prepared_free(nullptr);  // a no-op, as free(NULL)
}

// Valid arguments for CompiledKernel at `base`: BHSD tensors 4 MiB apart, batch 2, length 256.
attnc_forward_args forwardAt(uintptr_t base, const attnc_input* doc) {
  attnc_forward_args fwd{};
  fwd.q = tensorAt(base);
  fwd.k = tensorAt(base + (1 << 22));
  fwd.v = tensorAt(base + (2 << 22));
  fwd.o = tensorAt(base + (3 << 22));
  fwd.batch = 2;
  fwd.q_len = fwd.kv_len = 256;
  fwd.inputs = doc;
  fwd.num_inputs = 1;
  return fwd;
}

// A count larger than the caller's array is an error before any entry past the kernel's declared
// inputs is read: the one entry sits at the end of a page followed by an inaccessible one, so
// a read past it faults.
TEST(CApi, NumInputsIsCheckedBeforeTheArrayIsRead) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* pages = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(pages) + page, page, PROT_NONE), 0);
  auto* doc = reinterpret_cast<attnc_input*>(static_cast<char*>(pages) + page) - 1;
  int32_t docIds = 0;
  *doc = attnc_input{&docIds, 0, 0, 1};
  attnc_forward_args fwd = forwardAt(uintptr_t(1) << 20, doc);
  char* message = nullptr;
  EXPECT_EQ(attnc_kernel_validate(compiled.kernel, &fwd, &message), ATTNC_OK) << takeError(message);
  for (int64_t count : {int64_t(2), int64_t(1000000), INT64_MAX}) {
    fwd.num_inputs = count;
    EXPECT_NE(attnc_kernel_validate(compiled.kernel, &fwd, &message), ATTNC_OK);
    EXPECT_EQ(takeError(message), "attnc_forward_args.num_inputs: expected 1 (the kernel's "
                                  "declared inputs: doc), got " + std::to_string(count));
    attnc_prepared* prepared = nullptr;
    EXPECT_NE(attnc_kernel_prepare_inputs(compiled.kernel, &fwd, nullptr, &prepared, &message),
              ATTNC_OK);
    EXPECT_NE(takeError(message).find("attnc_forward_args.num_inputs"), std::string::npos);
  }
  attnc_backward_args bwd{};
  bwd.inputs = doc;
  bwd.num_inputs = 1000000;
  EXPECT_NE(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_backward_args.num_inputs: expected 1 (the kernel's "
                                "declared inputs: doc), got 1000000");
  munmap(pages, 2 * page);
}

// The backward's int32 fields take only their documented values.
TEST(CApi, BackwardFlagsAreZeroOrOne) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  attnc_forward_args fwd = forwardAt(base, &doc);
  attnc_backward_args bwd{};
  bwd.q = fwd.q, bwd.k = fwd.k, bwd.v = fwd.v, bwd.o = fwd.o;
  bwd.d_o = tensorAt(base + (4 << 22));
  bwd.dq = tensorAt(base + (5 << 22));
  bwd.dk = tensorAt(base + (6 << 22));
  bwd.dv = tensorAt(base + (7 << 22));
  bwd.lse = reinterpret_cast<const float*>(base + (8 << 22));
  bwd.batch = 2;
  bwd.q_len = bwd.kv_len = 256;
  bwd.inputs = &doc;
  bwd.num_inputs = 1;
  char* message = nullptr;
  EXPECT_EQ(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK)
      << takeError(message);
  bwd.reserved = 1;
  EXPECT_NE(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_backward_args.reserved: expected 0, got 1");
  bwd.reserved = 0;
  bwd.deterministic = 2;
  EXPECT_NE(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_backward_args.deterministic: expected 0 or 1, got 2");
  bwd.deterministic = 1;
  bwd.dk = bwd.dq;  // written twice
  EXPECT_NE(attnc_kernel_backward_validate(compiled.kernel, &bwd, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message).rfind("BackwardArgs.dq: expected no byte in common with dk", 0), 0u);
}

// attnc_kernel_backward_workspace_bytes is exact or 0, never negative or wrapped.
TEST(CApi, WorkspaceBytesIsExactOrZero) {
  CompiledKernel compiled;  // 2 heads, head dim 64
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  const attnc_kernel* k = compiled.kernel;
  // 2 x 2 rows of 256 positions: fp32 dq_accum of 64 columns and one delta, 256-byte aligned.
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, 2, 256, 0), 4 * 256 * 64 * 4 + 4 * 256 * 4);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, 2, 256, 1), 4 * 256 * 4);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, 2, INT32_MAX, 0), 0);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, 2, INT32_MAX, 1), 0);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, (int64_t(1) << 32) + 1, 64, 0), 0);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, INT64_MIN, INT64_MIN, 0), 0);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, 2, 256, 7), 0);
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(nullptr, 2, 256, 0), 0);
  // The largest lengths: 65535 x 2 rows of 2^30 positions.
  const int64_t rows = 65535 * 2, q = int64_t(1) << 30;
  EXPECT_EQ(attnc_kernel_backward_workspace_bytes(k, 65535, q, 0),
            rows * q * 64 * 4 + rows * q * 4);
}

// The deterministic mode's kernels, compiled ahead of their first launch: once, then nothing left.
TEST(CApi, DeferredKernelsCompileOnce) {
  CompiledKernel compiled;
  ASSERT_TRUE(compiled.error.empty()) << compiled.error;
  char* message = nullptr;
  int32_t had = -1;
  EXPECT_EQ(attnc_kernel_compile_deferred(compiled.kernel, &had, &message), ATTNC_OK)
      << takeError(message);
  EXPECT_EQ(had, 1) << "nothing was deferred";
  EXPECT_EQ(attnc_kernel_compile_deferred(compiled.kernel, &had, &message), ATTNC_OK)
      << takeError(message);
  EXPECT_EQ(had, 0);
  EXPECT_EQ(attnc_kernel_compile_deferred(compiled.kernel, nullptr, &message), ATTNC_OK);
  EXPECT_NE(attnc_kernel_compile_deferred(nullptr, &had, &message), ATTNC_OK);
  EXPECT_EQ(takeError(message), "attnc_kernel_compile_deferred: kernel is null");
}

// attnc_info's layout is what docs/runtime.md gives the ctypes mirrors (test/gpu/attnc_ctypes.py,
// examples/ctypes/attnc_ctypes.py): the library writes the whole struct, so a shorter mirror would
// be overrun.
static_assert(sizeof(attnc_info) == 80, "docs/runtime.md: sizeof(attnc_info)");
static_assert(offsetof(attnc_info, dropout_rounds) == 76, "dropout_rounds last");

// The info names the Philox rounds a dropout kernel's mask is made with (0 without dropout).
TEST(CApi, InfoReportsDropoutRounds) {
  const struct {
    const char* dropout;
    int32_t rounds;
  } cases[] = {{"", 0}, {"dropout: 0.1\n", 7}, {"dropout: {p: 0.1, rounds: 10}\n", 10}};
  for (const auto& c : cases) {
    const std::string spec = std::string("name: capi_rounds\nhead_dim: 64\nheads: 2\n") + c.dropout;
    attnc_kernel* kernel = nullptr;
    char* message = nullptr;
    ASSERT_EQ(attnc_compile_text(spec.c_str(), "sm_90a", &kernel, &message), ATTNC_OK)
        << takeError(message);
    attnc_info info{};
    EXPECT_EQ(attnc_kernel_info(kernel, &info), ATTNC_OK);
    EXPECT_EQ(info.dropout_rounds, c.rounds) << spec;
    attnc_kernel_free(kernel);
  }
}

// The versioned structs' layouts, as docs/runtime.md gives them to the ctypes mirrors.
static_assert(sizeof(attnc_seq_layout) == 136, "docs/runtime.md: sizeof(attnc_seq_layout)");
static_assert(sizeof(attnc_forward_args_ex) == 240,
              "docs/runtime.md: sizeof(attnc_forward_args_ex)");
static_assert(sizeof(attnc_decode_plan) == 32, "docs/runtime.md: sizeof(attnc_decode_plan)");
static_assert(sizeof(attnc_backward_args_ex) == 360,
              "docs/runtime.md: sizeof(attnc_backward_args_ex)");
static_assert(offsetof(attnc_backward_args_ex, layout) == 352,
              "test/python/test_seq_layout.py: BackwardArgsEx.layout's offset");

// The smallest struct_size of each versioned struct: through `layout`, through `v_stride_page`.
constexpr uint32_t kMinArgsEx = offsetof(attnc_forward_args_ex, layout) + sizeof(void*);
constexpr uint32_t kMinLayout = offsetof(attnc_seq_layout, v_stride_page) + sizeof(int64_t);

attnc_forward_args_ex forwardExOf(const attnc_forward_args& base) {
  attnc_forward_args_ex ex{};
  ex.struct_size = sizeof ex;
  ex.base = base;
  return ex;
}

// A paged K/V for forwardAt's lengths: pools of 64 pages of 16 rows (vLLM's [pages, page_size,
// heads, dim], with K's and V's strides set so), tables of 16 pages a sequence; device arrays 4 MiB
// past the tensors.
attnc_seq_layout pagedAt(uintptr_t base) {
  attnc_seq_layout layout{};
  layout.struct_size = sizeof layout;
  layout.block_table = reinterpret_cast<const int32_t*>(base + (5 << 22));
  layout.seq_lens_kv = reinterpret_cast<const int32_t*>(base + (6 << 22));
  layout.block_table_stride = layout.max_pages = 16;
  layout.page_size = 16;
  layout.num_pages = 64;
  layout.k_stride_page = layout.v_stride_page = 16 * 2 * 64;
  return layout;
}

// validate: the code and the message (empty on success).
template <class Args, class Validate>
std::pair<int, std::string> verdictOf(const attnc_kernel* kernel, const Args* args,
                                      Validate validate) {
  char* message = nullptr;
  const int code = validate(kernel, args, &message);
  return {code, takeError(message)};
}

// A newer caller's struct (Args followed by a field this library does not know): accepted while
// the field is 0, refused with `refusal` once it is set.
template <class Args, class Validate>
void expectNewerFieldChecked(const attnc_kernel* kernel, const Args& args, Validate validate,
                             const std::string& refusal) {
  struct {
    Args args;
    uint64_t newerField;
  } newer{args, 0};
  newer.args.struct_size = sizeof newer;
  EXPECT_EQ(verdictOf(kernel, &newer.args, validate).second, "");
  newer.newerField = 1;
  EXPECT_EQ(verdictOf(kernel, &newer.args, validate),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT), refusal));
}

// With no layout, attnc_kernel_validate_ex is attnc_kernel_validate on `base`, verdict and
// message, whatever is wrong with it.
TEST(CApi, ForwardExWithoutLayoutIsTheForwardCall) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  void (*const mutations[])(attnc_forward_args&) = {
      [](attnc_forward_args&) {},
      [](attnc_forward_args& a) { a.q_len = 0; },
      [](attnc_forward_args& a) { a.inputs = nullptr; },
      [](attnc_forward_args& a) { a.num_inputs = 3; },
      [](attnc_forward_args& a) { a.o = a.q; },
      [](attnc_forward_args& a) { a.k.stride_s = 12; },
  };
  for (auto mutate : mutations) {
    attnc_forward_args fwd = forwardAt(base, &doc);
    mutate(fwd);
    const attnc_forward_args_ex ex = forwardExOf(fwd);
    const auto plain = verdictOf(compiled.kernel, &fwd, attnc_kernel_validate);
    EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex), plain);
    if (plain.first != ATTNC_OK) {  // refused before any launch: no GPU needed
      EXPECT_EQ(verdictOf(compiled.kernel, &ex,
                          [](const attnc_kernel* k, const attnc_forward_args_ex* a, char** e) {
                            return attnc_kernel_forward_ex(k, a, nullptr, e);
                          }),
                plain);
      EXPECT_EQ(attnc_kernel_forward_workspace_bytes(compiled.kernel, &ex), -1);
    } else {
      EXPECT_GE(attnc_kernel_forward_workspace_bytes(compiled.kernel, &ex), 0);
    }
  }
  EXPECT_EQ(verdictOf(compiled.kernel, static_cast<const attnc_forward_args_ex*>(nullptr),
                      attnc_kernel_validate_ex),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                           std::string("attnc_forward_args_ex: null")));
  EXPECT_EQ(verdictOf(nullptr, static_cast<const attnc_forward_args_ex*>(nullptr),
                      attnc_kernel_validate_ex),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                           std::string("attnc_kernel_validate_ex: kernel is null")));
}

// struct_size: below the first version's fields an error naming it; the fields past a smaller
// (older) one read as 0; a larger (newer) one's bytes past this library's struct must be 0.
TEST(CApi, ForwardExStructSizeIsChecked) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  attnc_forward_args_ex ex = forwardExOf(forwardAt(base, &doc));
  const std::string tooSmall = "attnc_forward_args_ex.struct_size: expected at least " +
                               std::to_string(kMinArgsEx) +
                               " (through layout; sizeof(attnc_forward_args_ex) = 240) and at "
                               "most 4096, got ";
  for (uint32_t size : {0u, kMinArgsEx - 1, 4097u}) {
    ex.struct_size = size;
    EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex),
              std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT), tooSmall + std::to_string(size)));
  }
  // An older caller's struct ends at `layout`: what follows in its memory is not read.
  ex.struct_size = kMinArgsEx;
  ex.num_splits = 1000;
  ex.reserved = 7;
  ex.workspace_bytes = -1;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex).second, "");
  ex.struct_size = sizeof ex;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex).second,
            "attnc_forward_args_ex.reserved: expected 0, got 7");
  ex.reserved = 0;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex).second,
            "attnc_forward_args_ex.workspace_bytes: expected a non-negative size, got -1");
  ex.workspace_bytes = 0;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex).second,
            "ForwardArgs.num_splits = 1000: in [0, 128] (0: derived from the device and the "
            "lengths)");
  ex.num_splits = 0;
  // A newer caller's struct: its fields past this library's must be 0.
  expectNewerFieldChecked(compiled.kernel, ex, attnc_kernel_validate_ex,
                          "attnc_forward_args_ex: expected 0 in the bytes past this library's "
                          "struct (240: a newer attnc_c.h's field this library does not know), "
                          "got byte 240 = 1 of struct_size 248");
}

// attnc_seq_layout reaches Kernel::validate field by field: its struct_size as the arguments',
// a part (varlen, paged) given where any of its fields is set.
TEST(CApi, SeqLayoutIsConvertedAndChecked) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  attnc_forward_args_ex ex = forwardExOf(forwardAt(base, &doc));
  attnc_seq_layout layout = pagedAt(base);
  ex.layout = &layout;
  ex.base.k.stride_s = ex.base.v.stride_s = 2 * 64;  // the pools' rows: [pages, 16, heads, dim]
  ex.base.k.stride_h = ex.base.v.stride_h = 64;
  auto messageOf = [&] { return verdictOf(compiled.kernel, &ex, attnc_kernel_validate_ex).second; };
  EXPECT_EQ(messageOf(), "");
  layout.page_size = 48;
  EXPECT_EQ(messageOf(), "ForwardArgs.paged.page_size = 48: a power of two in [1, 256]");
  layout.page_size = 16;
  ex.base.kv_len = 257;
  EXPECT_EQ(messageOf(), "ForwardArgs.kv_len = 257: at most paged.max_pages x page_size = 16 x "
                         "16 = 256 (the longest sequence's pages fit a table row)");
  ex.base.kv_len = 256;
  // Host copies through the C struct.
  const int32_t lens[2] = {256, 300};
  layout.host_seq_lens_kv = lens;
  EXPECT_EQ(messageOf(), "ForwardArgs.paged.seq_lens_kv[1] = 300 needs 19 pages of 16; the table "
                         "row has 16");
  // An older caller's layout ends at v_stride_page: the host copies past it are not read.
  layout.struct_size = kMinLayout;
  EXPECT_EQ(messageOf(), "");
  for (uint32_t size : {0u, kMinLayout - 1}) {
    layout.struct_size = size;
    EXPECT_EQ(messageOf(), "attnc_seq_layout.struct_size: expected at least " +
                               std::to_string(kMinLayout) +
                               " (through v_stride_page; sizeof(attnc_seq_layout) = 136) and at "
                               "most 4096, got " + std::to_string(size));
  }
  layout = pagedAt(base);
  layout.reserved = 1;
  EXPECT_EQ(messageOf(), "attnc_seq_layout.reserved: expected 0, got 1");
  // A part's field without its array is that array missing, not contiguous K/V.
  layout = attnc_seq_layout{};
  layout.struct_size = sizeof layout;
  layout.page_size = 16;
  EXPECT_EQ(messageOf(), "ForwardArgs.paged.block_table = null: a device pointer (int32) (a paged "
                         "K/V cache's pages)");
  layout.page_size = 0;
  layout.total_q = 512;
  EXPECT_EQ(messageOf(), "ForwardArgs.varlen.cu_seqlens_q = null: an array with cu_seqlens_kv "
                         "null (or varlen null for contiguous Q, K, V)");
  // An all-zero layout is contiguous Q, K, V.
  layout.total_q = 0;
  EXPECT_EQ(messageOf(), "");
  // Packed Q: [total_q rows], stride_b unused; its host offsets checked.
  const int32_t offsets[3] = {0, 256, 600};
  layout.cu_seqlens_q = reinterpret_cast<const int32_t*>(base + (7 << 22));
  layout.total_q = 512;
  layout.host_cu_seqlens_q = offsets;
  ex.base.q.stride_b = ex.base.o.stride_b = 5;
  EXPECT_EQ(messageOf(), "ForwardArgs.varlen.cu_seqlens_q[2] = 600 > total_q = 512");
}

// attnc_kernel_decode_plan and attnc_kernel_forward_workspace_bytes refuse what validation
// refuses, before they look for a GPU.
TEST(CApi, DecodePlanAndWorkspaceBytesRefuseBadArguments) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  attnc_forward_args_ex ex = forwardExOf(forwardAt(base, &doc));
  attnc_seq_layout layout = pagedAt(base);
  ex.layout = &layout;
  ex.base.k.stride_s = ex.base.v.stride_s = 2 * 64;  // the pools' rows: [pages, 16, heads, dim]
  ex.base.k.stride_h = ex.base.v.stride_h = 64;
  attnc_decode_plan plan;
  char* message = nullptr;
  EXPECT_EQ(attnc_kernel_decode_plan(compiled.kernel, &ex, 132, nullptr, &message),
            ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(takeError(message), "attnc_kernel_decode_plan: out is null");
  EXPECT_EQ(attnc_kernel_decode_plan(compiled.kernel, &ex, -1, &plan, &message),
            ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(takeError(message), "attnc_kernel_decode_plan: num_sms: expected 0 (the current "
                                "device's) or a number of SMs, got -1");
  layout.page_size = 3;
  plan.splits = 99;
  EXPECT_EQ(attnc_kernel_decode_plan(compiled.kernel, &ex, 132, &plan, &message),
            ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(takeError(message), "ForwardArgs.paged.page_size = 3: a power of two in [1, 256]");
  EXPECT_EQ(plan.splits, 0) << "a refused call leaves a zeroed plan";
  EXPECT_EQ(attnc_kernel_forward_workspace_bytes(compiled.kernel, &ex), -1);
  layout.page_size = 16;
  EXPECT_GE(attnc_kernel_forward_workspace_bytes(compiled.kernel, &ex), 0);
  // The size asked for does not depend on a workspace given.
  ex.workspace = reinterpret_cast<void*>(base + 8);
  EXPECT_GE(attnc_kernel_forward_workspace_bytes(compiled.kernel, &ex), 0);
  EXPECT_EQ(attnc_kernel_forward_workspace_bytes(nullptr, &ex), -1);
  EXPECT_EQ(attnc_kernel_forward_workspace_bytes(compiled.kernel, nullptr), -1);
  ex.struct_size = 0;
  EXPECT_EQ(attnc_kernel_forward_workspace_bytes(compiled.kernel, &ex), -1);
}

// Valid backward arguments for CompiledKernel at `base`: forwardAt's tensors, then d_o, dq, dk,
// dv and the LSE, 4 MiB apart.
attnc_backward_args backwardAt(uintptr_t base, const attnc_input* doc) {
  const attnc_forward_args fwd = forwardAt(base, doc);
  attnc_backward_args bwd{};
  bwd.q = fwd.q, bwd.k = fwd.k, bwd.v = fwd.v, bwd.o = fwd.o;
  bwd.d_o = tensorAt(base + (4 << 22));
  bwd.dq = tensorAt(base + (5 << 22));
  bwd.dk = tensorAt(base + (6 << 22));
  bwd.dv = tensorAt(base + (7 << 22));
  bwd.lse = reinterpret_cast<const float*>(base + (8 << 22));
  bwd.batch = 2;
  bwd.q_len = bwd.kv_len = 256;
  bwd.inputs = doc;
  bwd.num_inputs = 1;
  return bwd;
}

attnc_backward_args_ex backwardExOf(const attnc_backward_args& base) {
  attnc_backward_args_ex ex{};
  ex.struct_size = sizeof ex;
  ex.base = base;
  return ex;
}

// attnc_kernel_backward_ex as a validate-shaped call (it refuses bad arguments before it looks
// for a GPU).
int backwardExLaunch(const attnc_kernel* kernel, const attnc_backward_args_ex* args,
                     char** error) {
  return attnc_kernel_backward_ex(kernel, args, nullptr, error);
}

// With no layout, attnc_kernel_backward_validate_ex is attnc_kernel_backward_validate on `base`,
// code and message, whatever is wrong with it.
TEST(CApi, BackwardExWithoutLayoutIsTheBackwardCall) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  void (*const mutations[])(attnc_backward_args&) = {
      [](attnc_backward_args&) {},
      [](attnc_backward_args& a) { a.q_len = 0; },
      [](attnc_backward_args& a) { a.inputs = nullptr; },
      [](attnc_backward_args& a) { a.num_inputs = 3; },
      [](attnc_backward_args& a) { a.dk = a.dq; },
      [](attnc_backward_args& a) { a.lse = nullptr; },
      [](attnc_backward_args& a) { a.deterministic = 2; },
      [](attnc_backward_args& a) { a.reserved = 1; },
      [](attnc_backward_args& a) { a.workspace_bytes = -5; },
  };
  for (auto mutate : mutations) {
    attnc_backward_args bwd = backwardAt(base, &doc);
    mutate(bwd);
    const attnc_backward_args_ex ex = backwardExOf(bwd);
    const auto plain = verdictOf(compiled.kernel, &bwd, attnc_kernel_backward_validate);
    EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_backward_validate_ex), plain);
    if (plain.first != ATTNC_OK)  // refused before any launch: no GPU needed
      EXPECT_EQ(verdictOf(compiled.kernel, &ex, backwardExLaunch), plain);
  }
  const auto* none = static_cast<const attnc_backward_args_ex*>(nullptr);
  EXPECT_EQ(verdictOf(compiled.kernel, none, attnc_kernel_backward_validate_ex),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                           std::string("attnc_backward_args_ex: null")));
  EXPECT_EQ(verdictOf(nullptr, none, attnc_kernel_backward_validate_ex),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                           std::string("attnc_kernel_backward_validate_ex: kernel is null")));
  EXPECT_EQ(verdictOf(nullptr, none, backwardExLaunch),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                           std::string("attnc_kernel_backward_ex: kernel is null")));
}

// struct_size as attnc_forward_args_ex's (the same reader): below the fields through `layout` or
// above 4096 an error naming it; a newer caller's bytes past this library's struct must be 0.
TEST(CApi, BackwardExStructSizeIsChecked) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  constexpr uint32_t kMinBackwardEx = offsetof(attnc_backward_args_ex, layout) + sizeof(void*);
  attnc_backward_args_ex ex = backwardExOf(backwardAt(base, &doc));
  const std::string tooSmall = "attnc_backward_args_ex.struct_size: expected at least " +
                               std::to_string(kMinBackwardEx) +
                               " (through layout; sizeof(attnc_backward_args_ex) = 360) and at "
                               "most 4096, got ";
  for (uint32_t size : {0u, 8u, kMinBackwardEx - 1, 4097u}) {
    ex.struct_size = size;
    for (auto call : {attnc_kernel_backward_validate_ex, backwardExLaunch})
      EXPECT_EQ(verdictOf(compiled.kernel, &ex, call),
                std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT), tooSmall + std::to_string(size)));
  }
  ex.struct_size = kMinBackwardEx;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_backward_validate_ex).second, "");
  ex.reserved = 3;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_backward_validate_ex),
            std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                           std::string("attnc_backward_args_ex.reserved: expected 0, got 3")));
  ex.reserved = 0;
  // A newer caller's struct: its fields past this library's must be 0.
  expectNewerFieldChecked(compiled.kernel, ex, attnc_kernel_backward_validate_ex,
                          "attnc_backward_args_ex: expected 0 in the bytes past this library's "
                          "struct (360: a newer attnc_c.h's field this library does not know), "
                          "got byte 360 = 1 of struct_size 368");
}

// A packed batch reaches BackwardArgs::varlen: the host copies of cu_seqlens required and checked,
// the layout's own struct_size and reserved field read as the forward's.
TEST(CApi, BackwardExVarlenLayoutIsConvertedAndChecked) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  attnc_backward_args_ex ex = backwardExOf(backwardAt(base, &doc));
  // Packed [total, heads, dim] rows (stride_b unused) for every tensor, 2 sequences of 256.
  for (attnc_tensor* t : {&ex.base.q, &ex.base.k, &ex.base.v, &ex.base.o, &ex.base.d_o,
                          &ex.base.dq, &ex.base.dk, &ex.base.dv})
    *t = attnc_tensor{t->data, 0, 64, 2 * 64};
  const int32_t offsets[3] = {0, 256, 512};
  attnc_seq_layout layout{};
  layout.struct_size = sizeof layout;
  layout.cu_seqlens_q = reinterpret_cast<const int32_t*>(base + (9 << 22));
  layout.cu_seqlens_kv = reinterpret_cast<const int32_t*>(base + (10 << 22));
  layout.total_q = layout.total_kv = 512;
  layout.host_cu_seqlens_q = layout.host_cu_seqlens_kv = offsets;
  ex.layout = &layout;
  auto verdict = [&](auto call) { return verdictOf(compiled.kernel, &ex, call); };
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex).second, "");
  const auto refused = [](const std::string& message) {
    return std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT), message);
  };
  layout.host_cu_seqlens_q = nullptr;
  for (auto call : {attnc_kernel_backward_validate_ex, backwardExLaunch})
    EXPECT_EQ(verdict(call), refused("BackwardArgs.varlen.host_cu_seqlens_q: required with "
                                     "cu_seqlens_q (the backward runs a launch per sequence), "
                                     "got null"));
  layout.host_cu_seqlens_q = offsets;
  const int32_t beyond[3] = {0, 256, 600};
  layout.host_cu_seqlens_kv = beyond;
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex),
            refused("BackwardArgs.varlen.cu_seqlens_kv[2] = 600 > total_kv = 512"));
  layout.host_cu_seqlens_kv = offsets;
  // What only the backward reads and writes is checked a sequence at a time, before any launch.
  const void* dO = ex.base.d_o.data;
  ex.base.d_o.data = nullptr;
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex).first, int(ATTNC_ERROR_BAD_ARGUMENT));
  const std::string noDo = verdict(attnc_kernel_backward_validate_ex).second;
  EXPECT_EQ(noDo.rfind("sequence 0: BackwardArgs.d_o", 0), 0u)
      << noDo;
  ex.base.d_o.data = dO;
  attnc_tensor dv = ex.base.dv;
  ex.base.dv = ex.base.dq;  // dV's rows over dQ's
  EXPECT_NE(verdict(attnc_kernel_backward_validate_ex).second.find("sequence 0: "),
            std::string::npos)
      << verdict(attnc_kernel_backward_validate_ex).second;
  ex.base.dv = dv;
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex).second, "");
  // A varlen field without its array is that array missing, not a contiguous batch (of
  // contiguous tensors, which pass without the layout).
  ex.base = backwardAt(base, &doc);
  layout.cu_seqlens_q = nullptr;
  layout.host_cu_seqlens_q = nullptr;
  layout.cu_seqlens_kv = nullptr;
  layout.host_cu_seqlens_kv = nullptr;
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex),
            refused("BackwardArgs.varlen.cu_seqlens_q = null: an array with cu_seqlens_kv null "
                    "(or varlen null for contiguous Q, K, V)"));
  layout = attnc_seq_layout{};
  layout.struct_size = 8;
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex).second.rfind(
                "attnc_seq_layout.struct_size: expected at least ", 0),
            0u);
  layout.struct_size = sizeof layout;
  layout.reserved = 1;
  EXPECT_EQ(verdict(attnc_kernel_backward_validate_ex),
            refused("attnc_seq_layout.reserved: expected 0, got 1"));
}

// The backward takes no paged K/V: any field of a layout's paged part is refused by name, the
// first set in the struct's order.
TEST(CApi, BackwardExRefusesPagedLayouts) {
  CompiledKernel compiled;
  ASSERT_NE(compiled.kernel, nullptr) << compiled.error;
  int32_t docIds = 0;
  attnc_input doc{&docIds, 0, 0, 1};
  const uintptr_t base = uintptr_t(1) << 20;
  attnc_backward_args_ex ex = backwardExOf(backwardAt(base, &doc));
  attnc_seq_layout layout = pagedAt(base);
  ex.layout = &layout;
  for (auto call : {attnc_kernel_backward_validate_ex, backwardExLaunch})
    EXPECT_EQ(verdictOf(compiled.kernel, &ex, call),
              std::make_pair(int(ATTNC_ERROR_BAD_ARGUMENT),
                             std::string("attnc_backward_args_ex.layout->block_table: expected "
                                         "null (the backward takes no paged K/V), got a "
                                         "pointer")));
  layout = attnc_seq_layout{};
  layout.struct_size = sizeof layout;
  layout.page_size = 16;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_backward_validate_ex).second,
            "attnc_backward_args_ex.layout->page_size: expected 0 (the backward takes no paged "
            "K/V), got 16");
  layout.page_size = 0;
  const int32_t lens[2] = {256, 256};
  layout.host_seq_lens_kv = lens;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_backward_validate_ex).second,
            "attnc_backward_args_ex.layout->host_seq_lens_kv: expected null (the backward takes "
            "no paged K/V), got a pointer");
  // An all-zero layout is the contiguous backward.
  layout.host_seq_lens_kv = nullptr;
  EXPECT_EQ(verdictOf(compiled.kernel, &ex, attnc_kernel_backward_validate_ex).second, "");
}

}  // namespace

// attnc_compile_text_opts: each field checked by name, the timeout honoured, the cache directory
// and the log callback used (a cache directory that is a file is said once, through the log).
TEST(CApi, CompileOptionsAreCheckedAndUsed) {
  const char* spec = "name: capi_opts\nhead_dim: 32\nheads: 2\n";
  attnc_kernel* kernel = nullptr;
  attnc_compile_options options{};
  options.struct_size = 8;
  EXPECT_EQ(attnc_compile_text_opts(spec, "sm_80", &options, &kernel, nullptr),
            ATTNC_ERROR_BAD_ARGUMENT);
  char* message = nullptr;
  attnc_compile_text_opts(spec, "sm_80", &options, &kernel, &message);
  EXPECT_NE(takeError(message).find("options->struct_size: expected at least"), std::string::npos);

  options.struct_size = sizeof options;
  options.reserved = 1;
  ASSERT_EQ(attnc_compile_text_opts(spec, "sm_80", &options, &kernel, &message),
            ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_NE(takeError(message).find("options->reserved: expected 0, got 1"), std::string::npos);
  options.reserved = 0;
  options.timeout_seconds = -1;
  ASSERT_EQ(attnc_compile_text_opts(spec, "sm_80", &options, &kernel, &message),
            ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_NE(takeError(message).find("options->timeout_seconds"), std::string::npos);

  options.timeout_seconds = 0.001;
  options.use_cache = -1;
  ASSERT_EQ(attnc_compile_text_opts(spec, "sm_80", &options, &kernel, &message), ATTNC_ERROR_NVRTC);
  EXPECT_NE(takeError(message).find("took longer than 0.001 s"), std::string::npos);

  char file[] = "/tmp/attnc-capi-opts-XXXXXX";
  const int fd = ::mkstemp(file);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string said;
  int calls = 0;
  struct Log {
    std::string* said;
    int* calls;
  } log{&said, &calls};
  options.timeout_seconds = 0;
  options.use_cache = 1;
  options.cache_dir = file;
  options.log = [](void* user, const char* text) {
    auto* into = static_cast<Log*>(user);
    *into->said += text;
    ++*into->calls;
  };
  options.log_user_data = &log;
  ASSERT_EQ(attnc_compile_text_opts(spec, "sm_80", &options, &kernel, &message), ATTNC_OK)
      << takeError(message);
  attnc_info info{};
  ASSERT_EQ(attnc_kernel_info(kernel, &info), ATTNC_OK);
  EXPECT_EQ(std::string(info.name), "capi_opts");
  attnc_kernel_free(kernel);
  EXPECT_EQ(calls, 1) << said;
  EXPECT_NE(said.find("without the disk cache"), std::string::npos) << said;
  ::unlink(file);
}
