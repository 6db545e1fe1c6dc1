// The JIT and its disk cache end to end, without a GPU (NVRTC only): a cold compile runs NVRTC, a
// warm one reads the cache; truncated and bit-flipped entries are rebuilt; eight threads asking for
// one spec compile it once and all get the same cubin; $ATTNC_CACHE_DIR is honoured.
#include "attnc/attnc.h"
#include "runtime/KernelCache.h"
#include "runtime/Nvrtc.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace attnc {
namespace {

const char* kSpec = R"(name: jit_cache_test
head_dim: 64
dtype: bf16
heads: 4
mask: causal
)";

std::string freshDirectory(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/attnc-jit-" + name + "-" +
                    std::to_string(getpid());
  std::string command = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

std::vector<std::string> kernelFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 7 && name.substr(name.size() - 7) == ".kernel") files.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return files;
}

class JitCache : public ::testing::Test {
protected:
  void SetUp() override {
    std::string error;
    if (!Nvrtc::get(&error)) GTEST_SKIP() << "no NVRTC: " << error;
    target = *Target::byName("sm_80", nullptr);
  }
  Kernel compile(const std::string& dir, Status* status) {
    JitCompiler jit(JitOptions{dir, true});
    return jit.compileText(kSpec, target, status);
  }
  Target target;
};

TEST_F(JitCache, ColdThenWarm) {
  std::string dir = freshDirectory("warm");
  JitStats before = JitCompiler::stats();
  Status status;
  Kernel cold = compile(dir, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 1);
  ASSERT_EQ(kernelFiles(dir).size(), 1u);

  Kernel warm = compile(dir, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 1) << "warm compile ran NVRTC";
  EXPECT_EQ(JitCompiler::stats().cacheHits - before.cacheHits, 1);
  EXPECT_EQ(warm.cubin(), cold.cubin());
  EXPECT_EQ(warm.ptx(), cold.ptx());
  EXPECT_EQ(warm.metadata().serialize(), cold.metadata().serialize());
  EXPECT_EQ(warm.entry(), cold.entry());
  EXPECT_EQ(warm.headsQ(), 4);
  EXPECT_GT(warm.smemBytes(), 0);
}

TEST_F(JitCache, DamagedEntriesAreRebuilt) {
  std::string dir = freshDirectory("damaged");
  Status status;
  Kernel original = compile(dir, &status);
  ASSERT_TRUE(status) << status.message;
  std::string path = kernelFiles(dir).at(0);
  std::string bytes;
  {
    std::ifstream file(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  std::string truncated = bytes.substr(0, bytes.size() / 3);
  std::string flipped = bytes;
  flipped[bytes.size() - 100] ^= 0x10;  // inside the cubin/PTX payload
  for (const std::string& damaged : {truncated, flipped}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    JitStats before = JitCompiler::stats();
    Kernel rebuilt = compile(dir, &status);
    ASSERT_TRUE(status) << status.message;
    EXPECT_EQ(JitCompiler::stats().cacheRebuilds - before.cacheRebuilds, 1);
    EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 1);
    EXPECT_EQ(rebuilt.cubin(), original.cubin());
    std::ifstream file(path, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()),
              bytes);
  }
}

TEST_F(JitCache, EightThreadsCompileOnce) {
  std::string dir = freshDirectory("threads");
  JitStats before = JitCompiler::stats();
  std::vector<Kernel> kernels(8);
  std::vector<Status> statuses(8);
  std::vector<std::thread> threads;
  JitCompiler shared(JitOptions{dir, true});
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      // Half share one JitCompiler, half bring their own: both must dedupe.
      if (i % 2) {
        kernels[i] = shared.compileText(kSpec, target, &statuses[i]);
      } else {
        JitCompiler own(JitOptions{dir, true});
        kernels[i] = own.compileText(kSpec, target, &statuses[i]);
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 1);
  EXPECT_EQ(JitCompiler::stats().cacheHits - before.cacheHits, 7);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(statuses[i]) << statuses[i].message;
    EXPECT_EQ(kernels[i].cubin(), kernels[0].cubin()) << "thread " << i;
  }
  EXPECT_EQ(kernelFiles(dir).size(), 1u);
}

TEST_F(JitCache, HonoursCacheDirEnvironment) {
  std::string dir = freshDirectory("env");
  const char* saved = std::getenv("ATTNC_CACHE_DIR");
  std::string savedValue = saved ? saved : "";
  setenv("ATTNC_CACHE_DIR", dir.c_str(), 1);
  JitCompiler jit;  // default options: the environment decides
  EXPECT_EQ(jit.cacheDirectory(), dir);
  Status status;
  Kernel kernel = jit.compileText(kSpec, target, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(kernelFiles(dir).size(), 1u);
  saved ? (void)setenv("ATTNC_CACHE_DIR", savedValue.c_str(), 1) : (void)unsetenv("ATTNC_CACHE_DIR");
}

TEST_F(JitCache, BadSpecIsAnError) {
  Status status;
  JitCompiler jit(JitOptions{freshDirectory("bad"), true});
  Kernel kernel = jit.compileText("name: x\nhead_dim: 100\n", target, &status);
  EXPECT_FALSE(kernel.valid());
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("head_dim"), std::string::npos) << status.message;
}

// With backward: the kernel's three modules (entry groups, compiled at once) hold the forward and
// the five backward entries, each in exactly one module; the metadata holds their geometry, and
// the cache keeps the forward-only and the backward kernel apart.
TEST_F(JitCache, BackwardIsCompiledAndCachedSeparately) {
  std::string dir = freshDirectory("backward");
  JitCompiler jit(JitOptions{dir, true});
  JitStats before = JitCompiler::stats();
  Status status;
  Kernel forward = jit.compileText(kSpec, target, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_FALSE(forward.hasBackward());
  Kernel backward = jit.compileText(kSpec, target, &status, /*withBackward=*/true);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2) << "backward hit the forward entry";
  EXPECT_EQ(kernelFiles(dir).size(), 2u);
  ASSERT_TRUE(backward.hasBackward());
  const BackwardMetadata& b = *backward.metadata().backward;
  EXPECT_EQ(b.entryStem, "jit_cache_test_bwd");
  EXPECT_GT(b.kvThreads, 0);
  EXPECT_GT(b.qThreads, 0);
  EXPECT_GT(b.kvBlockKV, 0);
  EXPECT_GT(b.qBlockQ, 0);
  EXPECT_GT(b.preprocessRows, 0);
  EXPECT_GT(b.kvSmemBytes, 0);
  EXPECT_GT(b.qSmemBytes, 0);
  ASSERT_EQ(backward.moduleCount(), 3u);
  EXPECT_EQ(forward.moduleCount(), 1u);
  // Which modules hold `symbol` (a NUL-terminated name in the cubin's string table).
  auto holders = [&](const std::string& symbol) {
    std::vector<size_t> found;
    for (size_t i = 0; i < backward.moduleCount(); ++i) {
      std::string cubin(backward.cubin(i).begin(), backward.cubin(i).end());
      if (cubin.find('\0' + symbol + '\0') != std::string::npos) found.push_back(i);
    }
    return found;
  };
  const std::vector<std::pair<std::string, size_t>> expected = {
      {backward.entry(), 0},           {b.entryStem + "_preprocess", 0},
      {b.entryStem + "_convert_dq", 0}, {b.entryStem + "_kv", 1},
      {b.entryStem + "_kv_nodq", 2},    {b.entryStem + "_q", 2}};
  for (const auto& [symbol, module] : expected)
    EXPECT_EQ(holders(symbol), std::vector<size_t>{module}) << symbol;
  std::string forwardCubin(forward.cubin().begin(), forward.cubin().end());
  EXPECT_EQ(forwardCubin.find(b.entryStem + "_kv"), std::string::npos);

  // Warm: each comes back from its own entry, metadata included.
  Kernel warm = jit.compileText(kSpec, target, &status, true);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2);
  ASSERT_EQ(warm.moduleCount(), backward.moduleCount());
  for (size_t i = 0; i < warm.moduleCount(); ++i) EXPECT_EQ(warm.cubin(i), backward.cubin(i)) << i;
  EXPECT_EQ(warm.metadata().serialize(), backward.metadata().serialize());
  Kernel warmForward = jit.compileText(kSpec, target, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_FALSE(warmForward.hasBackward());
  EXPECT_EQ(warmForward.cubin(), forward.cubin());
}

}  // namespace
}  // namespace attnc
