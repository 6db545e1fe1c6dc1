// The compile budget: NVRTC in a child process (runtime/ChildProcess.h), so that a crash, an abort
// or a hang of NVRTC or ptxas is an error and the caller lives on; the compile timeout of
// Nvrtc::compile, the JIT (JitOptions::compileTimeoutSeconds) and $ATTNC_COMPILE_TIMEOUT.
#include "attnc/attnc.h"
#include "compiler/Spec/Spec.h"
#include "runtime/ChildProcess.h"
#include "runtime/ForkGate.h"
#include "runtime/Nvrtc.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <unistd.h>

namespace attnc {
namespace {

using Clock = std::chrono::steady_clock;

// Whether process `pid` is gone (reaped, not a zombie): kill(pid, 0) finds no such process.
bool gone(int pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

TEST(ChildProcess, ReturnsWhatTheChildReturned) {
  // Larger than a pipe's buffer, with standard error written too: both pipes are drained at once.
  const std::string big(3 << 20, 'x');
  ChildOutcome outcome = runInChild(
      [&] {
        std::fputs(std::string(200000, 'e').c_str(), stderr);
        return big + "end";
      },
      std::nullopt);
  ASSERT_EQ(outcome.end, ChildOutcome::End::Finished) << outcome.error;
  EXPECT_EQ(outcome.payload, big + "end");
  EXPECT_EQ(outcome.errorOutput.size(), 200000u);
  EXPECT_TRUE(gone(outcome.pid));
}

TEST(ChildProcess, AbortIsReportedWithItsSignalAndStandardError) {
  ChildOutcome outcome = runInChild(
      []() -> std::string {
        std::fputs("fatal: about to abort\n", stderr);
        std::abort();
      },
      std::nullopt);
  ASSERT_EQ(outcome.end, ChildOutcome::End::Signaled);
  EXPECT_EQ(outcome.signal, SIGABRT);
  EXPECT_EQ(describeSignal(outcome.signal), "signal 6 (SIGABRT)");
  EXPECT_EQ(outcome.errorOutput, "fatal: about to abort\n");
  EXPECT_TRUE(gone(outcome.pid));
}

TEST(ChildProcess, ExitWithoutAResultIsReported) {
  ChildOutcome outcome = runInChild([]() -> std::string { ::_exit(3); }, std::nullopt);
  ASSERT_EQ(outcome.end, ChildOutcome::End::Exited);
  EXPECT_EQ(outcome.exitStatus, 3);
}

TEST(ChildProcess, HangIsKilledAtTheDeadline) {
  const auto start = Clock::now();
  ChildOutcome outcome = runInChild(
      []() -> std::string {
        ::sleep(60);
        return "late";
      },
      start + std::chrono::milliseconds(200));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(outcome.end, ChildOutcome::End::TimedOut);
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 10.0);
  EXPECT_TRUE(gone(outcome.pid));
}

TEST(ChildProcess, ChildrenOfSeveralThreadsDoNotWaitForEachOther) {
  // A quick child is not held up by a slow one forked at the same time from another thread (which
  // inherits the quick one's pipes for a moment).
  std::optional<ChildOutcome> slow;
  std::thread slowThread([&] {
    slow = runInChild([]() -> std::string {
      ::sleep(3);
      return "slow";
    }, Clock::now() + std::chrono::seconds(30));
  });
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    ChildOutcome quick = runInChild([i] { return std::to_string(i); }, std::nullopt);
    ASSERT_EQ(quick.end, ChildOutcome::End::Finished);
    EXPECT_EQ(quick.payload, std::to_string(i));
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  slowThread.join();
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->payload, "slow");
}

Nvrtc* nvrtcOrSkip() {
  std::string error;
  return Nvrtc::get(&error);
}

const char* kScaleKernel = R"(extern "C" __global__ void scale_kernel(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= 2.0f;
}
)";

// A wgmma whose 64 fp32 accumulators a thread cannot hold under launch bounds of 1024 threads
// (64 registers each): ptxas fails with C7602 and aborts the process it runs in.
std::string registerStarvedKernel() {
  std::string outputs, operands;
  for (int i = 0; i < 64; ++i) {
    outputs += (i ? ", %" : "%") + std::to_string(i);
    operands += std::string(i ? ", " : "") + "\"+f\"(acc[" + std::to_string(i) + "])";
  }
  return "extern \"C\" __global__ void __launch_bounds__(1024, 1)\n"
         "starved(float* out, unsigned long long a, unsigned long long b) {\n"
         "  float acc[64];\n"
         "  for (int i = 0; i < 64; ++i) acc[i] = out[i * 7 + threadIdx.x];\n"
         "  asm volatile(\"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" + outputs +
         "}, %64, %65, 1, 1, 1, 0, 0;\" : " + operands + " : \"l\"(a), \"l\"(b));\n"
         "  for (int i = 0; i < 64; ++i) out[i * 1024 + threadIdx.x] = acc[i];\n"
         "}\n";
}

TEST(NvrtcIsolation, PtxasAbortIsAnErrorNamingTheRegisters) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  NvrtcLimits isolated;
  isolated.isolate = true;
  NvrtcResult result =
      nvrtc->compile(registerStarvedKernel(), "starved.cu", {}, "sm_90a", {}, isolated);
  ASSERT_EQ(result.end, NvrtcEnd::Crashed) << result.log;
  EXPECT_EQ(result.crash, "signal 6 (SIGABRT)");
  EXPECT_NE(result.log.find("Insufficient registers"), std::string::npos) << result.log;
  EXPECT_TRUE(ptxasOutOfRegisters(result));
  const std::string message = describeNvrtcFailure(result, "starved", "sm_90a", 0);
  EXPECT_NE(message.find("'starved': the mask or score expression needs more registers than the "
                         "sm_90a kernel has; simplify it (ptxas: (C7602) Insufficient registers"),
            std::string::npos)
      << message;
}

TEST(NvrtcIsolation, CompilesAsInProcess) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  NvrtcLimits here;
  here.isolate = false;
  NvrtcLimits isolated;
  isolated.isolate = true;
  NvrtcResult a = nvrtc->compile(kScaleKernel, "scale.cu", {}, "sm_80", {}, here);
  NvrtcResult b = nvrtc->compile(kScaleKernel, "scale.cu", {}, "sm_80", {}, isolated);
  ASSERT_TRUE(a.ok) << a.log;
  ASSERT_TRUE(b.ok) << b.log;
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.cubin, b.cubin);
  ASSERT_EQ(b.resources.count("scale_kernel"), 1u) << b.log;
  EXPECT_EQ(a.resources.at("scale_kernel").registers, b.resources.at("scale_kernel").registers);
}

TEST(NvrtcIsolation, ErrorsKeepTheirLog) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  NvrtcResult result =
      nvrtc->compile("extern \"C\" __global__ void f() { undeclared(); }\n", "bad.cu", {}, "sm_80",
                     {}, NvrtcLimits::within(60));
  EXPECT_EQ(result.end, NvrtcEnd::Failed);
  EXPECT_NE(result.log.find("bad.cu(1): error"), std::string::npos) << result.log;
}

TEST(NvrtcTimeout, FiresPastTheDeadline) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  for (bool isolate : {true, false}) {
    NvrtcLimits limits = NvrtcLimits::within(0.001);
    limits.isolate = isolate;
    NvrtcResult result = nvrtc->compile(kScaleKernel, "scale.cu", {}, "sm_90a", {}, limits);
    EXPECT_EQ(result.end, NvrtcEnd::TimedOut) << "isolate " << isolate;
    EXPECT_FALSE(result.ok);
    EXPECT_EQ(describeNvrtcFailure(result, "scale", "sm_90a", limits.timeoutSeconds),
              "compiling 'scale' for sm_90a took longer than 0.001 s (ATTNC_COMPILE_TIMEOUT / "
              "JitOptions::compileTimeoutSeconds)");
  }
}

TEST(NvrtcTimeout, DoesNotFireWithinTheDeadline) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  NvrtcResult result =
      nvrtc->compile(kScaleKernel, "scale.cu", {}, "sm_90a", {}, NvrtcLimits::within(120));
  EXPECT_EQ(result.end, NvrtcEnd::Compiled) << result.log;
  EXPECT_FALSE(result.cubin.empty());
}

// Sets an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CompileTimeoutEnvironment, ParsesSecondsAndRejectsTheRest) {
  double seconds = -1;
  std::string error;
  {
    ScopedEnv env("ATTNC_COMPILE_TIMEOUT", nullptr);
    EXPECT_TRUE(compileTimeoutFromEnvironment(&seconds, &error));
    EXPECT_EQ(seconds, 0);
  }
  {
    ScopedEnv env("ATTNC_COMPILE_TIMEOUT", "2.5");
    EXPECT_TRUE(compileTimeoutFromEnvironment(&seconds, &error));
    EXPECT_EQ(seconds, 2.5);
  }
  for (const char* bad : {"abc", "-1", "5s", "nan", "inf", "1e400", "2e9"}) {
    ScopedEnv env("ATTNC_COMPILE_TIMEOUT", bad);
    error.clear();
    EXPECT_FALSE(compileTimeoutFromEnvironment(&seconds, &error)) << bad;
    EXPECT_EQ(error, "ATTNC_COMPILE_TIMEOUT: expected a number of seconds from 0 (no limit) to "
                     "1e9, got '" + std::string(bad) + "'");
  }
}

const char* kSpec = "name: budget_plain\nhead_dim: 64\nheads: 2\ndtype: bf16\nmask: causal\n";

TEST(JitTimeout, FiresOnARealCompile) {
  if (!nvrtcOrSkip()) GTEST_SKIP() << "no NVRTC";
  JitOptions options;
  options.useCache = false;
  options.compileTimeoutSeconds = 0.001;
  JitCompiler jit(options);
  Status status;
  const auto start = Clock::now();
  Kernel kernel = jit.compileText(kSpec, *Target::byName("sm_80", nullptr), &status, true);
  EXPECT_FALSE(kernel);
  EXPECT_EQ(status.message, "compiling 'budget_plain' for sm_80 took longer than 0.001 s "
                            "(ATTNC_COMPILE_TIMEOUT / JitOptions::compileTimeoutSeconds)");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
}

TEST(JitTimeout, StopsNvrtcMidCompile) {
  // The sm_90a backward takes NVRTC seconds: the deadline passes while the children compile, and
  // they are killed then, not waited for.
  if (!nvrtcOrSkip()) GTEST_SKIP() << "no NVRTC";
  JitOptions options;
  options.useCache = false;
  options.compileTimeoutSeconds = 0.5;
  JitCompiler jit(options);
  Status status;
  const auto start = Clock::now();
  Kernel kernel = jit.compileText(kSpec, *Target::byName("sm_90a", nullptr), &status, true);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(kernel);
  EXPECT_EQ(status.message, "compiling 'budget_plain' for sm_90a took longer than 0.5 s "
                            "(ATTNC_COMPILE_TIMEOUT / JitOptions::compileTimeoutSeconds)");
  EXPECT_GE(seconds, 0.5);
  EXPECT_LT(seconds, 5.0);
}

const char* kVariantSource = "extern \"C\" __global__ void f(float* x) {\n"
                             "#if ATTNC_VARIANT == 1\n  x[0] = 1;\n#else\n  x[0] = 2;\n#endif\n}\n";
const std::vector<std::vector<std::string>> kVariants = {{"-DATTNC_VARIANT=1"},
                                                         {"-DATTNC_VARIANT=2"},
                                                         {"-DATTNC_VARIANT=1"}};

// A kernel the JIT splits into several NVRTC programs (a mask that reads a declared input has a
// tile-classes entry; the backward adds its own), compiled under a timeout, so isolated: all of
// its programs in one child, with the same PTX as compiled in the process. (The isolated compiles
// come first; IsolatedCompilesDoNotForkWhileNvrtcRunsHere has the other order.)
TEST(JitTimeout, ProgramsOfOneKernelCompileInOneChildAsInTheProcess) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  NvrtcLimits here, isolated = NvrtcLimits::within(120);
  here.isolate = false;
  isolated.isolate = true;
  std::vector<NvrtcResult> b =
      nvrtc->compileEach(kVariantSource, "f.cu", {}, "sm_80", kVariants, isolated);

  JitOptions options;
  options.useCache = false;
  options.compileTimeoutSeconds = 300;
  JitCompiler jit(options);
  Status status;
  const std::string spec = "name: budget_inputs\nhead_dim: 64\nheads: 2\n"
                           "inputs: {doc: {dtype: i32, dims: [pos]}}\nmask: {document: doc}\n";
  Kernel kernel = jit.compileText(spec, *Target::byName("sm_80", nullptr), &status, true);
  EXPECT_TRUE(kernel) << status.message;

  std::vector<NvrtcResult> a =
      nvrtc->compileEach(kVariantSource, "f.cu", {}, "sm_80", kVariants, here);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(b[i].end, NvrtcEnd::Compiled) << i << ": " << b[i].log;
    EXPECT_EQ(a[i].ptx, b[i].ptx) << i;
    EXPECT_EQ(a[i].cubin, b[i].cubin) << i;
    EXPECT_EQ(b[i].resources.count("f"), 1u) << i;
  }
  EXPECT_NE(b[0].ptx, b[1].ptx);
  EXPECT_EQ(b[0].ptx, b[2].ptx);
}

// NVRTC's worker threads finish exiting after an in-process compile returns, holding NVRTC's
// mutex for a moment: a fork then would leave the child waiting on it until the deadline. An
// isolated compile does not fork while one runs here, nor until kNvrtcForkSettle after it
// (runtime/ForkGate.h), and then compiles.
TEST(JitTimeout, IsolatedCompilesDoNotForkWhileNvrtcRunsHere) {
  Nvrtc* nvrtc = nvrtcOrSkip();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC";
  NvrtcLimits here;
  here.isolate = false;
  {
    ForkGate::Inside compiling(nvrtcForkGate());
    NvrtcLimits isolated = NvrtcLimits::within(0.5);
    isolated.isolate = true;
    std::vector<NvrtcResult> b =
        nvrtc->compileEach(kVariantSource, "f.cu", {}, "sm_80", kVariants, isolated);
    for (const NvrtcResult& result : b)
      EXPECT_EQ(result.end, NvrtcEnd::TimedOut) << "forked while a compile ran here";
    NvrtcResult one = nvrtc->compile(kVariantSource, "f.cu", {}, "sm_80", {}, isolated);
    EXPECT_EQ(one.end, NvrtcEnd::TimedOut) << "forked while a compile ran here";
  }
  {
    ForkGate::Fork forking = nvrtcForkGate().fork(std::nullopt);
    std::atomic<bool> compiled{false};
    std::thread compiler([&] {
      nvrtc->compile(kVariantSource, "f.cu", {}, "sm_80", {}, here);
      compiled = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(compiled) << "compiled here while a fork was being made";
    forking.release();
    compiler.join();
    EXPECT_TRUE(compiled);
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<NvrtcResult> a =
        nvrtc->compileEach(kVariantSource, "f.cu", {}, "sm_80", kVariants, here);
    NvrtcLimits isolated = NvrtcLimits::within(120);
    isolated.isolate = true;
    std::vector<NvrtcResult> b =
        nvrtc->compileEach(kVariantSource, "f.cu", {}, "sm_80", kVariants, isolated);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(a[i].end, NvrtcEnd::Compiled) << i << ": " << a[i].log;
      ASSERT_EQ(b[i].end, NvrtcEnd::Compiled) << i << ": " << b[i].log;
      EXPECT_EQ(a[i].ptx, b[i].ptx) << i;
    }
  }
}

TEST(JitTimeout, EnvironmentTimeoutAppliesAndBadValuesAreErrors) {
  if (!nvrtcOrSkip()) GTEST_SKIP() << "no NVRTC";
  JitOptions options;
  options.useCache = false;
  JitCompiler jit(options);
  const Target target = *Target::byName("sm_80", nullptr);
  {
    ScopedEnv env("ATTNC_COMPILE_TIMEOUT", "0.001");
    Status status;
    EXPECT_FALSE(jit.compileText(kSpec, target, &status));
    EXPECT_NE(status.message.find("took longer than 0.001 s"), std::string::npos)
        << status.message;
  }
  {
    ScopedEnv env("ATTNC_COMPILE_TIMEOUT", "soon");
    Status status;
    EXPECT_FALSE(jit.compileText(kSpec, target, &status));
    EXPECT_EQ(status.message, "cannot compile 'budget_plain': ATTNC_COMPILE_TIMEOUT: expected a "
                              "number of seconds from 0 (no limit) to 1e9, got 'soon'");
  }
}

TEST(JitTimeout, DoesNotFireWithinTheLimit) {
  if (!nvrtcOrSkip()) GTEST_SKIP() << "no NVRTC";
  JitOptions options;
  options.useCache = false;
  options.compileTimeoutSeconds = 300;
  JitCompiler jit(options);
  Status status;
  EXPECT_TRUE(jit.compileText(kSpec, *Target::byName("sm_80", nullptr), &status)) << status.message;
}

// Compiles are isolated unless $ATTNC_COMPILE_ISOLATION=0, which keeps even a timed compile in
// the process.
TEST(NvrtcIsolation, IsolatedUnlessTheVariableSaysNo) {
  ::unsetenv("ATTNC_COMPILE_ISOLATION");
  EXPECT_TRUE(NvrtcLimits::within(0).isolate);
  EXPECT_TRUE(NvrtcLimits::within(5).isolate);
  ::setenv("ATTNC_COMPILE_ISOLATION", "1", 1);
  EXPECT_TRUE(NvrtcLimits::within(0).isolate);
  ::setenv("ATTNC_COMPILE_ISOLATION", "0", 1);
  EXPECT_FALSE(NvrtcLimits::within(5).isolate);
  ::unsetenv("ATTNC_COMPILE_ISOLATION");
}

}  // namespace
}  // namespace attnc
