// attnc::JitCompiler: spec -> Pipeline (to CUDA C++) -> NVRTC -> Kernel, through the on-disk
// KernelCache. The pipeline part holds one MLIRContext and runs under a mutex (milliseconds); NVRTC
// (seconds) runs outside it, once per cache key however many threads ask at the same time.
#include "attnc/attnc.h"

#include "compiler/LauncherHeader.h"
#include "compiler/Pipeline.h"
#include "runtime/EmbeddedTemplates.h"
#include "runtime/KernelCache.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

#include <atomic>
#include <mutex>

namespace attnc {

namespace {

std::atomic<long long> compiles{0}, nvrtcRuns{0}, cacheHits{0}, cacheRebuilds{0};

// Everything the cubin depends on: the generated source and the templates it includes, the NVRTC
// that compiles it, the target (name and the limits the tiles were derived from), the options and
// the attnc version. Bytes are length-prefixed so that no two inputs hash alike by concatenation.
std::string cacheKey(const std::string& cuda, const Nvrtc& nvrtc, const Target& target,
                     bool withBackward) {
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
  add("options:");  // NVRTC options beyond the defaults: none yet
  add(withBackward ? "backward" : "forward");
  add(cuda);
  for (const EmbeddedFile& file : embeddedTemplates()) {
    add(file.path);
    add(file.contents);
  }
  std::array<uint8_t, 32> digest = sha.final();
  return llvm::toHex(digest, /*LowerCase=*/true);
}

}  // namespace

struct JitCompiler::Impl {
  JitOptions options;
  std::mutex pipelineMutex;
  Compiler pipeline;
};

JitCompiler::JitCompiler() : JitCompiler(JitOptions{}) {}
JitCompiler::JitCompiler(JitOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}
JitCompiler::~JitCompiler() = default;
JitCompiler::JitCompiler(JitCompiler&&) noexcept = default;
JitCompiler& JitCompiler::operator=(JitCompiler&&) noexcept = default;

std::string JitCompiler::cacheDirectory() const {
  return impl_->options.cacheDir.empty() ? KernelCache::defaultDirectory() : impl_->options.cacheDir;
}

JitStats JitCompiler::stats() {
  return {compiles.load(), nvrtcRuns.load(), cacheHits.load(), cacheRebuilds.load()};
}

Kernel JitCompiler::compile(const Spec& spec, const Target& target, Status* status,
                            bool withBackward) {
  auto fail = [&](std::string message) {
    if (status) *status = Status::error(std::move(message));
    return Kernel();
  };
  Diagnostics diags;
  std::optional<CompiledKernel> source;
  {
    std::lock_guard<std::mutex> lock(impl_->pipelineMutex);
    CompileOptions options;
    options.backward = withBackward;
    source = impl_->pipeline.compile(spec, target, Stage::CUDA, options, diags);
  }
  if (!source) return fail(renderAll(diags));
  if (withBackward && !source->backward)
    return fail("'" + spec.name + "': the compiler produced no backward kernels (a bug in attnc)");
  std::string error;
  Nvrtc* nvrtc = Nvrtc::get(&error);
  if (!nvrtc) return fail("cannot compile '" + spec.name + "' to a cubin: " + error);

  auto build = [&](CacheEntry* entry) {
    ++nvrtcRuns;
    NvrtcResult result =
        nvrtc->compile(source->cuda, spec.name + ".cu", embeddedTemplates(), target.name, {});
    if (!result.ok)
      return Status::error("NVRTC failed to compile the kernel for '" + spec.name +
                           "' (a bug in attnc):\n" + result.log);
    entry->metadata = kernelMetadata(spec, *source, target);
    entry->cubin = std::move(result.cubin);
    entry->ptx = std::move(result.ptx);
    return Status::success();
  };
  CacheEntry entry;
  if (impl_->options.useCache) {
    KernelCache cache(cacheDirectory());
    KernelCache::Outcome outcome;
    if (Status built = cache.getOrBuild(cacheKey(source->cuda, *nvrtc, target, withBackward), build, &entry,
                                        &outcome);
        !built)
      return fail(built.message);
    if (outcome.hit) ++cacheHits;
    if (outcome.rebuilt) ++cacheRebuilds;
  } else if (Status built = build(&entry); !built) {
    return fail(built.message);
  }
  Kernel kernel = Kernel::fromImages(
      {KernelImage{entry.metadata, entry.cubin.data(), entry.cubin.size(), entry.ptx.c_str()}},
      status);
  if (kernel) ++compiles;
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
  return compile(*spec, target, status, withBackward);
}

}  // namespace attnc
