// The C API's argument conversion and validation, through libattnc.so itself (no GPU: validation
// runs before any launch). Each error names the struct field, and the expected and given values.
#include "attnc/attnc_c.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

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
