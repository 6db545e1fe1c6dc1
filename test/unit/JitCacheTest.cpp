// The JIT and its disk cache end to end, without a GPU (NVRTC only): a cold compile runs NVRTC, a
// warm one reads the cache; truncated and bit-flipped entries are rebuilt; eight threads asking for
// one spec compile it once and all get the same cubin; $ATTNC_CACHE_DIR is honoured; specs that
// differ in any one field never share an entry; whatever sits at an entry's path, and a cache
// directory that cannot be used, neither hang nor fail a compile.
#include "attnc/attnc.h"
#include "compiler/CodeGen/CUDA/EmitCUDA.h"
#include "compiler/Pipeline.h"
#include "compiler/Spec/Spec.h"
#include "compiler/SpecKey.h"
#include "runtime/KernelCache.h"
#include "runtime/ModuleSymbols.h"
#include "runtime/Nvrtc.h"
#include "test/unit/ScratchDir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace attnc {
namespace {

const char* kSpec = R"(name: jit_cache_test
head_dim: 64
dtype: bf16
heads: 4
mask: causal
)";

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
  const attnc::testing::ScratchDir dir("jit-warm", /*create=*/false);
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
  const attnc::testing::ScratchDir dir("jit-damaged", /*create=*/false);
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
  const attnc::testing::ScratchDir dir("jit-threads", /*create=*/false);
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
  const attnc::testing::ScratchDir dir("jit-env", /*create=*/false);
  const char* saved = std::getenv("ATTNC_CACHE_DIR");
  std::string savedValue = saved ? saved : "";
  setenv("ATTNC_CACHE_DIR", dir.path().c_str(), 1);
  JitCompiler jit;  // default options: the environment decides
  EXPECT_EQ(jit.cacheDirectory(), dir.path());
  Status status;
  Kernel kernel = jit.compileText(kSpec, target, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(kernelFiles(dir).size(), 1u);
  saved ? (void)setenv("ATTNC_CACHE_DIR", savedValue.c_str(), 1) : (void)unsetenv("ATTNC_CACHE_DIR");
}

// ATTNC_TIMELINE=1 (templates/attnc/sm90/timeline.h) builds the sm_90a forward with its per-block
// timestamps: another kernel, so another cache entry, never the plain kernel's.
// ATTNC_TIMELINE=1 (or unset) for the guard's lifetime, then as it was.
class TimelineEnv {
 public:
  explicit TimelineEnv(bool on) {
    const char* value = std::getenv("ATTNC_TIMELINE");
    had_ = value != nullptr;
    if (had_) saved_ = value;
    on ? (void)setenv("ATTNC_TIMELINE", "1", 1) : (void)unsetenv("ATTNC_TIMELINE");
  }
  ~TimelineEnv() {
    had_ ? (void)setenv("ATTNC_TIMELINE", saved_.c_str(), 1) : (void)unsetenv("ATTNC_TIMELINE");
  }

 private:
  bool had_ = false;
  std::string saved_;
};

// kSpec for sm_90a, with the timeline build or without.
Kernel compileHopper(JitCompiler& jit, bool timeline, bool withBackward, Status* status) {
  const TimelineEnv env(timeline);
  return jit.compileText(kSpec, *Target::byName("sm_90a", nullptr), status, withBackward);
}

TEST_F(JitCache, TimelineBuildIsCachedApart) {
  const attnc::testing::ScratchDir dir("jit-timeline", /*create=*/false);
  JitCompiler jit(JitOptions{dir, true});
  Status status;
  Kernel plain = compileHopper(jit, /*timeline=*/false, /*withBackward=*/false, &status);
  ASSERT_TRUE(status) << status.message;
  Kernel timeline = compileHopper(jit, /*timeline=*/true, /*withBackward=*/false, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(kernelFiles(dir).size(), 2u) << "the timeline build reused the plain kernel's entry";
  EXPECT_EQ(plain.ptx().find("globaltimer"), std::string::npos);
  EXPECT_NE(timeline.ptx().find("globaltimer"), std::string::npos);
  // And back: the plain kernel again, from the cache.
  Kernel again = compileHopper(jit, /*timeline=*/false, /*withBackward=*/false, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(again.ptx(), plain.ptx());
}

// The timeline build of the backward (sm_90a): the dK/dV kernel's module carries the marks
// (timeline.h BwdTimelineWord), the plain one none, and each is cached apart.
TEST_F(JitCache, TimelineBuildMarksTheDkDvKernel) {
  const attnc::testing::ScratchDir dir("jit-timeline-bwd", /*create=*/false);
  JitCompiler jit(JitOptions{dir, true});
  Status status;
  Kernel plain = compileHopper(jit, /*timeline=*/false, /*withBackward=*/true, &status);
  ASSERT_TRUE(status) << status.message;
  Kernel timeline = compileHopper(jit, /*timeline=*/true, /*withBackward=*/true, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(kernelFiles(dir).size(), 2u) << "the timeline build reused the plain kernel's entry";
  ASSERT_TRUE(timeline.hasBackward());
  const std::string kv =
      timeline.metadata().backward->entryStem + backwardEntrySuffix(BackwardEntry::Kv);
  // The module that defines the dK/dV entry, and its PTX.
  auto kvPtx = [&](const Kernel& kernel) {
    for (size_t i = 0; i < kernel.moduleCount(); ++i)
      if (cubinDefines(kernel.cubin(i), kv)) return kernel.ptx(i);
    return std::string();
  };
  const std::string marked = kvPtx(timeline), unmarked = kvPtx(plain);
  ASSERT_FALSE(marked.empty()) << "no module defines " << kv;
  ASSERT_FALSE(unmarked.empty()) << "no module defines " << kv;
  EXPECT_NE(marked.find("globaltimer"), std::string::npos);
  EXPECT_NE(marked.find("%smid"), std::string::npos);
  EXPECT_EQ(unmarked.find("globaltimer"), std::string::npos);
  EXPECT_EQ(timeline.ptx(timeline.moduleCount()), std::string()) << "out of range: empty";
}

TEST_F(JitCache, BadSpecIsAnError) {
  Status status;
  const attnc::testing::ScratchDir dir("jit-bad", /*create=*/false);
  JitCompiler jit(JitOptions{dir, true});
  Kernel kernel = jit.compileText("name: x\nhead_dim: 100\n", target, &status);
  EXPECT_FALSE(kernel.valid());
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.message.find("head_dim"), std::string::npos) << status.message;
}

// With backward: the kernel's modules (its entry groups packed into one NVRTC program per CPU, at
// most two here: no summaries, and the deterministic mode's two groups deferred) hold the forward
// and three backward entries, each in exactly one module, the forward in the first; the
// deterministic mode's two entries come with compileDeferred(), in modules appended after them.
// The metadata holds their geometry, and the cache keeps the forward-only kernel, the backward one
// and the deferred modules apart.
TEST_F(JitCache, BackwardIsCompiledAndCachedSeparately) {
  const attnc::testing::ScratchDir dir("jit-backward", /*create=*/false);
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
  const size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  ASSERT_EQ(backward.moduleCount(), std::min<size_t>(2, cpus));
  // The forward's unit: the forward and the decode kernel, a program each (as many as CPUs).
  EXPECT_EQ(forward.moduleCount(), std::min<size_t>(2, cpus));
  ASSERT_TRUE(forward.metadata().decode.has_value());
  EXPECT_TRUE(cubinDefines(forward.cubin(forward.moduleCount() - 1),
                           forward.metadata().decode->entry));
  EXPECT_FALSE(forward.hasDeferred());
  EXPECT_TRUE(backward.hasDeferred());
  // Which modules define `symbol` (as the runtime finds an entry's module).
  auto holders = [&](const std::string& symbol) {
    std::vector<size_t> found;
    for (size_t i = 0; i < backward.moduleCount(); ++i)
      if (cubinDefines(backward.cubin(i), symbol)) found.push_back(i);
    return found;
  };
  using E = BackwardEntry;
  auto name = [&](E entry) { return b.entryStem + backwardEntrySuffix(entry); };
  for (E entry : {E::Preprocess, E::ConvertDq})  // with the forward
    EXPECT_EQ(holders(name(entry)), std::vector<size_t>{0}) << name(entry);
  EXPECT_EQ(holders(backward.entry()), std::vector<size_t>{0});
  EXPECT_EQ(holders(name(E::Kv)).size(), 1u) << "_kv: in exactly one module";
  for (E entry : {E::KvNoDq, E::Q})
    EXPECT_TRUE(holders(name(entry)).empty()) << name(entry) << ": compiled before first use";
  std::string forwardCubin(forward.cubin().begin(), forward.cubin().end());
  EXPECT_EQ(forwardCubin.find(name(E::Kv)), std::string::npos);

  // The deferred modules: one more NVRTC run (their own programs), appended after the others.
  const size_t made = backward.moduleCount();
  const std::vector<char> first = backward.cubin(0);
  ASSERT_TRUE(backward.compileDeferred()) << "compileDeferred";
  EXPECT_FALSE(backward.hasDeferred());
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 3);
  ASSERT_EQ(backward.moduleCount(), made + std::min<size_t>(2, cpus));
  EXPECT_EQ(backward.cubin(0), first);
  for (E entry : {E::Kv, E::KvNoDq, E::Q})
    EXPECT_EQ(holders(name(entry)).size(), 1u) << name(entry) << ": in exactly one module";
  for (E entry : {E::KvNoDq, E::Q})
    EXPECT_GE(holders(name(entry)).front(), made) << name(entry) << ": in an appended module";
  EXPECT_TRUE(backward.compileDeferred()) << "a second call returns the first one's status";
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 3);
  EXPECT_EQ(kernelFiles(dir).size(), 3u);
  EXPECT_TRUE(forward.compileDeferred()) << "nothing deferred: success at once";

  // Warm: each comes back from its own entry, metadata included, and so do the deferred modules.
  Kernel warm = jit.compileText(kSpec, target, &status, true);
  ASSERT_TRUE(status) << status.message;
  EXPECT_TRUE(warm.hasDeferred());
  ASSERT_TRUE(warm.compileDeferred());
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 3);
  ASSERT_EQ(warm.moduleCount(), backward.moduleCount());
  for (size_t i = 0; i < warm.moduleCount(); ++i) EXPECT_EQ(warm.cubin(i), backward.cubin(i)) << i;
  EXPECT_EQ(warm.metadata().serialize(), backward.metadata().serialize());
  Kernel warmForward = jit.compileText(kSpec, target, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_FALSE(warmForward.hasBackward());
  EXPECT_EQ(warmForward.cubin(), forward.cubin());
}

// Threads that ask for one kernel's deferred modules at once build them once and all see them;
// without the disk cache too.
TEST_F(JitCache, DeferredModulesBuildOnceAcrossThreads) {
  JitCompiler jit(JitOptions{"", false});
  Status status;
  Kernel kernel = jit.compileText(kSpec, target, &status, /*withBackward=*/true);
  ASSERT_TRUE(status) << status.message;
  ASSERT_TRUE(kernel.hasDeferred());
  const size_t made = kernel.moduleCount();
  const long long runs = JitCompiler::stats().nvrtcRuns;
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Kernel copy = kernel;  // copies share the modules
      ok[t] = copy.compileDeferred().ok;
      (void)copy.moduleCount();
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok, std::vector<int>(8, 1));
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - runs, 1);
  EXPECT_GT(kernel.moduleCount(), made);
  EXPECT_FALSE(kernel.hasDeferred());
}

// Entry groups packed into programs: every group in exactly one mask, no more masks than groups or
// programs, the forward's first, and the costs balanced (the costliest group alone where it can be).
TEST(EntryGroups, PackedForwardFirstAndBalanced) {
  const std::vector<int> all = {0, 1, 2, 3, 4};
  for (unsigned programs : {1u, 2u, 3u, 4u, 5u, 16u}) {
    std::vector<unsigned> masks = packEntryGroups(all, programs);
    ASSERT_EQ(masks.size(), std::min(programs, 5u)) << programs;
    unsigned seen = 0;
    int heaviest = 0, lightest = 1 << 30;
    for (unsigned mask : masks) {
      EXPECT_NE(mask, 0u) << programs;
      EXPECT_EQ(seen & mask, 0u) << "a group in two programs (" << programs << ")";
      seen |= mask;
      int cost = 0;
      for (int g = 0; g < kEntryGroups; ++g)
        if (mask >> g & 1u) cost += kEntryGroupCost[g];
      heaviest = std::max(heaviest, cost);
      lightest = std::min(lightest, cost);
    }
    EXPECT_EQ(seen, 0x1fu) << programs;
    EXPECT_TRUE(masks.front() & 1u) << "the forward's group first (" << programs << ")";
    // Costs 3, 2, 2, 2, 1 (total 10): halves of 5 on two programs, 4/3/3 on three.
    if (programs == 2) EXPECT_EQ(heaviest, 5);
    if (programs == 3) EXPECT_EQ(heaviest, 4);
    if (programs >= 5) EXPECT_EQ(heaviest, kEntryGroupCost[0]);
    EXPECT_GE(lightest, 1);
  }
  // A unit of the forward and its tile classes, on one CPU and on many.
  EXPECT_EQ(packEntryGroups({0, 1}, 1), (std::vector<unsigned>{0x3u}));
  EXPECT_EQ(packEntryGroups({0, 1}, 8), (std::vector<unsigned>{0x1u, 0x2u}));
}

// The spill fallback's tests: the tile the rule derives first for `spec` (Stage::CUDA: with the
// backward's launch facts where `options` asks for them).
CompiledKernel firstTile(const char* spec, const Target& target, CompileOptions options = {}) {
  Compiler pipeline;
  Diagnostics diags;
  std::optional<CompiledKernel> first =
      pipeline.compile(*parseSpecText(spec, "<spec>", diags), target, Stage::CUDA, options, diags);
  EXPECT_TRUE(first) << renderAll(diags);
  return first ? *first : CompiledKernel{};
}

// A kernel with backward made cold, then warm: the warm one must find the fallback's source again,
// so that its deferred modules hit the cold kernel's cache entry (no NVRTC run) rather than being
// compiled from the first, spilling source. Returns the two kernels (deferred modules loaded).
std::pair<Kernel, Kernel> coldAndWarmWithDeferred(JitCompiler& jit, const char* spec,
                                                  const Target& target) {
  Status status;
  Kernel cold = jit.compileText(spec, target, &status, /*withBackward=*/true);
  EXPECT_TRUE(status) << status.message;
  EXPECT_TRUE(cold.compileDeferred());
  const long long runs = JitCompiler::stats().nvrtcRuns;
  Kernel warm = jit.compileText(spec, target, &status, /*withBackward=*/true);
  EXPECT_TRUE(status) << status.message;
  EXPECT_TRUE(warm.compileDeferred());
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns, runs) << "the warm kernel's deferred modules were "
                                                     "compiled again: from another source";
  return {std::move(cold), std::move(warm)};
}

// The spill fallback (compiler/Pipeline.h): hd32 causal softcap 20 with dropout at 10 Philox rounds
// (at the default 7 it fits) derives 128 x 128
// with four warps on sm_80, whose forward kernel spills 8 bytes (CUDA 13.0); the JIT then derives
// the tile again with 8 more registers reserved, compiles B_c = 64 without spills, and caches that.
// (No sm_90a forward is known to spill: test/tools/spill-fallback.yaml.)
TEST_F(JitCache, SpillingTileFallsBack) {
  const attnc::testing::ScratchDir dir("jit-spill", /*create=*/false);
  const Target ampere = *Target::byName("sm_80", nullptr);
  const char* spec = "name: spill_fallback\nhead_dim: 32\ndtype: bf16\nheads: 8\nmask: causal\n"
                     "score: {softcap: 20}\ndropout: {p: 0.1, rounds: 10}\n";
  EXPECT_EQ(firstTile(spec, ampere).blockKV, 128)
      << "the rule's first tile changed: pick a spec that spills again";
  JitCompiler jit(JitOptions{dir, true});
  JitStats before = JitCompiler::stats();
  Status status;
  Kernel kernel = jit.compileText(spec, ampere, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(kernel.metadata().blockQ, 128);
  EXPECT_EQ(kernel.metadata().blockKV, 64);
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2);
  Kernel warm = jit.compileText(spec, ampere, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(warm.metadata().blockKV, 64) << "the cache keeps the fallback's kernel";
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2);

  // With backward: the deferred modules are the fallback source's.
  auto [cold, again] = coldAndWarmWithDeferred(jit, spec, ampere);
  EXPECT_EQ(cold.metadata().blockKV, 64);
  ASSERT_EQ(again.moduleCount(), cold.moduleCount());
  for (size_t i = 0; i < again.moduleCount(); ++i) EXPECT_EQ(again.cubin(i), cold.cubin(i)) << i;
}

// A fallback that changes only the warps: head dim 192 beside head_dim_v 128 on sm_80 derives
// 128 x 64 with four warps of 32 rows, whose forward spills 40 bytes (CUDA 13.0); 8 more reserved
// registers give eight warps of 16 rows at the same B_r and B_c, which do not spill: the fallback
// compares the warps too, not only B_r, B_c and stages (else it takes that tile for the same one
// and keeps the spilling kernel).
TEST_F(JitCache, SpillFallbackTakesATileOfOtherWarps) {
  const attnc::testing::ScratchDir dir("jit-spill-warps", /*create=*/false);
  const Target ampere = *Target::byName("sm_80", nullptr);
  const char* spec = "name: spill_warps\nhead_dim: 192\nhead_dim_v: 128\ndtype: bf16\nheads: 8\n"
                     "mask: causal\n";
  const CompiledKernel first = firstTile(spec, ampere);
  EXPECT_EQ(first.warps, 4) << "the rule's first tile changed: pick a spec that spills again";
  JitCompiler jit(JitOptions{dir, true});
  JitStats before = JitCompiler::stats();
  Status status;
  Kernel kernel = jit.compileText(spec, ampere, &status);
  ASSERT_TRUE(status) << status.message;
  EXPECT_EQ(kernel.metadata().blockQ, first.blockQ);
  EXPECT_EQ(kernel.metadata().blockKV, first.blockKV);
  EXPECT_EQ(kernel.metadata().threads, 256);
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2);

  // With backward, warm: the fallback's source is found by its threads too, since its B_r, B_c
  // and shared memory are the first tile's.
  auto [cold, again] = coldAndWarmWithDeferred(jit, spec, ampere);
  EXPECT_EQ(cold.metadata().threads, 256);
  EXPECT_EQ(again.metadata().threads, 256);
}

// The backward spill fallback (Pipeline.h backwardSpillRetry): head dim 216 causal on sm_80
// derives the sm80 dK/dV kernel with 64 kept rows and 32 streamed ones, which spills 68 bytes
// (CUDA 13.0); with more registers reserved the rule keeps 32 rows, which do not spill. The JIT
// caches that kernel, and a warm one finds its source again for the deferred modules.
TEST_F(JitCache, BackwardSpillFallbackKeepsFewerKvRows) {
  const attnc::testing::ScratchDir dir("jit-spill-bwd", /*create=*/false);
  const Target ampere = *Target::byName("sm_80", nullptr);
  const char* spec = "name: spill_bwd\nhead_dim: 216\ndtype: bf16\nheads: 4\nmask: causal\n";
  CompileOptions withBackward;
  withBackward.backward = true;
  const CompiledKernel first = firstTile(spec, ampere, withBackward);
  ASSERT_TRUE(first.backward);
  EXPECT_EQ(first.backward->kvBlockKV, 64) << "the rule's first tile changed: pick a spec that "
                                              "spills again";
  // The whole unit through the pipeline (as `attnc compile --backward --emit cubin`).
  Compiler pipeline;
  Diagnostics diags;
  std::optional<CompiledKernel> binary = pipeline.compile(*parseSpecText(spec, "<spec>", diags),
                                                          ampere, Stage::Binary, withBackward, diags);
  ASSERT_TRUE(binary && binary->backward) << renderAll(diags);
  EXPECT_EQ(binary->backward->kvBlockKV, 32);
  EXPECT_FALSE(backwardFallbackSpills(*binary));
  EXPECT_NE(binary->backwardDerivation.front().find("backward spill fallback"), std::string::npos);

  JitCompiler jit(JitOptions{dir, true});
  auto [cold, again] = coldAndWarmWithDeferred(jit, spec, ampere);
  ASSERT_TRUE(cold.metadata().backward && again.metadata().backward);
  EXPECT_EQ(cold.metadata().backward->kvBlockKV, 32);
  EXPECT_EQ(again.metadata().backward->kvBlockKV, 32) << "the cache keeps the fallback's kernel";
}

// Every field of Spec and of the structs in it. The structured bindings stop compiling when a
// field is added to one of them, until it is named here, and then
// SpecsDifferingInOneFieldNeverShareAnEntry asks for a pair of specs that differ in it. Source
// locations are not part of a kernel, so they need none.
std::vector<std::string> specFieldNames() {
  const Spec spec;
  [[maybe_unused]] const auto& [name, headDim, headDimV, dtype, headsQ, headsKV, scale, mask,
                                score, dropout, dropoutRounds, inputs, loc] = spec;
  [[maybe_unused]] const auto& [maskKind, topLeft, window, prefix, documentCausal, documentInput,
                                maskExpr, maskText, maskLoc] = spec.mask;
  [[maybe_unused]] const auto& [scoreKind, softcap, alibiSlopes, scoreExpr, scoreText,
                                scoreLoc] = spec.score;
  const InputDecl input;
  [[maybe_unused]] const auto& [inputName, inputType, inputDims, inputLoc] = input;
  return {"name",        "head_dim",          "head_dim_v",         "dtype",
          "heads.q",     "heads.kv",          "scale",              "dropout.p",
          "dropout.rounds", "inputs",         "mask.kind",          "mask.top_left",
          "mask.window", "mask.prefix",       "mask.document_causal", "mask.document_input",
          "mask.expr",   "score.kind",        "score.softcap",      "score.alibi_slopes",
          "score.expr",  "input.name",        "input.type",         "input.dims"};
}

// The specs of the pairs: each differs from its pair's other spec in the one field named there.
// head_dim 32 and sm_80 compile fastest.
const std::string kBase = "name: k\nhead_dim: 32\nheads: 4\n";
const std::string kDoc = kBase + "inputs:\n  doc: {dtype: i32, dims: [b, pos]}\n";
const std::string kTwoDocs =
    kBase + "inputs:\n  doc: {dtype: i32, dims: [b, pos]}\n  doc2: {dtype: i32, dims: [b, pos]}\n";
const std::string kSlopes = kBase + "inputs:\n  slopes: {dtype: f32, dims: [h]}\n";
const std::map<std::string, std::string> kFieldSpecs = {
    {"base", kBase},
    {"name", "name: k2\nhead_dim: 32\nheads: 4\n"},
    {"head_dim", "name: k\nhead_dim: 64\nhead_dim_v: 32\nheads: 4\n"},
    {"head_dim_v", "name: k\nhead_dim: 32\nhead_dim_v: 64\nheads: 4\n"},
    {"fp16", kBase + "dtype: fp16\n"},
    {"heads_q", "name: k\nhead_dim: 32\nheads: {q: 8, kv: 4}\n"},
    {"heads_kv", "name: k\nhead_dim: 32\nheads: {q: 4, kv: 2}\n"},
    {"scale", kBase + "scale: 0.25\n"},
    {"causal", kBase + "mask: causal\n"},
    {"causal_top_left", kBase + "mask: {causal: top_left}\n"},
    {"window", kBase + "mask: {window: 64}\n"},
    {"window_128", kBase + "mask: {window: 128}\n"},
    {"prefix", kBase + "mask: {prefix: 64}\n"},
    {"prefix_128", kBase + "mask: {prefix: 128}\n"},
    {"doc", kDoc},
    {"doc_f32", kBase + "inputs:\n  doc: {dtype: f32, dims: [b, pos]}\n"},
    {"doc_pos", kBase + "inputs:\n  doc: {dtype: i32, dims: [pos]}\n"},
    {"doc2", kBase + "inputs:\n  doc2: {dtype: i32, dims: [b, pos]}\n"},
    {"document", kDoc + "mask: {document: doc}\n"},
    {"document_causal", kDoc + "mask: {document: doc, causal: true}\n"},
    {"two_docs_doc", kTwoDocs + "mask: {document: doc}\n"},
    {"two_docs_doc2", kTwoDocs + "mask: {document: doc2}\n"},
    {"mask_expr", kBase + "mask: \"k <= q\"\n"},
    {"mask_expr_2", kBase + "mask: \"k < q\"\n"},
    {"softcap", kBase + "score: {softcap: 20}\n"},
    {"softcap_30", kBase + "score: {softcap: 30}\n"},
    {"alibi", kSlopes + "score: alibi\n"},
    {"alibi_slopes", kSlopes + "score: {alibi: slopes}\n"},
    {"score_expr", kBase + "score: \"score * 0.5\"\n"},
    {"score_expr_2", kBase + "score: \"score * 0.25\"\n"},
    {"dropout", kBase + "dropout: 0.1\n"},
    {"dropout_half", kBase + "dropout: 0.5\n"},
    {"dropout_rounds", kBase + "dropout: {p: 0.1, rounds: 10}\n"},
};
struct FieldPair {
  const char* field;
  const char* first;
  const char* second;
};
const FieldPair kFieldPairs[] = {
    {"name", "base", "name"},
    {"head_dim", "base", "head_dim"},
    {"head_dim_v", "base", "head_dim_v"},
    {"dtype", "base", "fp16"},
    {"heads.q", "base", "heads_q"},
    {"heads.kv", "base", "heads_kv"},
    {"scale", "base", "scale"},
    {"mask.kind", "base", "causal"},
    {"mask.top_left", "causal", "causal_top_left"},
    {"mask.window", "window", "window_128"},
    {"mask.prefix", "prefix", "prefix_128"},
    {"mask.kind", "doc", "document"},
    {"mask.document_causal", "document", "document_causal"},
    {"mask.document_input", "two_docs_doc", "two_docs_doc2"},
    {"mask.expr", "mask_expr", "mask_expr_2"},
    {"score.kind", "base", "softcap"},
    {"score.softcap", "softcap", "softcap_30"},
    {"score.alibi_slopes", "alibi", "alibi_slopes"},
    {"score.expr", "score_expr", "score_expr_2"},
    {"dropout.p", "dropout", "dropout_half"},
    {"dropout.rounds", "dropout", "dropout_rounds"},
    {"inputs", "base", "doc"},
    {"input.name", "doc", "doc2"},
    {"input.type", "doc", "doc_f32"},
    {"input.dims", "doc", "doc_pos"},
};

bool isRegularFile(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Everything a caller can learn of how `got` launches, compared with `want`: every metadata field
// (the launch reads its grid, block, shared memory, entries and arguments from them) and every
// module's bytes.
void expectSameKernel(const Kernel& got, const Kernel& want, const std::string& context) {
  SCOPED_TRACE(context);
  ASSERT_TRUE(got.valid() && want.valid());
  const KernelMetadata& g = got.metadata();
  const KernelMetadata& w = want.metadata();
  EXPECT_EQ(g.serialize(), w.serialize());
  EXPECT_EQ(g.name, w.name);
  EXPECT_EQ(g.entry, w.entry);
  EXPECT_EQ(g.target, w.target);
  EXPECT_EQ(g.forwardKernel, w.forwardKernel);
  EXPECT_EQ(got.threads(), want.threads());
  EXPECT_EQ(got.smemBytes(), want.smemBytes());
  EXPECT_EQ(g.blockQ, w.blockQ);
  EXPECT_EQ(g.blockKV, w.blockKV);
  EXPECT_EQ(got.headDim(), want.headDim());
  EXPECT_EQ(got.headDimV(), want.headDimV());
  EXPECT_EQ(got.headsQ(), want.headsQ());
  EXPECT_EQ(got.headsKV(), want.headsKV());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(g.scale, w.scale);
  EXPECT_EQ(got.dropout(), want.dropout());
  EXPECT_EQ(got.dropoutRounds(), want.dropoutRounds());
  EXPECT_EQ(got.inputNames(), want.inputNames());
  ASSERT_EQ(g.inputs.size(), w.inputs.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    EXPECT_EQ(g.inputs[i].type, w.inputs[i].type) << g.inputs[i].name;
    EXPECT_EQ(g.inputs[i].dims, w.inputs[i].dims) << g.inputs[i].name;
    EXPECT_EQ(g.inputs[i].summarized, w.inputs[i].summarized) << g.inputs[i].name;
  }
  EXPECT_EQ(g.summaryEntry, w.summaryEntry);
  EXPECT_EQ(g.tileClassesEntry, w.tileClassesEntry);
  EXPECT_EQ(g.orderedGrid, w.orderedGrid);
  EXPECT_EQ(g.maskIgnoresHead, w.maskIgnoresHead);
  EXPECT_EQ(g.attncVersion, w.attncVersion);
  EXPECT_EQ(got.hasBackward(), want.hasBackward());
  EXPECT_EQ(got.backwardWorkspaceBytes(2, 1000, false),
            want.backwardWorkspaceBytes(2, 1000, false));
  ASSERT_EQ(got.moduleCount(), want.moduleCount());
  for (size_t i = 0; i < got.moduleCount(); ++i) {
    EXPECT_EQ(got.cubin(i), want.cubin(i)) << "module " << i;
    EXPECT_EQ(got.ptx(i), want.ptx(i)) << "module " << i;
  }
}

// Pairs of specs that differ in one field, compiled one after the other through one cache, then
// again by a second JitCompiler (a new process's view of the same directory): each kernel must be
// the one a fresh cache gives. Each spec is compiled once by NVRTC, into a fresh cache of its own
// (on two threads); those entries, moved into one directory, are what the pairs then read: specs
// whose keys collided would leave fewer files than specs, and one of each such pair a kernel
// that is not its own.
TEST_F(JitCache, SpecsDifferingInOneFieldNeverShareAnEntry) {
  std::set<std::string> paired;
  for (const FieldPair& pair : kFieldPairs) {
    paired.insert(pair.field);
    for (const char* spec : {pair.first, pair.second})
      ASSERT_TRUE(kFieldSpecs.count(spec)) << spec;
  }
  for (const std::string& field : specFieldNames())
    EXPECT_TRUE(paired.count(field)) << "no pair of specs differs in " << field;
  EXPECT_EQ(paired.size(), specFieldNames().size()) << "a pair names a field Spec does not have";

  // The specs parsed, and each pair's canonical texts (what the key hashes) apart.
  std::vector<std::string> names;
  std::map<std::string, Spec> specs;
  for (const auto& [name, yaml] : kFieldSpecs) {
    Diagnostics diags;
    std::optional<Spec> spec = parseSpecText(yaml, name, diags);
    ASSERT_TRUE(spec) << name << ": " << renderAll(diags);
    specs.emplace(name, std::move(*spec));
    names.push_back(name);
  }
  for (const FieldPair& pair : kFieldPairs)
    EXPECT_NE(canonicalSpecText(specs.at(pair.first)), canonicalSpecText(specs.at(pair.second)))
        << "the cache key's text of the spec does not see " << pair.field;

  const attnc::testing::ScratchDir scratch("jit-field-pairs");
  const std::string shared = scratch.path() + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0755), 0);
  std::vector<Kernel> fresh(names.size());
  std::vector<std::string> errors(names.size());
  std::vector<std::thread> threads;
  const size_t workers = 2;  // CI's cores
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (size_t i = w; i < names.size(); i += workers) {
        JitCompiler own(JitOptions{scratch.path() + "/" + names[i], true});
        Status status;
        fresh[i] = own.compile(specs.at(names[i]), target, &status);
        errors[i] = status.message;
      }
    });
  for (std::thread& thread : threads) thread.join();
  std::map<std::string, Kernel> want;
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(fresh[i].valid()) << names[i] << ": " << errors[i];
    want.emplace(names[i], fresh[i]);
    const std::vector<std::string> files = kernelFiles(scratch.path() + "/" + names[i]);
    ASSERT_EQ(files.size(), 1u) << names[i];
    const std::string moved = shared + files[0].substr(files[0].rfind('/'));
    EXPECT_FALSE(isRegularFile(moved)) << names[i] << " has the key of a spec before it";
    ASSERT_EQ(std::rename(files[0].c_str(), moved.c_str()), 0);
  }

  const JitStats before = JitCompiler::stats();
  {
    JitCompiler jit(JitOptions{shared, true});
    for (const FieldPair& pair : kFieldPairs)
      for (const char* name : {pair.first, pair.second}) {
        Status status;
        Kernel kernel = jit.compile(specs.at(name), target, &status);
        ASSERT_TRUE(status) << name << ": " << status.message;
        expectSameKernel(kernel, want.at(name), std::string(pair.field) + " (" + pair.first +
                                                    " then " + pair.second + "): " + name);
      }
  }
  JitCompiler newProcess(JitOptions{shared, true});
  for (const std::string& name : names) {
    Status status;
    Kernel kernel = newProcess.compile(specs.at(name), target, &status);
    ASSERT_TRUE(status) << name << ": " << status.message;
    expectSameKernel(kernel, want.at(name), name + ", another compiler");
  }
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 0) << "an entry was not found";
  EXPECT_EQ(JitCompiler::stats().cacheRebuilds - before.cacheRebuilds, 0);
  EXPECT_EQ(kernelFiles(shared).size(), specs.size()) << "one entry per spec";
}

// The kernel of a backward pair (scale only: one generated source) and its deferred modules,
// each through one cache: the second spec's entries are its own.
TEST_F(JitCache, BackwardAndDeferredEntriesAreKeyedBySpec) {
  const attnc::testing::ScratchDir dir("jit-field-backward", /*create=*/false);
  JitCompiler jit(JitOptions{dir, true});
  Status status;
  Kernel first = jit.compileText(kFieldSpecs.at("base"), target, &status, /*withBackward=*/true);
  ASSERT_TRUE(status) << status.message;
  ASSERT_TRUE(first.compileDeferred());
  const JitStats before = JitCompiler::stats();
  Kernel second = jit.compileText(kFieldSpecs.at("scale"), target, &status, true);
  ASSERT_TRUE(status) << status.message;
  ASSERT_TRUE(second.compileDeferred());
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2)
      << "the kernel or its deferred modules came from the other spec's entry";
  EXPECT_EQ(kernelFiles(dir).size(), 4u);
  EXPECT_EQ(second.metadata().scale, 0.25f);
  EXPECT_NE(first.metadata().scale, 0.25f);
}

// What the issue saw: a spec's entry edited to say another scale and other heads (checksum
// kept whole), as a key that missed a field would serve it. The JIT recomputes the metadata from
// the spec on a hit, finds them different, and rebuilds the entry.
TEST_F(JitCache, EntryWhoseMetadataDiffersFromTheSpecIsRebuilt) {
  const attnc::testing::ScratchDir dir("jit-mismatch", /*create=*/false);
  Status status;
  Kernel original = compile(dir, &status);
  ASSERT_TRUE(status) << status.message;
  const std::string path = kernelFiles(dir).at(0);
  const std::string key = path.substr(dir.path().size() + 1, path.size() - dir.path().size() - 8);
  CacheEntry entry;
  std::string why;
  ASSERT_EQ(KernelCache(dir).load(key, &entry, &why), KernelCache::Lookup::Hit) << why;
  entry.metadata.scale = 0.25f;
  entry.metadata.headsQ = 8;
  entry.metadata.headsKV = 8;
  ASSERT_TRUE(KernelCache(dir).store(key, entry));
  for (int newProcess = 0; newProcess < 2; ++newProcess) {
    const JitStats before = JitCompiler::stats();
    Kernel again = compile(dir, &status);
    ASSERT_TRUE(status) << status.message;
    EXPECT_EQ(JitCompiler::stats().cacheRebuilds - before.cacheRebuilds, 1 - newProcess);
    EXPECT_EQ(JitCompiler::stats().cacheHits - before.cacheHits, newProcess);
    expectSameKernel(again, original, newProcess ? "read again" : "rebuilt");
  }
}

// Longer than any compile here takes, even on a loaded machine: past it a compile counts as hung.
constexpr auto kHangGuard = std::chrono::seconds(120);

// kSpec compiled by `jit` on a thread of its own, waited for at most kHangGuard, so that a hang
// fails the test rather than blocking it. The thread shares what it uses (a hung one is left
// behind).
Status compileGuarded(std::shared_ptr<JitCompiler> jit, Target target) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> result = promise->get_future();
  std::thread([promise, jit, target] {
    Status status;
    Kernel kernel = jit->compileText(kSpec, target, &status);
    if (!kernel.valid() && status.message.empty()) status = Status::error("no kernel");
    promise->set_value(status);
  }).detach();
  if (result.wait_for(kHangGuard) != std::future_status::ready)
    return Status::error("the compile did not return within the guard (hung)");
  return result.get();
}
Status compileGuarded(JitOptions options, Target target) {
  return compileGuarded(std::make_shared<JitCompiler>(std::move(options)), target);
}

// The entry path of kSpec in `dir`, after a first compile put it there.
std::string entryPath(const std::string& dir, const Target& target) {
  EXPECT_EQ(compileGuarded(JitOptions{dir, true}, target).message, "");
  std::vector<std::string> files = kernelFiles(dir);
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? dir + "/missing.kernel" : files[0];
}

// A FIFO, an empty directory, a symlink to /dev/zero and a sparse file larger than any entry, each
// in an entry's place: the compile returns, rebuilds the entry and puts a regular file there.
TEST_F(JitCache, NonEntriesAtTheEntryPathAreReplaced) {
  const attnc::testing::ScratchDir dir("jit-non-entries", /*create=*/false);
  const std::string path = entryPath(dir, target);
  ASSERT_TRUE(isRegularFile(path));
  const std::map<std::string, std::function<int()>> makers = {
      {"a FIFO", [&] { return mkfifo(path.c_str(), 0644); }},
      {"an empty directory", [&] { return mkdir(path.c_str(), 0755); }},
      {"a symlink to /dev/zero", [&] { return symlink("/dev/zero", path.c_str()); }},
      {"a file larger than any entry", [&] {
         int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
         int rc = fd < 0 ? -1 : ftruncate(fd, KernelCache::kMaxEntryBytes + 1);
         if (fd >= 0) close(fd);
         return rc;
       }},
  };
  for (const auto& [what, make] : makers) {
    SCOPED_TRACE(what);
    ASSERT_EQ(unlink(path.c_str()), 0);
    ASSERT_EQ(make(), 0) << std::strerror(errno);
    const JitStats before = JitCompiler::stats();
    EXPECT_EQ(compileGuarded(JitOptions{dir, true}, target).message, "");
    EXPECT_EQ(JitCompiler::stats().cacheRebuilds - before.cacheRebuilds, 1);
    EXPECT_EQ(JitCompiler::stats().cacheStoreFailures - before.cacheStoreFailures, 0);
    EXPECT_TRUE(isRegularFile(path)) << "the rebuilt entry did not take its place";
  }
}

// A directory with files in it at the entry's path cannot be removed: the compile still succeeds
// and says once, through the log hook, that the entry could not be stored.
TEST_F(JitCache, FullDirectoryAtTheEntryPathIsReported) {
  const attnc::testing::ScratchDir dir("jit-dir-entry", /*create=*/false);
  const std::string path = entryPath(dir, target);
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  std::ofstream(path + "/keep") << "not the cache's";
  auto messages = std::make_shared<std::vector<std::string>>();
  JitOptions options{dir, true};
  options.log = [messages](const std::string& message) { messages->push_back(message); };
  auto jit = std::make_shared<JitCompiler>(options);
  const JitStats before = JitCompiler::stats();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(compileGuarded(jit, target).message, "");
  EXPECT_EQ(JitCompiler::stats().cacheStoreFailures - before.cacheStoreFailures, 2);
  ASSERT_EQ(messages->size(), 1u) << "said once per compiler";
  EXPECT_NE(messages->front().find(path), std::string::npos) << messages->front();
}

// Compiles kSpec twice through `cacheDir`, which cannot be used: each compile succeeds without
// the cache, counted in JitStats::cacheStoreFailures, and the compiler says so once through its
// log hook, naming `named` (the directory, or the file in its way).
void expectReportedOnce(const std::string& cacheDir, const std::string& named,
                        const Target& target) {
  SCOPED_TRACE(cacheDir);
  auto messages = std::make_shared<std::vector<std::string>>();
  JitOptions options{cacheDir, true};
  options.log = [messages](const std::string& message) { messages->push_back(message); };
  auto jit = std::make_shared<JitCompiler>(options);
  const JitStats before = JitCompiler::stats();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(compileGuarded(jit, target).message, "");
  EXPECT_EQ(JitCompiler::stats().nvrtcRuns - before.nvrtcRuns, 2);
  EXPECT_EQ(JitCompiler::stats().cacheStoreFailures - before.cacheStoreFailures, 2);
  ASSERT_EQ(messages->size(), 1u) << "said once per compiler";
  EXPECT_NE(messages->front().find(named), std::string::npos) << messages->front();
  EXPECT_NE(messages->front().find("warning"), std::string::npos) << messages->front();
}

// A cache directory that is a file, or lies under one.
TEST_F(JitCache, CacheDirectoryThatIsAFileIsReportedOnce) {
  const attnc::testing::ScratchDir scratch("jit-dir-file");
  const std::string file = scratch.path() + "/a-file";
  std::ofstream(file) << "not a directory";
  expectReportedOnce(file, file, target);
  expectReportedOnce(file + "/sub", file, target);
}

// A cache directory that cannot be written: one of mode 0555, or where the mode bits do not bind
// this user (root), /proc, where no one creates files.
TEST_F(JitCache, ReadOnlyCacheDirectoryIsReportedOnce) {
  const attnc::testing::ScratchDir scratch("jit-read-only");
  std::string readOnly = scratch.path() + "/read-only";
  ASSERT_EQ(mkdir(readOnly.c_str(), 0555), 0);
  if (access(readOnly.c_str(), W_OK) == 0) readOnly = "/proc";
  struct stat st;
  if (stat(readOnly.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    GTEST_SKIP() << "no directory this user cannot write";
  expectReportedOnce(readOnly, readOnly, target);
}

// Temporary files of a writer killed before its rename: removed on a miss once the writer is
// gone (and a few seconds old) or they are older than any write takes; a live writer's fresh one
// and files that are not temporaries stay.
TEST_F(JitCache, StaleTemporaryFilesAreRemoved) {
  const attnc::testing::ScratchDir dir("jit-stale-temps");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // a pid whose process is gone
  const std::string self = std::to_string(getpid());
  const std::string deadWriter = dir.path() + "/k1.kernel.tmp." + std::to_string(child) + ".0";
  const std::string oldTemp = dir.path() + "/k2.kernel.tmp." + self + ".7";
  const std::string liveWriter = dir.path() + "/k3.kernel.tmp." + self + ".8";
  const std::string deadButFresh = dir.path() + "/k4.kernel.tmp." + std::to_string(child) + ".1";
  const std::string other = dir.path() + "/notes.tmp.1.2";
  for (const std::string& path : {deadWriter, oldTemp, liveWriter, deadButFresh, other})
    std::ofstream(path) << "partial entry";
  // Backdates a file's modification time by `seconds`.
  auto age = [](const std::string& path, long long seconds) {
    const timespec then{time(nullptr) - time_t(seconds), 0};
    const timespec times[2] = {then, then};
    return utimensat(AT_FDCWD, path.c_str(), times, 0);
  };
  ASSERT_EQ(age(deadWriter, KernelCache::kDeadWriterTempSeconds + 5), 0);
  ASSERT_EQ(age(oldTemp, KernelCache::kStaleTempSeconds + 60), 0);
  ASSERT_EQ(age(other, KernelCache::kStaleTempSeconds + 60), 0);
  EXPECT_EQ(compileGuarded(JitOptions{dir, true}, target).message, "");
  EXPECT_FALSE(isRegularFile(deadWriter)) << "a dead writer's temporary file stayed";
  EXPECT_FALSE(isRegularFile(oldTemp)) << "a temporary file older than any write stayed";
  EXPECT_TRUE(isRegularFile(liveWriter));
  EXPECT_TRUE(isRegularFile(deadButFresh));
  EXPECT_TRUE(isRegularFile(other));
  EXPECT_EQ(kernelFiles(dir).size(), 1u);
}

}  // namespace
}  // namespace attnc
