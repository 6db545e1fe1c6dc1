// attnc: compiles attention specs to kernels (compile) and explains what it derived (explain,
// in Explain.cpp): the command line's arguments, and the compile subcommand.
#include "Explain.h"
#include "compiler/LauncherHeader.h"
#include "compiler/Pipeline.h"

#include "CLI/CLI.hpp"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <map>

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
  if (!spec) return std::nullopt;
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

// Loads the spec and target, then explains (Explain.cpp).
int runExplain(const Common& common, const ExplainOptions& explainOptions) {
  Diagnostics diags;
  std::string error;
  auto loaded = load(common, diags, error);
  if (!loaded) return error.empty() ? fail(diags) : failWith(error);
  auto& [spec, target] = *loaded;
  std::optional<NvrtcLimits> limits = nvrtcLimits(common, error);
  if (!limits) return failWith(error);
  CompileOptions options;
  options.nvrtc = *limits;
  options.blockQ = common.blockQ;
  options.blockKV = common.blockKV;
  options.backward = common.backward;
  return explainSpec(spec, target, explainOptions, options);
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
  ExplainOptions explainOptions;
  CLI::App* explain = app.add_subcommand(
      "explain", "Show the tile derivation, block classification and map, kernel resources and the "
                 "IO model");
  explain->add_option("spec", explainArgs.specPath, "The spec file (YAML)")->required();
  explain->add_option("--target", explainArgs.target, "GPU target: sm_80, sm_86, sm_89, sm_90, sm_90a")
      ->capture_default_str();
  CLI::Option* seqLenOption =
      explain->add_option("--seqlen", explainOptions.seqLen,
                          "Query length for the classification and IO model (default: the "
                          "positions of --input values, else 4096)");
  explain->add_option("--kv-seqlen", explainOptions.kvSeqLen, "Key length (default: --seqlen)");
  explain->add_option("--batch", explainOptions.batch, "Batch size for the IO model")
      ->capture_default_str();
  explain->add_option("--block-q", explainArgs.blockQ, "Override B_r (experiments only)");
  explain->add_option("--block-kv", explainArgs.blockKV, "Override B_c (experiments only)");
  explain->add_flag("--backward", explainArgs.backward,
                    "Also derive, compile and describe the backward kernels");
  explain->add_option("--timeout", explainArgs.timeoutSeconds, timeoutHelp)
      ->check(CLI::Range(0.0, 1e9));
  explain->add_flag("--no-compile", explainOptions.noCompile,
                    "Skip NVRTC: everything but registers, spills and occupancy, in milliseconds");
  explain->add_option("--png", explainOptions.pngPath,
                      "Also write the block map as a PNG image to this file");
  explain->add_option("--input", explainOptions.inputs,
                      "Sample values of a declared input the mask reads, for the block map: "
                      "NAME=FILE.npy (int32 or float32, 1-D or 2-D) or NAME=V,V,... (repeatable)")
      ->allow_extra_args(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (compile->parsed()) return runCompile(compileArgs, emit, output, reportOptions);
  explainOptions.seqLenGiven = seqLenOption->count() > 0;
  return runExplain(explainArgs, explainOptions);
}
