// The C API's error codes (attnc_c.h, ATTNC_ERROR_*): each kind of failure returns its own code
// beside the message, and every code is nonzero, so callers that test `!= ATTNC_OK` still see it.
// Runs without a GPU; where a GPU is present, the no-GPU cases are skipped. Out of memory and
// attnc's own bugs cannot be caused here: their codes are checked on the messages the runtime
// gives for them (runtime/CApiErrors.h, compiled into this test).
#include "attnc/attnc_c.h"
#include "runtime/CApiErrors.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

const char* kSpec = "name: capi_codes\nhead_dim: 64\nheads: 2\nmask: causal\n";

std::string takeError(char* message) {
  std::string text = message ? message : "";
  attnc_free_string(message);
  return text;
}

// Compiles `yaml` for `target` without the disk cache; the code, and the message in *said.
int compileUncached(const char* yaml, const char* target, std::string* said,
                    double timeoutSeconds = 0) {
  attnc_compile_options options{};
  options.struct_size = sizeof options;
  options.use_cache = -1;
  options.timeout_seconds = timeoutSeconds;
  attnc_kernel* kernel = nullptr;
  char* message = nullptr;
  const int code = attnc_compile_text_opts(yaml, target, &options, &kernel, &message);
  *said = takeError(message);
  attnc_kernel_free(kernel);
  return code;
}

bool hasGpu() {
  attnc_kernel* kernel = nullptr;
  const int code = attnc_compile_text(kSpec, nullptr, &kernel, nullptr);
  attnc_kernel_free(kernel);
  return code == ATTNC_OK;
}

TEST(CApiErrorCodes, AreDistinctAndNonzero) {
  const int codes[] = {ATTNC_ERROR,         ATTNC_ERROR_BAD_SPEC, ATTNC_ERROR_BAD_ARGUMENT,
                       ATTNC_ERROR_NO_GPU,  ATTNC_ERROR_NVRTC,    ATTNC_ERROR_OUT_OF_MEMORY,
                       ATTNC_ERROR_INTERNAL};
  for (size_t i = 0; i < std::size(codes); ++i) {
    EXPECT_NE(codes[i], ATTNC_OK);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(codes[i], codes[j]);
  }
  EXPECT_EQ(ATTNC_ERROR, 1);  // the one code callers had before the others
}

TEST(CApiErrorCodes, SpecErrorsAreBadSpec) {
  std::string said;
  EXPECT_EQ(compileUncached("name: x\nhead_dim: 64\nheads: 2\nmask: causl\n", "sm_80", &said),
            ATTNC_ERROR_BAD_SPEC);
  EXPECT_NE(said.find("<spec text>:4:7: error:"), std::string::npos) << said;
  EXPECT_EQ(compileUncached("name: x\nhead_dim: [\n", "sm_80", &said), ATTNC_ERROR_BAD_SPEC);

  attnc_kernel* kernel = nullptr;
  char* message = nullptr;
  EXPECT_EQ(attnc_compile_file("/nonexistent/spec.yaml", "sm_80", &kernel, &message),
            ATTNC_ERROR_BAD_SPEC);
  EXPECT_NE(takeError(message).find("/nonexistent/spec.yaml"), std::string::npos);
}

TEST(CApiErrorCodes, ArgumentErrorsAreBadArgument) {
  std::string said;
  EXPECT_EQ(compileUncached(kSpec, "sm_99", &said), ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_NE(said.find("sm_99"), std::string::npos) << said;

  attnc_kernel* kernel = nullptr;
  char* message = nullptr;
  EXPECT_EQ(attnc_compile_text(nullptr, "sm_80", &kernel, &message), ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(takeError(message), "attnc_compile_text: yaml is null");
  EXPECT_EQ(attnc_compile_text_ex(kSpec, "sm_80", 8u, &kernel, &message), ATTNC_ERROR_BAD_ARGUMENT);
  takeError(message);
  EXPECT_EQ(attnc_kernel_forward(nullptr, nullptr, nullptr, &message), ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(takeError(message), "attnc_kernel_forward: kernel is null");
  EXPECT_EQ(attnc_kernel_info(nullptr, nullptr), ATTNC_ERROR_BAD_ARGUMENT);

  // Launch arguments that Kernel::validate refuses: a bad argument for the launch too, before
  // any GPU is looked for.
  ASSERT_EQ(attnc_compile_text(kSpec, "sm_80", &kernel, &message), ATTNC_OK) << takeError(message);
  attnc_forward_args args{};
  args.batch = 1;
  args.q_len = args.kv_len = 0;
  EXPECT_EQ(attnc_kernel_validate(kernel, &args, &message), ATTNC_ERROR_BAD_ARGUMENT);
  takeError(message);
  EXPECT_EQ(attnc_kernel_forward(kernel, &args, nullptr, &message), ATTNC_ERROR_BAD_ARGUMENT);
  EXPECT_NE(takeError(message).find("ForwardArgs."), std::string::npos);
  attnc_kernel_free(kernel);
}

TEST(CApiErrorCodes, NoGpuIsNoGpu) {
  if (hasGpu()) GTEST_SKIP() << "a CUDA device is present";
  attnc_kernel* kernel = nullptr;
  char* message = nullptr;
  EXPECT_EQ(attnc_compile_text(kSpec, nullptr, &kernel, &message), ATTNC_ERROR_NO_GPU);
  EXPECT_NE(takeError(message).find("no target given"), std::string::npos);

  // Arguments that pass validation (BHSD tensors 4 MiB apart, never read): the launch itself
  // needs the driver.
  ASSERT_EQ(attnc_compile_text(kSpec, "sm_80", &kernel, &message), ATTNC_OK) << takeError(message);
  const uintptr_t base = uintptr_t(1) << 20;
  const auto tensorAt = [](uintptr_t address) {
    const int64_t s = 64;  // 2 heads, 256 positions
    return attnc_tensor{reinterpret_cast<const void*>(address), 2 * 256 * s, 256 * s, s};
  };
  attnc_forward_args args{};
  args.q = tensorAt(base);
  args.k = tensorAt(base + (1 << 22));
  args.v = tensorAt(base + (2 << 22));
  args.o = tensorAt(base + (3 << 22));
  args.batch = 1;
  args.q_len = args.kv_len = 256;
  ASSERT_EQ(attnc_kernel_validate(kernel, &args, &message), ATTNC_OK) << takeError(message);
  EXPECT_EQ(attnc_kernel_forward(kernel, &args, nullptr, &message), ATTNC_ERROR_NO_GPU);
  takeError(message);
  attnc_kernel_free(kernel);
}

TEST(CApiErrorCodes, NvrtcFailuresAreNvrtc) {
  std::string said;
  // A deadline NVRTC cannot meet: its compile is stopped.
  EXPECT_EQ(compileUncached(kSpec, "sm_80", &said, 1e-6), ATTNC_ERROR_NVRTC);
  EXPECT_NE(said.find("took longer than"), std::string::npos) << said;
}

// $ATTNC_NVRTC_PATH naming a library that is not NVRTC (the C math library: it loads, first,
// and lacks every nvrtc* symbol). NVRTC is loaded once per process, so this runs in a fresh one
// (the threadsafe death test style runs the statement in a new run of this binary).
TEST(CApiErrorCodes, UnusableNvrtcIsNvrtc) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("ATTNC_NVRTC_PATH", "libm.so.6", 1);
        std::string said;
        std::exit(compileUncached(kSpec, "sm_80", &said));
      },
      ::testing::ExitedWithCode(ATTNC_ERROR_NVRTC), "");
}

TEST(CApiErrorCodes, UnusableEnvironmentIsPlainError) {
  ::setenv("ATTNC_COMPILE_TIMEOUT", "soon", 1);
  std::string said;
  const int code = compileUncached(kSpec, "sm_80", &said);
  ::unsetenv("ATTNC_COMPILE_TIMEOUT");
  EXPECT_EQ(code, ATTNC_ERROR);
  EXPECT_NE(said.find("ATTNC_COMPILE_TIMEOUT"), std::string::npos) << said;
}

// The messages DeviceBuffer and the launches give when the driver is out of device memory
// (DriverApi::describe names CUDA_ERROR_OUT_OF_MEMORY), beside a driver failure of another kind.
TEST(CApiErrorCodes, OutOfDeviceMemoryIsOutOfMemory) {
  using attnc::capi::launchFailureCode;
  EXPECT_EQ(launchFailureCode("DeviceBuffer::allocate(1073741824): cuMemAlloc: "
                              "CUDA_ERROR_OUT_OF_MEMORY: out of memory"),
            ATTNC_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(launchFailureCode("Kernel::backward: growing the workspace: DeviceBuffer::allocate(64)"
                              ": cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory"),
            ATTNC_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(launchFailureCode("kernel 'x': cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED: unspecified "
                              "launch failure"),
            ATTNC_ERROR_NO_GPU);
  EXPECT_EQ(launchFailureCode("ForwardArgs.prepared: made by another kernel"),
            ATTNC_ERROR_BAD_ARGUMENT);
}

TEST(CApiErrorCodes, CompileFailuresByStep) {
  using attnc::capi::compileFailureCode;
  EXPECT_EQ(compileFailureCode("'x': the compiler produced no backward kernels (a bug in attnc)"),
            ATTNC_ERROR_INTERNAL);
  EXPECT_EQ(compileFailureCode("spec.yaml:3:11: error: head_dim: must be ...\nhead_dim: 100\n"),
            ATTNC_ERROR_BAD_SPEC);
  EXPECT_EQ(compileFailureCode("spec 'x': error: the sm_80 kernels need head_dim <= 256"),
            ATTNC_ERROR_BAD_SPEC);
  EXPECT_EQ(compileFailureCode("NVRTC failed on x.cu(12): error: expected a ';'"),
            ATTNC_ERROR_NVRTC);
}

}  // namespace
