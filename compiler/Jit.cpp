// attnc::JitCompiler: spec -> Pipeline (to CUDA C++) -> NVRTC -> Kernel, through the on-disk
// KernelCache. The pipeline part holds one MLIRContext and runs under a mutex (milliseconds); NVRTC
// (seconds) runs outside it, once per cache key however many threads ask at the same time.
#include "attnc/attnc.h"

#include "compiler/CodeGen/CUDA/EmitCUDA.h"
#include "compiler/LauncherHeader.h"
#include "compiler/Pipeline.h"
#include "compiler/SpecKey.h"
#include "runtime/EmbeddedTemplates.h"
#include "runtime/KernelAccess.h"
#include "runtime/KernelCache.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace attnc {

namespace {

std::atomic<long long> compiles{0}, nvrtcRuns{0}, cacheHits{0}, cacheRebuilds{0},
    cacheStoreFailures{0};

// The first time a JitCompiler's disk cache cannot be written (a read-only or full directory, a
// file in its place, a directory where an entry goes), said once through JitOptions::log (empty:
// standard error); its kernels' deferred builds share it, and may outlive the compiler.
class CacheWarning {
public:
  explicit CacheWarning(std::function<void(const std::string&)> log) : log_(std::move(log)) {}
  void operator()(const std::string& problem) {
    if (said_.exchange(true)) return;
    const std::string message =
        "attnc: warning: " + problem + "; kernels are compiled without the disk cache";
    if (log_) log_(message);
    else std::fprintf(stderr, "%s\n", message.c_str());
  }

private:
  std::function<void(const std::string&)> log_;
  std::atomic<bool> said_{false};
};

// A spec's warnings (docs/spec.md, Warnings) go where the JIT's other warnings go; each is said
// once per compiler, so a spec compiled again (a cache hit) does not repeat it.
class SpecWarnings {
public:
  explicit SpecWarnings(std::function<void(const std::string&)> log) : log_(std::move(log)) {}
  void operator()(const Diagnostics& diags) {
    for (const Diagnostic& diag : diags) {
      if (diag.isError()) continue;
      std::string message = diag.render();
      if (!message.empty() && message.back() == '\n') message.pop_back();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!said_.insert(message).second) continue;
      }
      if (log_) log_(message);
      else std::fprintf(stderr, "%s\n", message.c_str());
    }
  }

private:
  std::function<void(const std::string&)> log_;
  std::mutex mutex_;
  std::set<std::string> said_;
};

// NVRTC options beyond Nvrtc::compile's defaults, from the environment: ATTNC_TIMELINE=1 builds the
// sm_90a forward with its per-block timeline (templates/attnc/sm90/timeline.h: timestamps written
// where the LSE goes; dev/bench/timeline.py reads them), a measuring build that the cache keys
// apart.
std::vector<std::string> extraOptions() {
  const char* timeline = std::getenv("ATTNC_TIMELINE");
  if (timeline && std::string(timeline) == "1") return {"-DATTNC_TIMELINE=1"};
  return {};
}

// The unit's entry groups that the JIT compiles when a kernel is made (`deferred` false), or those
// it defers to first use (Kernel::compileDeferred): the deterministic backward's (kv_nodq, q), two
// of a backward unit's four or five programs, which most callers never launch.
// With a separate dQ (BackwardSource::separateDq) every backward launch takes those two: none
// is deferred.
std::vector<int> entryGroups(const CompiledKernel& source, bool deferred) {
  const bool separateDq = source.backward && source.backward->separateDq;
  std::vector<int> groups;
  for (int g : source.entryGroups)
    if ((!separateDq &&
         (g == int(EntryGroup::BackwardKVNoDQ) || g == int(EntryGroup::BackwardQ))) == deferred)
      groups.push_back(g);
  return groups;
}

// NVRTC programs of a unit: the whole unit (`groups` empty: a unit without entry groups), or the
// given entry groups (EmitCUDA.h) packed into one program per bit mask of groups
// (-DATTNC_ENTRY_GROUPS=<mask>), as many as there are groups or CPUs, all compiled at once on
// threads of their own: a kernel then compiles in about the time of its costliest program rather
// than the sum (docs/runtime.md). Each entry's code is the same as in the whole unit's cubin.
// Programs no thread can be started for compile one after another.
// They run under `limits`: isolated, all in one child process (Nvrtc::compileEach).
std::vector<NvrtcResult> compileEntryGroups(Nvrtc& nvrtc, const std::string& cuda,
                                            const std::vector<int>& groups, const std::string& name,
                                            const std::string& arch,
                                            const std::vector<std::string>& extra,
                                            const NvrtcLimits& limits) {
  std::vector<unsigned> masks;
  if (!groups.empty())
    masks = packEntryGroups(groups, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::vector<std::string>> variants(std::max<size_t>(1, masks.size()), extra);
  for (size_t i = 0; i < masks.size(); ++i)
    variants[i].push_back("-DATTNC_ENTRY_GROUPS=" + std::to_string(masks[i]));
  return nvrtc.compileEach(cuda, name + ".cu", embeddedTemplates(), arch, variants, limits);
}

// Whether a kernel entry, in whichever program holds it, spills to local memory.
bool entrySpills(const std::vector<NvrtcResult>& results, const std::string& entry) {
  for (const NvrtcResult& result : results)
    if (auto it = result.resources.find(entry); it != result.resources.end())
      return spills(it->second);
  return false;
}

// Whether an entry the backward spill fallback watches (Pipeline.h), among the programs compiled,
// spills.
bool backwardFallbackSpills(const std::vector<NvrtcResult>& results, const CompiledKernel& source) {
  return source.backward &&
         backwardFallbackSpills(*source.backward,
                                [&](const std::string& entry) { return entrySpills(results, entry); });
}

// Everything a cache entry holds is a function of what this hashes: the cubins, of the generated
// source and the templates it includes, the NVRTC that compiles it, the target (name and the
// limits the tiles were derived from), the options, the entry groups compiled (`groups`: those
// made with the kernel, or the deferred ones, cached apart) and the attnc version; the metadata,
// of `facts`: the spec's canonical text (SpecKey.h: scale, dropout, heads, inputs... which the
// source need not spell) and the metadata that the first derivation gives. Bytes are
// length-prefixed so that no two inputs hash alike by concatenation.
std::string cacheKey(const std::string& cuda, const Nvrtc& nvrtc, const Target& target,
                     bool withBackward, const std::vector<std::string>& extra,
                     const std::vector<int>& groups, const std::string& facts) {
  llvm::SHA256 sha;
  auto add = [&](llvm::StringRef text) {
    std::string length = std::to_string(text.size()) + ":";
    sha.update(length);
    sha.update(text);
  };
  add("attnc-kernel-cache");
  add(version());
  add("nvrtc " + std::to_string(nvrtc.versionMajor) + "." + std::to_string(nvrtc.versionMinor));
  add(target.name + " smem/block " + std::to_string(target.smemPerBlock) + " smem/SM " +
      std::to_string(target.smemPerSM) + " regs " + std::to_string(target.regsPerThread) + " " +
      std::to_string(target.regsPerSM));
  add("options:");  // NVRTC options beyond the defaults (extraOptions)
  for (const std::string& option : extra) add(option);
  add(withBackward ? "backward" : "forward");
  std::string groupList = "groups:";
  for (int g : groups) groupList += " " + std::to_string(g);
  add(groupList);
  add(facts);
  add(cuda);
  for (const EmbeddedFile& file : embeddedTemplates()) {
    add(file.path);
    add(file.contents);
  }
  std::array<uint8_t, 32> digest = sha.final();
  return llvm::toHex(digest, /*LowerCase=*/true);
}

// The first program that failed, as the JIT reports it (describeNvrtcFailure); success when none
// did.
Status nvrtcFailure(const std::vector<NvrtcResult>& results, const std::string& name,
                    const std::string& arch, const NvrtcLimits& limits) {
  for (const NvrtcResult& result : results)
    if (!result.ok)
      return Status::error(describeNvrtcFailure(result, name, arch, limits.timeoutSeconds));
  return Status::success();
}

// Whether ptxas ran out of registers in one of the programs (a smaller tile may fit).
bool outOfRegisters(const std::vector<NvrtcResult>& results) {
  return std::any_of(results.begin(), results.end(), [](const NvrtcResult& result) {
    return ptxasOutOfRegisters(result);
  });
}

// A cache entry of compiled programs: the first program's module, then the others' (moreModules).
void fillEntry(CacheEntry* entry, KernelMetadata metadata, std::vector<NvrtcResult>& results) {
  entry->metadata = std::move(metadata);
  entry->cubin = std::move(results.front().cubin);
  entry->ptx = std::move(results.front().ptx);
  entry->moreModules.clear();
  for (size_t g = 1; g < results.size(); ++g)
    entry->moreModules.push_back({std::move(results[g].cubin), std::move(results[g].ptx)});
}

// The spec's canonical text and a kernel's metadata: what cacheKey's `facts` and an entry's
// check compare.
std::string entryFacts(const Spec& spec, const KernelMetadata& metadata) {
  return canonicalSpecText(spec) + metadata.serialize();
}

// Whether a cached entry's metadata is `expected` (else, in *why, the first line that differs).
bool sameMetadata(const KernelMetadata& cached, const std::string& expected, std::string* why) {
  const std::string found = cached.serialize();
  if (found == expected) return true;
  llvm::SmallVector<llvm::StringRef> foundLines, expectedLines;
  llvm::StringRef(found).split(foundLines, '\n');
  llvm::StringRef(expected).split(expectedLines, '\n');
  size_t i = 0;
  while (i < foundLines.size() && i < expectedLines.size() && foundLines[i] == expectedLines[i])
    ++i;
  auto lineAt = [&](const llvm::SmallVector<llvm::StringRef>& lines) {
    return i < lines.size() ? lines[i].str() : std::string();
  };
  *why = "its metadata has '" + lineAt(foundLines) + "' where this spec derives '" +
         lineAt(expectedLines) + "'";
  return false;
}

// The entry under `key` from the disk cache in `cacheDir`, else from `build` (then stored); with
// `cacheDir` "", from `build` alone. An entry that fails `check` is rebuilt. Counts the cache's
// hits, rebuilds and entries it could not store (JitStats), and warns of the latter.
Status cachedOrBuilt(const std::string& cacheDir, const std::string& key,
                     const std::function<Status(CacheEntry*)>& build,
                     const KernelCache::Check& check, CacheWarning& warning, CacheEntry* entry) {
  if (cacheDir.empty()) return build(entry);
  KernelCache::Outcome outcome;
  if (Status built = KernelCache(cacheDir).getOrBuild(key, build, entry, &outcome, check); !built)
    return built;
  if (outcome.hit) ++cacheHits;
  if (outcome.rebuilt) ++cacheRebuilds;
  if (!outcome.storeError.empty()) {
    ++cacheStoreFailures;
    warning(outcome.storeError);
  }
  return Status::success();
}

// The build of a kernel's deferred entry groups (Kernel::compileDeferred): its own NVRTC programs,
// through the disk cache in `cacheDir` ("" for none) under a key of their own. It holds copies of
// what it needs (the kernel may outlive the JitCompiler); the Nvrtc lives as long as the process.
// The entry holds the kernel's metadata, which a hit must match. It gets a compile timeout of its
// own, `timeoutSeconds` from when it runs (0: none).
DeferredBuild deferredBuild(Nvrtc& nvrtc, std::string cuda, std::vector<int> groups,
                            const Spec& spec, const Target& target,
                            std::vector<std::string> extra, KernelMetadata metadata,
                            std::string cacheDir, std::shared_ptr<CacheWarning> warning,
                            double timeoutSeconds) {
  std::string key = cacheKey(cuda, nvrtc, target, /*withBackward=*/true, extra, groups,
                             entryFacts(spec, metadata));
  return [&nvrtc, cuda = std::move(cuda), groups = std::move(groups), name = spec.name,
          arch = target.name, extra = std::move(extra), metadata = std::move(metadata),
          cacheDir = std::move(cacheDir), key = std::move(key), warning = std::move(warning),
          timeoutSeconds](std::vector<ModuleCode>* modules) {
    auto build = [&](CacheEntry* entry) {
      ++nvrtcRuns;
      const NvrtcLimits limits = NvrtcLimits::within(timeoutSeconds);
      std::vector<NvrtcResult> results =
          compileEntryGroups(nvrtc, cuda, groups, name, arch, extra, limits);
      if (Status failed = nvrtcFailure(results, name, arch, limits); !failed) return failed;
      fillEntry(entry, metadata, results);
      return Status::success();
    };
    const std::string expected = metadata.serialize();
    auto check = [&](const CacheEntry& cached, std::string* why) {
      return sameMetadata(cached.metadata, expected, why);
    };
    CacheEntry entry;
    if (Status built = cachedOrBuilt(cacheDir, key, build, check, *warning, &entry); !built)
      return built;
    modules->push_back({std::move(entry.cubin), std::move(entry.ptx)});
    for (CacheEntry::Module& module : entry.moreModules)
      modules->push_back({std::move(module.cubin), std::move(module.ptx)});
    return Status::success();
  };
}

}  // namespace

struct JitCompiler::Impl {
  JitOptions options;
  std::mutex pipelineMutex;
  Compiler pipeline;
  std::shared_ptr<CacheWarning> cacheWarning;
  std::unique_ptr<SpecWarnings> specWarnings;
};

JitCompiler::JitCompiler() : JitCompiler(JitOptions{}) {}
JitCompiler::JitCompiler(JitOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->cacheWarning = std::make_shared<CacheWarning>(impl_->options.log);
  impl_->specWarnings = std::make_unique<SpecWarnings>(impl_->options.log);
}
JitCompiler::~JitCompiler() = default;
JitCompiler::JitCompiler(JitCompiler&&) noexcept = default;
JitCompiler& JitCompiler::operator=(JitCompiler&&) noexcept = default;

std::string JitCompiler::cacheDirectory() const {
  return impl_->options.cacheDir.empty() ? KernelCache::defaultDirectory() : impl_->options.cacheDir;
}

JitStats JitCompiler::stats() {
  return {compiles.load(), nvrtcRuns.load(), cacheHits.load(), cacheRebuilds.load(),
          cacheStoreFailures.load()};
}

Kernel JitCompiler::compile(const Spec& spec, const Target& target, Status* status,
                            bool withBackward) {
  auto fail = [&](std::string message) {
    if (status) *status = Status::error(std::move(message));
    return Kernel();
  };
  // One deadline for the whole compile: every program, the spill fallback's retries.
  double timeoutSeconds = impl_->options.compileTimeoutSeconds;
  if (std::string error;
      timeoutSeconds <= 0 && !compileTimeoutFromEnvironment(&timeoutSeconds, &error))
    return fail("cannot compile '" + spec.name + "': " + error);
  const NvrtcLimits limits = NvrtcLimits::within(timeoutSeconds);
  Diagnostics diags;
  std::optional<CompiledKernel> source;
  CompileOptions options;
  options.backward = withBackward;
  {
    std::lock_guard<std::mutex> lock(impl_->pipelineMutex);
    source = impl_->pipeline.compile(spec, target, Stage::CUDA, options, diags);
  }
  if (!source) return fail(renderAll(diags));
  (*impl_->specWarnings)(source->warnings);
  if (withBackward && !source->backward)
    return fail("'" + spec.name + "': the compiler produced no backward kernels (a bug in attnc)");
  std::string error;
  Nvrtc* nvrtc = Nvrtc::get(&error);
  if (!nvrtc) return fail("cannot compile '" + spec.name + "' to a cubin: " + error);
  const std::vector<std::string> extra = extraOptions();

  // The spill fallback's next candidate after `from` (compiled with `fromOptions`; Pipeline.h
  // spillRetry: the next smaller tile), with its options in *retried; none when no tile is left to
  // try. With `backwardKV`, the backward spill fallback's (Pipeline.h backwardSpillRetry).
  const auto nextCandidate = [&](const CompiledKernel& from, const CompileOptions& fromOptions,
                                 CompileOptions* retried, bool backwardKV = false) {
    std::lock_guard<std::mutex> lock(impl_->pipelineMutex);
    std::optional<CompiledKernel> again;
    std::optional<CompileOptions> retry =
        backwardKV ? impl_->pipeline.backwardSpillRetry(spec, target, fromOptions, from)
                   : impl_->pipeline.spillRetry(spec, target, fromOptions, from);
    Diagnostics ignored;
    if (retry) again = impl_->pipeline.compile(spec, target, Stage::CUDA, *retry, ignored);
    if (again) *retried = *retry;
    return again;
  };
  // The programs of the entry groups made with the kernel.
  const auto compileNow = [&](const CompiledKernel& from) {
    ++nvrtcRuns;
    return compileEntryGroups(*nvrtc, from.cuda, entryGroups(from, false), spec.name, target.name,
                              extra, limits);
  };

  auto build = [&](CacheEntry* entry) {
    std::vector<NvrtcResult> results = compileNow(*source);
    // ptxas out of registers: the spill fallback's smaller tiles first, then the error.
    while (outOfRegisters(results)) {
      CompileOptions retried;
      std::optional<CompiledKernel> again = nextCandidate(*source, options, &retried);
      if (!again) break;
      std::vector<NvrtcResult> retriedResults = compileNow(*again);
      source = std::move(again);
      results = std::move(retriedResults);
      options = retried;
    }
    if (Status failed = nvrtcFailure(results, spec.name, target.name, limits); !failed)
      return failed;
    // The spill fallback (Pipeline.h) on the forward entry's report: the kernel cached under this
    // spec's key is the first derived tile that does not spill (or the last one tried).
    // Then the backward spill fallback on the entries it watches (Pipeline.h).
    for (bool backwardKV : {false, true})
      while (backwardKV ? backwardFallbackSpills(results, *source)
                        : entrySpills(results, source->entry)) {
        CompileOptions retried;
        std::optional<CompiledKernel> again = nextCandidate(*source, options, &retried, backwardKV);
        if (!again) break;
        std::vector<NvrtcResult> retriedResults = compileNow(*again);
        if (std::any_of(retriedResults.begin(), retriedResults.end(),
                        [](const NvrtcResult& r) { return r.end == NvrtcEnd::TimedOut; }))
          return nvrtcFailure(retriedResults, spec.name, target.name, limits);
        if (!nvrtcFailure(retriedResults, spec.name, target.name, limits)) break;
        source = std::move(again);
        results = std::move(retriedResults);
        options = retried;
      }
    fillEntry(entry, kernelMetadata(spec, *source, target), results);
    return Status::success();
  };
  // A hit is this spec's kernel only if its metadata is what the spec derives: from the first
  // tile, or from one the spill fallback derives after it (found again by its tiles, the pipeline
  // alone: milliseconds). That tile's source is then the one the deferred groups compile from.
  // The key already covers all of it; this catches what a key could miss.
  auto check = [&](const CacheEntry& cached, std::string* why) {
    const KernelMetadata& m = cached.metadata;
    const auto sameTiles = [&](const CompiledKernel& k) {
      return k.blockQ == m.blockQ && k.blockKV == m.blockKV && k.threads == m.threads &&
             k.smemBytes == m.smemBytes;
    };
    const auto sameBackwardTiles = [&](const CompiledKernel& k) {
      return !k.backward || !m.backward ||
             (k.backward->kvBlockKV == m.backward->kvBlockKV &&
              k.backward->kvSmemBytes == m.backward->kvSmemBytes &&
              k.backward->qBlockKV == m.backward->qBlockKV);
    };
    std::optional<CompiledKernel> candidate = *source;
    CompileOptions candidateOptions = options;
    for (bool backwardKV : {false, true})
      while (candidate && !(backwardKV ? sameBackwardTiles(*candidate) : sameTiles(*candidate))) {
        CompileOptions retried;
        candidate = nextCandidate(*candidate, candidateOptions, &retried, backwardKV);
        if (candidate) candidateOptions = retried;
      }
    if (!candidate) {
      *why = "its tiles (" + std::to_string(m.blockQ) + " x " + std::to_string(m.blockKV) + ", " +
             std::to_string(m.threads) + " threads) are none that this spec derives";
      return false;
    }
    if (!sameMetadata(m, kernelMetadata(spec, *candidate, target).serialize(), why)) return false;
    source = std::move(candidate);
    options = candidateOptions;
    return true;
  };
  CacheEntry entry;
  const std::string cacheDir = impl_->options.useCache ? cacheDirectory() : std::string();
  const std::string key =
      cacheKey(source->cuda, *nvrtc, target, withBackward, extra, entryGroups(*source, false),
               entryFacts(spec, kernelMetadata(spec, *source, target)));
  if (Status built = cachedOrBuilt(cacheDir, key, build, check, *impl_->cacheWarning, &entry);
      !built)
    return fail(built.message);
  KernelImage image{entry.metadata, entry.cubin.data(), entry.cubin.size(), entry.ptx.c_str()};
  for (const CacheEntry::Module& module : entry.moreModules)
    image.moreModules.push_back({module.cubin.data(), module.cubin.size(), module.ptx.c_str()});
  Kernel kernel = Kernel::fromImages({image}, status);
  if (!kernel) return kernel;
  ++compiles;
  // The deferred groups come from the source the entry was built from (`source`, which build or
  // check left at the spill fallback's tile where it took one).
  if (withBackward && !entryGroups(*source, true).empty())
    KernelAccess::setDeferred(
        kernel, deferredBuild(*nvrtc, source->cuda, entryGroups(*source, true), spec, target, extra,
                              entry.metadata, cacheDir, impl_->cacheWarning, timeoutSeconds));
  return kernel;
}

Kernel JitCompiler::compileFile(const std::string& specPath, const Target& target, Status* status,
                                bool withBackward) {
  Diagnostics diags;
  std::optional<Spec> spec = parseSpecFile(specPath, diags);
  if (!spec) {
    if (status) *status = Status::error(renderAll(diags));
    return Kernel();
  }
  (*impl_->specWarnings)(diags);
  return compile(*spec, target, status, withBackward);
}

Kernel JitCompiler::compileText(const std::string& yaml, const Target& target, Status* status,
                                bool withBackward) {
  Diagnostics diags;
  std::optional<Spec> spec = parseSpecText(yaml, "<spec text>", diags);
  if (!spec) {
    if (status) *status = Status::error(renderAll(diags));
    return Kernel();
  }
  (*impl_->specWarnings)(diags);
  return compile(*spec, target, status, withBackward);
}

}  // namespace attnc
