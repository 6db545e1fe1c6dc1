// attnc: compiles attention specs to kernels (compile) and explains what it derived (explain).
#include "compiler/LauncherHeader.h"
#include "compiler/Pipeline.h"
#include "attnc/common/philox.h"
#include "attnc/sm90/config.h"

#include "CLI/CLI.hpp"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <map>
#include <set>

using namespace attnc;

namespace {

// Prints diagnostics and yields exit code 1.
int fail(const Diagnostics& diags) {
  llvm::errs() << renderAll(diags);
  return 1;
}

int failWith(const std::string& message) {
  llvm::errs() << "attnc: error: " << message << "\n";
  return 1;
}

// --Werror: the spec's warnings (docs/spec.md, Warnings) fail the command.
bool warningsAreErrors = false;

// Prints the warnings among `diags` to stderr and removes them, so a later failure does not print
// them again; one said already (the same mask's, for another --target) is not repeated. True when
// --Werror makes them fatal (they are then printed as errors).
bool reportWarnings(Diagnostics& diags) {
  static std::set<std::string> said;
  Diagnostics warnings;
  for (auto it = diags.begin(); it != diags.end();)
    if (it->isError()) {
      ++it;
    } else {
      if (said.insert(it->render()).second) warnings.push_back(std::move(*it));
      it = diags.erase(it);
    }
  if (warningsAreErrors) promoteWarnings(warnings);
  llvm::errs() << renderAll(warnings);
  return warningsAreErrors && !warnings.empty();
}

// Writes `data` to `path` (or stdout for "-"/empty) through a temporary file and a rename, so a
// failed or interrupted write never leaves a partial output behind.
bool writeOutput(const std::string& path, llvm::StringRef data, std::string& error) {
  if (path.empty() || path == "-") {
    llvm::outs() << data;
    llvm::outs().flush();
    return true;
  }
  std::string temp = path + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(temp, ec, llvm::sys::fs::OF_None);
    if (ec) {
      error = "cannot write '" + path + "': " + ec.message();
      return false;
    }
    os << data;
    os.close();
    if (os.has_error()) {
      error = "cannot write '" + path + "': " + os.error().message();
      llvm::sys::fs::remove(temp);
      return false;
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, path)) {
    error = "cannot write '" + path + "': " + ec.message();
    llvm::sys::fs::remove(temp);
    return false;
  }
  return true;
}

struct Common {
  std::string specPath;
  std::string target = "sm_90a";
  long long blockQ = 0, blockKV = 0;
  bool backward = false;
  double timeoutSeconds = 0;  // --timeout; 0: $ATTNC_COMPILE_TIMEOUT, else none
};

// How NVRTC runs for the command: one deadline from now for all of its compiles.
std::optional<NvrtcLimits> nvrtcLimits(const Common& common, std::string& error) {
  double seconds = common.timeoutSeconds;
  if (seconds <= 0 && !compileTimeoutFromEnvironment(&seconds, &error)) return std::nullopt;
  return NvrtcLimits::within(seconds);
}

std::optional<std::pair<Spec, Target>> load(const Common& common, Diagnostics& diags,
                                            std::string& error) {
  std::optional<Target> target = Target::byName(common.target, &error);
  if (!target) return std::nullopt;
  std::optional<Spec> spec = parseSpecFile(common.specPath, diags);
  if (!spec || reportWarnings(diags)) return std::nullopt;
  return std::make_pair(std::move(*spec), std::move(*target));
}

// --emit header: DIR/<name>.cubin, .ptx and .h for one target; for several (--target
// sm_80,sm_90a) DIR/<name>.<target>.cubin and .ptx each and one <name>.h embedding them all.
int runEmitHeader(const Common& common, const std::string& outputDir) {
  if (outputDir.empty() || outputDir == "-")
    return failWith("--emit header writes files into a directory: give -o DIR");
  std::vector<Target> targets;
  std::string error;
  for (llvm::StringRef name : llvm::split(common.target, ',')) {
    std::optional<Target> target = Target::byName(name.trim().str(), &error);
    if (!target) return failWith(error);
    targets.push_back(*target);
  }
  Diagnostics diags;
  std::optional<Spec> spec = parseSpecFile(common.specPath, diags);
  if (!spec) return fail(diags);
  if (reportWarnings(diags)) return 1;
  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
    return failWith("cannot create '" + outputDir + "': " + ec.message());

  std::optional<NvrtcLimits> limits = nvrtcLimits(common, error);
  if (!limits) return failWith(error);
  Compiler compiler;
  CompileOptions options;
  options.blockQ = common.blockQ;
  options.blockKV = common.blockKV;
  options.backward = common.backward;
  options.nvrtc = *limits;
  std::vector<CompiledKernel> kernels;
  for (const Target& target : targets) {
    std::optional<CompiledKernel> kernel = compiler.compile(*spec, target, Stage::Binary, options, diags);
    if (!kernel) return fail(diags);
    if (reportWarnings(kernel->warnings)) return 1;
    kernels.push_back(std::move(*kernel));
  }
  std::vector<LauncherForm> forms;
  for (size_t i = 0; i < targets.size(); ++i) {
    std::string stem = outputDir + "/" + spec->name + (targets.size() > 1 ? "." + targets[i].name : "");
    const CompiledKernel& kernel = kernels[i];
    if (!writeOutput(stem + ".cubin", llvm::StringRef(kernel.cubin.data(), kernel.cubin.size()), error) ||
        !writeOutput(stem + ".ptx", kernel.ptx, error))
      return failWith(error);
    forms.push_back({kernelMetadata(*spec, kernel, targets[i]), &kernel.cubin, &kernel.ptx});
  }
  if (!writeOutput(outputDir + "/" + spec->name + ".h", emitLauncherHeader(common.specPath, forms), error))
    return failWith(error);
  return 0;
}

struct ReportOptions {
  bool report = false;            // print the resource report to stderr
  bool requireNoSpills = false;   // fail when the kernel spills to local memory
  bool requirePipelinedWgmma = false;  // fail when ptxas serializes a kernel's wgmma instructions
};

// An entry whose wgmma instructions ptxas serialized: printed with --report, and with
// --require-pipelined-wgmma the command's exit status.
std::optional<int> checkWgmma(const ReportOptions& options, const std::string& entry,
                              const ResourceUsage& usage) {
  if (usage.wgmmaSerialized.empty()) return std::nullopt;
  const std::string message =
      entry + ": ptxas serialized its wgmma instructions: " + usage.wgmmaSerialized;
  if (options.report) llvm::errs() << message << "\n";
  if (options.requirePipelinedWgmma) return failWith(message);
  return std::nullopt;
}

int runCompile(const Common& common, const std::string& emit, const std::string& output,
               const ReportOptions& reportOptions) {
  if (emit == "header") return runEmitHeader(common, output);
  static const std::map<std::string, Stage> stages = {{"mlir", Stage::SpecIR},
                                                      {"tiled", Stage::TiledIR},
                                                      {"cuda", Stage::CUDA},
                                                      {"ptx", Stage::Binary},
                                                      {"cubin", Stage::Binary}};
  if (emit == "cubin" && (output.empty() || output == "-"))
    return failWith("--emit cubin writes a binary file: give -o FILE");
  Diagnostics diags;
  std::string error;
  auto loaded = load(common, diags, error);
  if (!loaded) return error.empty() ? fail(diags) : failWith(error);
  auto& [spec, target] = *loaded;
  std::optional<NvrtcLimits> limits = nvrtcLimits(common, error);
  if (!limits) return failWith(error);
  Compiler compiler;
  CompileOptions options;
  options.blockQ = common.blockQ;
  options.blockKV = common.blockKV;
  options.backward = common.backward;
  options.ptxasNotesInLog = reportOptions.requirePipelinedWgmma;
  options.nvrtc = *limits;
  std::optional<CompiledKernel> kernel =
      compiler.compile(spec, target, stages.at(emit), options, diags);
  if (!kernel) return fail(diags);
  if (reportWarnings(kernel->warnings)) return 1;

  llvm::StringRef data = emit == "mlir"    ? llvm::StringRef(kernel->specIR)
                         : emit == "tiled" ? llvm::StringRef(kernel->tiledIR)
                         : emit == "cuda"  ? llvm::StringRef(kernel->cuda)
                         : emit == "ptx"   ? llvm::StringRef(kernel->ptx)
                                           : llvm::StringRef(kernel->cubin.data(), kernel->cubin.size());
  const ResourceUsage& r = kernel->resources;
  bool binary = emit == "ptx" || emit == "cubin";
  if (binary && reportOptions.report)
    llvm::errs() << llvm::formatv("{0} {1}: {2} threads, {3} registers, {4} B shared, spill stores "
                                  "{5} B, spill loads {6} B, stack {7} B, NVRTC {8:f2} s\n",
                                  kernel->entry, target.name, kernel->threads, r.registers,
                                  kernel->smemBytes, r.spillStoreBytes, r.spillLoadBytes,
                                  r.stackBytes, kernel->nvrtcSeconds);
  if (binary && reportOptions.requireNoSpills && (spills(r) || r.registers < 0))
    return failWith(r.registers < 0 ? "NVRTC gave no resource report for " + kernel->entry
                                    : kernel->entry + " spills to local memory");
  if (binary)
    if (std::optional<int> status = checkWgmma(reportOptions, kernel->entry, r)) return *status;
  for (const auto& [entry, usage] : kernel->backwardResources) {
    if (binary && reportOptions.report)
      llvm::errs() << llvm::formatv("{0} {1}: {2} registers, spill stores {3} B, spill loads {4} B, "
                                    "stack {5} B\n", entry, target.name, usage.registers,
                                    usage.spillStoreBytes, usage.spillLoadBytes, usage.stackBytes);
    if (binary && reportOptions.requireNoSpills && spills(usage))
      return failWith(entry + " spills to local memory");
    if (binary)
      if (std::optional<int> status = checkWgmma(reportOptions, entry, usage)) return *status;
  }
  if (!writeOutput(output, data, error)) return failWith(error);
  return 0;
}

std::string bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return llvm::formatv("{0:f2} {1}", b, units[u]);
}

int runExplain(const Common& common, long long seqLen, long long kvSeqLen, long long batch) {
  Diagnostics diags;
  std::string error;
  auto loaded = load(common, diags, error);
  if (!loaded) return error.empty() ? fail(diags) : failWith(error);
  auto& [spec, target] = *loaded;
  if (seqLen < 1 || kvSeqLen < 0 || batch < 1)
    return failWith("--seqlen and --batch must be at least 1");
  if (kvSeqLen == 0) kvSeqLen = seqLen;
  std::optional<NvrtcLimits> limits = nvrtcLimits(common, error);
  if (!limits) return failWith(error);

  Compiler compiler;
  CompileOptions options;
  options.nvrtc = *limits;
  options.blockQ = common.blockQ;
  options.blockKV = common.blockKV;
  options.backward = common.backward;
  options.summaryQLen = seqLen;
  options.summaryKVLen = kvSeqLen;
  std::optional<CompiledKernel> kernel = compiler.compile(spec, target, Stage::Binary, options, diags);
  if (!kernel) return fail(diags);
  if (reportWarnings(kernel->warnings)) return 1;

  auto& os = llvm::outs();
  os << "attnc explain: " << spec.name << " for " << target.name << " (" << target.description
     << ")\n\n";
  os << "Tile derivation\n";
  for (auto [i, line] : llvm::enumerate(kernel->derivation)) os << "  " << i + 1 << ". " << line << "\n";

  long long qTiles = (seqLen + kernel->blockQ - 1) / kernel->blockQ;
  long long kvTiles = (kvSeqLen + kernel->blockKV - 1) / kernel->blockKV;
  os << "\nBlock classification (q_len " << seqLen << ", kv_len " << kvSeqLen << ": " << qTiles
     << " x " << kvTiles << " tiles of " << kernel->blockQ << " x " << kernel->blockKV << ")\n";
  os << "  mode: " << kernel->classification << ", kv loop bounds: " << kernel->kvBounds << "\n";
  double tileFraction = 1.0;
  if (kernel->summary) {
    const TileSummary& s = *kernel->summary;
    long long total = s.empty + s.full + s.partial;
    tileFraction = total ? double(s.full + s.partial) / double(total) : 1.0;
    os << llvm::formatv("  empty {0} (skipped), full {1} (no mask evaluated), partial {2} (mask per "
                        "element): {3:f1}% of tiles computed\n",
                        s.empty, s.full, s.partial, 100.0 * tileFraction);
  } else {
    os << "  the mask reads declared inputs: tiles are classified at launch from their values\n";
  }
  double kept = kernel->keptFraction.value_or(1.0);
  if (kernel->keptFraction)
    os << llvm::formatv("  elements kept by the mask: {0:f2}%\n", 100.0 * kept);

  os << "\nCompiled kernel (NVRTC " << llvm::formatv("{0:f2}", kernel->nvrtcSeconds) << " s)\n";
  const ResourceUsage& r = kernel->resources;
  os << "  entry " << kernel->entry << ": " << kernel->threads << " threads, " << r.registers
     << " registers/thread, " << kernel->smemBytes << " B dynamic + " << r.staticSharedBytes
     << " B static shared memory\n";
  if (kernel->forwardKernel == "sm90") {
    os << "  warp roles: 1 producer warpgroup (TMA; setmaxnreg down to "
       << attnc::sm90::producerRegisters() << " registers) and "
       << kernel->blockQ / 64 << " consumer warpgroups of 64 rows (wgmma; setmaxnreg up to "
       << attnc::sm90::consumerRegisters(int(kernel->blockQ / 64)) << ")\n";
    // Warpgroups that skip what is not theirs (sm90/config.h idleWarpgroups, warpgroupLastTile).
    const int consumers = int(kernel->blockQ / 64);
    const bool positionMask = spec.mask.kind != MaskSpec::None && kernel->tileClassesEntry.empty();
    if (attnc::sm90::idleWarpgroups(consumers))
      os << "  idle warpgroups: one whose 64 rows are all outside the sequence computes nothing"
         << (attnc::sm90::warpgroupLastTile(consumers, positionMask)
                 ? "; each stops after its own last live kv tile and idles through the block's rest"
                 : "")
         << "\n";
    os << "  block order: "
       << (kernel->orderedGrid
               ? "grid (pairs per group, q tiles, groups): the longest q tiles first across groups "
                 "of (head, batch) pairs of about 256 blocks; q tiles end-aligned, a partial tile "
                 "first (block_order.h)"
               : "grid (q tiles, heads_q, batch): each head's q tiles in turn (all the same length)")
       << "\n"
       << "  row maxima: "
       << (attnc::sm90::lazyRowMaxima(int(spec.headDimV))
               ? "lazy: O is rescaled only when a row's maximum grows past 2^8 (head_dim_v >= 128)"
               : "eager: O is rescaled every tile (head_dim_v < 128)")
       << "\n"
       << "  Q: "
       << (attnc::sm90::qInRegisters(int(kernel->blockQ / 64), int(spec.headDim),
                                     int(spec.headDimV), int(kernel->blockKV))
               ? "register A fragments (S = Q K^T reads only K from shared memory)"
               : "shared memory (S = Q K^T reads Q and K from it)")
       << "\n"
       << "  softmax: "
       << (attnc::sm90::softmaxOverlapsPV(spec.dropout > 0)
               ? "overlaps the previous tile's O += P V (its wait held below the softmax)"
               : "after the previous tile's O += P V (dropout: the wait comes first)")
       << "\n";
    if (spec.mask.kind != MaskSpec::None)
      os << "  partial tiles: the mask per element without branches"
         << (kernel->tileClassesEntry.empty()
                 ? ", after S = Q K^T\n"
                 : ", decided while S = Q K^T runs (the mask reads declared inputs)\n");
  }
  if (spec.dropout > 0) {
    // What the kernels make of p (templates/attnc/common/philox.h): 8 random bits per element.
    const float p = float(spec.dropout);
    const unsigned threshold = attnc::dropoutThreshold(p);
    const int groupTiles = attnc::dropoutGroupTiles(int(kernel->blockKV / 8));
    os << llvm::formatv("  dropout: p = {0} resolves to {1} / 256 = {2:f4} (8 random bits per "
                        "element), kept probabilities scaled by 256 / {3} = {4:f4}; one "
                        "Philox4x32-{7} call per {5} elements of the forward{6}\n",
                        formatNumber(spec.dropout), threshold, threshold / 256.0, 256 - threshold,
                        attnc::dropoutScale(p), 4 * groupTiles,
                        groupTiles == 4
                            ? std::string()
                            : llvm::formatv(" (B_c = {0} is not a multiple of 32{1})",
                                            kernel->blockKV,
                                            kernel->forwardKernel == "sm90"
                                                ? "; the keep tests applied to P once packed"
                                                : "")
                                  .str(),
                        spec.dropoutRounds);
  }
  os << "  spills: " << r.spillStoreBytes << " B stores, " << r.spillLoadBytes << " B loads; stack "
     << r.stackBytes << " B" << (spills(r) ? "  <-- SPILLS" : "")
     << "\n";
  long long blocksByRegs = r.registers > 0 ? target.regsPerSM / (r.registers * kernel->threads) : 0;
  long long blocksBySmem = target.smemPerSM / std::max<long long>(kernel->smemBytes, 1);
  os << "  occupancy: " << std::min(blocksByRegs, blocksBySmem) << " block(s) per SM (registers allow "
     << blocksByRegs << ", shared memory " << blocksBySmem << ")\n";
  if (kernel->backward) {
    os << "\nBackward kernels (dQ, dK, dV)\n";
    for (auto [i, line] : llvm::enumerate(kernel->backwardDerivation))
      os << "  " << i + 1 << ". " << line << "\n";
    for (const auto& [entry, usage] : kernel->backwardResources)
      os << "  " << entry << ": " << usage.registers << " registers/thread, spills " << usage.spillStoreBytes
         << " B stores, " << usage.spillLoadBytes << " B loads\n";
  }

  // FlashAttention's IO analysis: standard attention materialises S and P in HBM
  // (Theta(N d + N^2) accesses); the tiled kernel reads each K/V tile once per Q tile it is not
  // empty for (Theta(N^2 d^2 / M)) and never writes an N x N matrix.
  double e = 2.0;  // bf16/fp16 bytes
  double heads = double(spec.headsQ), bh = double(batch) * heads;
  double d = double(spec.headDim), dv = double(spec.headDimV);
  double n = double(seqLen), nk = double(kvSeqLen);
  double standard = bh * e * (n * d + nk * d + 4.0 * n * nk + nk * dv + n * dv);
  double kvHeadsRatio = double(spec.headsKV) / heads;
  double flash = bh * (e * (n * d + n * dv) + 4.0 * n) +
                 double(batch) * double(spec.headsQ) * e * qTiles * (nk * (d + dv)) * tileFraction *
                     (kvHeadsRatio > 0 ? 1.0 : 1.0);
  double flops = 4.0 * double(batch) * heads * n * nk * std::max(d, dv) * kept;
  os << "\nHBM traffic and FLOPs (batch " << batch << ", " << spec.headsQ << " query heads)\n";
  os << "  standard attention (S and P in HBM): " << bytes(standard) << "\n";
  os << "  attnc tiled kernel (K/V re-read per Q tile): " << bytes(flash) << "  ("
     << llvm::formatv("{0:f1}", standard / flash) << "x less)\n";
  os << "  FLOPs (4 B H N_q N_kv d x kept fraction): " << llvm::formatv("{0:e3}", flops) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnc: compiles declarative attention specs into fused GPU kernels"};
  app.require_subcommand(1);

  Common compileArgs;
  std::string emit = "ptx", output;
  CLI::App* compile = app.add_subcommand("compile", "Compile a spec to MLIR, the tiled form, CUDA C++, PTX or a CUBIN");
  compile->add_option("spec", compileArgs.specPath, "The spec file (YAML)")->required();
  compile->add_option("--target", compileArgs.target,
                      "GPU target: sm_80, sm_86, sm_89, sm_90, sm_90a (--emit header: a comma-separated list)")
      ->capture_default_str();
  compile->add_option("--emit", emit, "What to write")
      ->check(CLI::IsMember({"mlir", "tiled", "cuda", "ptx", "cubin", "header"}))
      ->capture_default_str();
  compile->add_option("-o,--output", output,
                      "Output file (text forms default to stdout); the directory for --emit header");
  compile->add_option("--block-q", compileArgs.blockQ, "Override B_r (experiments only)");
  compile->add_option("--block-kv", compileArgs.blockKV, "Override B_c (experiments only)");
  compile->add_flag("--backward", compileArgs.backward,
                    "Also derive and compile the backward kernels (dQ, dK, dV)");
  const char* timeoutHelp = "Fail if NVRTC takes longer than this many seconds in all "
                            "(ptx, cubin, header; default: $ATTNC_COMPILE_TIMEOUT, else no limit)";
  compile->add_option("--timeout", compileArgs.timeoutSeconds, timeoutHelp)
      ->check(CLI::Range(0.0, 1e9));
  ReportOptions reportOptions;
  compile->add_flag("--report", reportOptions.report,
                    "Print registers, shared memory, spills and NVRTC time to stderr (ptx, cubin)");
  compile->add_flag("--require-no-spills", reportOptions.requireNoSpills,
                    "Fail if the kernel spills registers to local memory (ptx, cubin)");
  compile->add_flag("--require-pipelined-wgmma", reportOptions.requirePipelinedWgmma,
                    "Fail if ptxas serializes a kernel's wgmma instructions, which it reports as a "
                    "'Potential Performance Loss' (sm_90a; ptx, cubin)");

  Common explainArgs;
  long long seqLen = 4096, kvSeqLen = 0, batch = 1;
  CLI::App* explain = app.add_subcommand(
      "explain", "Show the tile derivation, block classification, kernel resources and the IO model");
  explain->add_option("spec", explainArgs.specPath, "The spec file (YAML)")->required();
  explain->add_option("--target", explainArgs.target, "GPU target: sm_80, sm_86, sm_89, sm_90, sm_90a")
      ->capture_default_str();
  explain->add_option("--seqlen", seqLen, "Query length for the classification and IO model")
      ->capture_default_str();
  explain->add_option("--kv-seqlen", kvSeqLen, "Key length (default: --seqlen)");
  explain->add_option("--batch", batch, "Batch size for the IO model")->capture_default_str();
  explain->add_option("--block-q", explainArgs.blockQ, "Override B_r (experiments only)");
  explain->add_option("--block-kv", explainArgs.blockKV, "Override B_c (experiments only)");
  explain->add_flag("--backward", explainArgs.backward,
                    "Also derive, compile and describe the backward kernels");
  explain->add_option("--timeout", explainArgs.timeoutSeconds, timeoutHelp)
      ->check(CLI::Range(0.0, 1e9));

  // Both subcommands compile the spec, so both report its warnings.
  for (CLI::App* command : {compile, explain})
    command->add_flag("--Werror", warningsAreErrors,
                      "Make the spec's warnings errors: print them as such and fail");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (compile->parsed()) return runCompile(compileArgs, emit, output, reportOptions);
  return runExplain(explainArgs, seqLen, kvSeqLen, batch);
}
