// attnc: compiles attention specs to kernels (compile) and explains what it derived (explain,
// in Explain.cpp): the command line's arguments, and the compile subcommand.
#include "Explain.h"
#include "Warnings.h"
#include "compiler/LauncherHeader.h"
#include "compiler/Pipeline.h"

#include "CLI/CLI.hpp"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

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
  std::string specPath;  // "-": stdin
  std::string target = "sm_90a";
  long long blockQ = 0, blockKV = 0;
  bool backward = false;
  double timeoutSeconds = 0;  // --timeout; 0: $ATTNC_COMPILE_TIMEOUT, else none
};

// The spec at `path`, or read from stdin for "-" (its diagnostics then say <stdin>:line:col).
std::optional<Spec> readSpec(const std::string& path, Diagnostics& diags) {
  if (path != "-") return parseSpecFile(path, diags);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> input = llvm::MemoryBuffer::getSTDIN();
  if (!input) {
    Diagnostic diag;
    diag.loc.file = "<stdin>";
    diag.message = "cannot read the spec from stdin: " + input.getError().message();
    diags.push_back(diag);
    return std::nullopt;
  }
  return parseSpecText((*input)->getBuffer(), "<stdin>", diags);
}

// Seconds since `start`.
double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Progress on stderr for one compile that takes longer than `after` seconds (negative: never):
// once that long has passed, what is being compiled; at the end, how long each step took.
class Progress {
public:
  Progress(double after, std::string what) : after_(after), what_(std::move(what)) {
    if (after_ < 0) return;
    watcher_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!done_.wait_for(lock, std::chrono::duration<double>(after_),
                          [this] { return finished_; }))
        llvm::errs() << "attnc: compiling " << what_ << "...\n";
    });
  }
  ~Progress() { stop(); }

  // Ends the compile: `steps` (e.g. "parse 0.002 s, ...") is printed if it took over `after`.
  void finish(const std::string& steps) {
    stop();
    const double seconds = secondsSince(start_);
    if (after_ >= 0 && seconds > after_)
      llvm::errs() << llvm::formatv("attnc: compiled {0} in {1:f2} s: {2}\n", what_, seconds,
                                    steps);
  }

private:
  void stop() {
    if (!watcher_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
    }
    done_.notify_one();
    watcher_.join();
  }

  double after_;
  std::string what_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread watcher_;
};

// The targets of --target, a comma-separated list.
std::optional<std::vector<Target>> parseTargets(const std::string& list, std::string& error) {
  std::vector<Target> targets;
  for (llvm::StringRef name : llvm::split(list, ',')) {
    std::optional<Target> target = Target::byName(name.trim().str(), &error);
    if (!target) return std::nullopt;
    targets.push_back(*target);
  }
  return targets;
}

// With several targets, one output per target: FILE.ext becomes FILE.<target>.ext (as --emit
// header names its DIR/<name>.<target>.cubin).
std::string outputFor(const std::string& output, const Target& target, size_t targetCount) {
  if (targetCount < 2) return output;
  llvm::StringRef extension = llvm::sys::path::extension(output);
  return llvm::StringRef(output).drop_back(extension.size()).str() + "." + target.name +
         extension.str();
}

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
  std::optional<Spec> spec = readSpec(common.specPath, diags);
  if (!spec || reportWarnings(diags)) return std::nullopt;
  return std::make_pair(std::move(*spec), std::move(*target));
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

// --report and the --require-* checks for one target's kernel. `binary`: NVRTC ran, so
// registers and spills are known; otherwise the report is the tile the pipeline chose.
std::optional<int> reportKernel(const ReportOptions& options, const CompiledKernel& kernel,
                                const Target& target, bool binary) {
  if (!binary) {
    if (options.report)
      llvm::errs() << llvm::formatv(
          "{0} {1}: {2} kernel, tile {3} x {4}, {5} threads, {6} B "
          "shared; registers and spills need NVRTC (--emit ptx, cubin "
          "or header)\n",
          kernel.name, target.name, kernel.forwardKernel, kernel.blockQ, kernel.blockKV,
          kernel.threads, kernel.smemBytes);
    return std::nullopt;
  }
  const ResourceUsage& r = kernel.resources;
  if (options.report)
    llvm::errs() << llvm::formatv(
        "{0} {1}: {2} threads, {3} registers, {4} B shared, spill stores "
        "{5} B, spill loads {6} B, stack {7} B, NVRTC {8:f2} s\n",
        kernel.entry, target.name, kernel.threads, r.registers, kernel.smemBytes, r.spillStoreBytes,
        r.spillLoadBytes, r.stackBytes, kernel.nvrtcSeconds);
  if (options.requireNoSpills && (spills(r) || r.registers < 0))
    return failWith(r.registers < 0 ? "NVRTC gave no resource report for " + kernel.entry
                                    : kernel.entry + " spills to local memory");
  if (std::optional<int> status = checkWgmma(options, kernel.entry, r)) return *status;
  if (!kernel.decodeEntry.empty()) {
    const ResourceUsage& d = kernel.decodeResources;
    if (options.report)
      llvm::errs() << llvm::formatv(
          "{0} {1}: {2} threads, {3} registers, {4} B shared, spill stores {5} B, spill loads "
          "{6} B, stack {7} B\n",
          kernel.decodeEntry, target.name, kernel.decode ? kernel.decode->warps * 32 : 0,
          d.registers, kernel.decode ? kernel.decode->smemBytes : 0, d.spillStoreBytes,
          d.spillLoadBytes, d.stackBytes);
    if (options.requireNoSpills && (spills(d) || d.registers < 0))
      return failWith(d.registers < 0 ? "NVRTC gave no resource report for " + kernel.decodeEntry
                                      : kernel.decodeEntry + " spills to local memory");
  }
  for (const auto& [entry, usage] : kernel.backwardResources) {
    if (options.report)
      llvm::errs() << llvm::formatv(
          "{0} {1}: {2} registers, spill stores {3} B, spill loads {4} B, "
          "stack {5} B\n",
          entry, target.name, usage.registers, usage.spillStoreBytes, usage.spillLoadBytes,
          usage.stackBytes);
    if (options.requireNoSpills && spills(usage))
      return failWith(entry + " spills to local memory");
    if (std::optional<int> status = checkWgmma(options, entry, usage)) return *status;
  }
  return std::nullopt;
}

// Writes --emit header's files: DIR/<name>.cubin, .ptx and .h for one target; for several
// (--target sm_80,sm_90a) DIR/<name>.<target>.cubin and .ptx each and one <name>.h embedding
// them all.
int writeHeader(const Common& common, const Spec& spec, const std::vector<Target>& targets,
                const std::vector<CompiledKernel>& kernels, const std::string& outputDir) {
  std::string error;
  std::vector<LauncherForm> forms;
  for (size_t i = 0; i < targets.size(); ++i) {
    std::string stem =
        outputDir + "/" + spec.name + (targets.size() > 1 ? "." + targets[i].name : "");
    const CompiledKernel& kernel = kernels[i];
    if (!writeOutput(stem + ".cubin", llvm::StringRef(kernel.cubin.data(), kernel.cubin.size()),
                     error) ||
        !writeOutput(stem + ".ptx", kernel.ptx, error))
      return failWith(error);
    forms.push_back({kernelMetadata(spec, kernel, targets[i]), &kernel.cubin, &kernel.ptx});
  }
  const std::string source = common.specPath == "-" ? "<stdin>" : common.specPath;
  if (!writeOutput(outputDir + "/" + spec.name + ".h", emitLauncherHeader(source, forms), error))
    return failWith(error);
  return 0;
}

struct OutputOptions {
  std::string emit = "ptx";
  std::string output;
  bool printName = false;      // --print-name: the spec's name on stdout, nothing compiled
  double progressAfter = 1.0;  // progress lines for compiles longer than this; negative: none
};

// attnc compile: every --emit form for one target or several (one output per target).
int runCompile(const Common& common, const OutputOptions& out, const ReportOptions& reportOptions) {
  const std::string& emit = out.emit;
  const std::string& output = out.output;
  static const std::map<std::string, Stage> stages = {
      {"mlir", Stage::SpecIR}, {"tiled", Stage::TiledIR}, {"cuda", Stage::CUDA},
      {"ptx", Stage::Binary},  {"cubin", Stage::Binary},  {"header", Stage::Binary}};
  const bool header = emit == "header";
  const bool toStdout = output.empty() || output == "-";
  std::string error;
  std::optional<std::vector<Target>> targets = parseTargets(common.target, error);
  if (!targets) return failWith(error);
  if (!out.printName) {
    if (header && toStdout)
      return failWith("--emit header writes files into a directory: give -o DIR");
    if (emit == "cubin" && toStdout)
      return failWith("--emit cubin writes a binary file: give -o FILE");
    if (!header && targets->size() > 1 && toStdout)
      return failWith("--target " + common.target +
                      " writes one file per target: give -o FILE "
                      "(written as FILE.<target>.ext)");
  }

  const auto parseStart = std::chrono::steady_clock::now();
  Diagnostics diags;
  std::optional<Spec> spec = readSpec(common.specPath, diags);
  if (!spec) return fail(diags);
  if (reportWarnings(diags)) return 1;
  const double parseSeconds = secondsSince(parseStart);
  if (out.printName) {
    llvm::outs() << spec->name << "\n";
    return 0;
  }
  if (header)
    if (std::error_code ec = llvm::sys::fs::create_directories(output))
      return failWith("cannot create '" + output + "': " + ec.message());

  std::optional<NvrtcLimits> limits = nvrtcLimits(common, error);
  if (!limits) return failWith(error);
  Compiler compiler;
  CompileOptions options;
  options.blockQ = common.blockQ;
  options.blockKV = common.blockKV;
  options.backward = common.backward;
  options.ptxasNotesInLog = reportOptions.requirePipelinedWgmma;
  options.nvrtc = *limits;
  const Stage stage = stages.at(emit);
  const bool binary = stage == Stage::Binary;
  // A report before NVRTC is the tile the pipeline chose: --emit mlir goes on as far as that.
  const Stage compileStage =
      reportOptions.report && stage == Stage::SpecIR ? Stage::TiledIR : stage;
  std::vector<CompiledKernel> kernels;
  for (const Target& target : *targets) {
    Progress progress(out.progressAfter,
                      spec->name + " for " + target.name + " (--emit " + emit + ")");
    const auto start = std::chrono::steady_clock::now();
    std::optional<CompiledKernel> kernel =
        compiler.compile(*spec, target, compileStage, options, diags);
    if (!kernel) return fail(diags);
    if (reportWarnings(kernel->warnings)) return 1;
    // (NVRTC runs in a child process whose clock can read a little past ours: never below 0.)
    const double pipelineSeconds = std::max(0.0, secondsSince(start) - kernel->nvrtcSeconds);
    progress.finish(
        llvm::formatv(
            "parse {0:f3} s, passes and codegen {1:f3} s{2}", parseSeconds, pipelineSeconds,
            binary ? llvm::formatv(", NVRTC {0:f2} s", kernel->nvrtcSeconds).str() : std::string())
            .str());
    if (std::optional<int> status = reportKernel(reportOptions, *kernel, target, binary))
      return *status;
    kernels.push_back(std::move(*kernel));
  }
  if (header) return writeHeader(common, *spec, *targets, kernels, output);

  for (size_t i = 0; i < kernels.size(); ++i) {
    const CompiledKernel& kernel = kernels[i];
    llvm::StringRef data = emit == "mlir"    ? llvm::StringRef(kernel.specIR)
                           : emit == "tiled" ? llvm::StringRef(kernel.tiledIR)
                           : emit == "cuda"  ? llvm::StringRef(kernel.cuda)
                           : emit == "ptx"
                               ? llvm::StringRef(kernel.ptx)
                               : llvm::StringRef(kernel.cubin.data(), kernel.cubin.size());
    if (!writeOutput(outputFor(output, (*targets)[i], targets->size()), data, error))
      return failWith(error);
  }
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

  app.set_version_flag("--version", std::string("attnc ") + attnc::version());

  Common compileArgs;
  OutputOptions outputOptions;
  bool quiet = false;
  CLI::App* compile = app.add_subcommand(
      "compile",
      "Compile a spec to MLIR, the tiled form, CUDA C++, PTX, a CUBIN or a launcher header");
  compile->add_option("spec", compileArgs.specPath, "The spec file (YAML); - reads it from stdin")
      ->required();
  compile
      ->add_option("--target", compileArgs.target,
                   "GPU target: sm_80, sm_86, sm_89, sm_90, sm_90a, or a comma-separated list "
                   "(one output per target: FILE.<target>.ext)")
      ->capture_default_str();
  compile->add_option("--emit", outputOptions.emit, "What to write")
      ->check(CLI::IsMember({"mlir", "tiled", "cuda", "ptx", "cubin", "header"}))
      ->capture_default_str();
  compile->add_option(
      "-o,--output", outputOptions.output,
      "Output file (text forms default to stdout); the directory for --emit header");
  compile->add_flag(
      "--print-name", outputOptions.printName,
      "Print the spec's name (what --emit header names its files) and compile nothing");
  compile->add_flag("-q,--quiet", quiet, "No progress lines on stderr");
  compile
      ->add_option("--progress-after", outputOptions.progressAfter,
                   "Progress lines on stderr for a compile that takes longer than this many "
                   "seconds: what is compiled, for which target, and each step's time")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
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
                    "Print the kernel's resources to stderr: the tile, threads and shared memory; "
                    "registers, spills and NVRTC time where NVRTC runs (ptx, cubin, header)");
  compile->add_flag("--require-no-spills", reportOptions.requireNoSpills,
                    "Fail if the kernel spills registers to local memory (ptx, cubin, header)");
  compile->add_flag("--require-pipelined-wgmma", reportOptions.requirePipelinedWgmma,
                    "Fail if ptxas serializes a kernel's wgmma instructions, which it reports as a "
                    "'Potential Performance Loss' (sm_90a; ptx, cubin, header)");

  Common explainArgs;
  ExplainOptions explainOptions;
  CLI::App* explain = app.add_subcommand(
      "explain", "Show the tile derivation, block classification and map, kernel resources and the "
                 "IO model");
  explain->add_option("spec", explainArgs.specPath, "The spec file (YAML); - reads it from stdin")
      ->required();
  explain->add_option("--target", explainArgs.target, "GPU target: sm_80, sm_86, sm_89, sm_90, sm_90a")
      ->capture_default_str();
  std::string seqLens;
  CLI::Option* seqLenOption =
      explain->add_option("--seqlen", seqLens,
                          "Query length, or Q,KV the query and key lengths, for the "
                          "classification, the decode plan and the IO model (default: the "
                          "positions of --input values, else 4096)");
  CLI::Option* kvSeqLenOption = explain->add_option("--kv-seqlen", explainOptions.kvSeqLen,
                                                    "Key length (default: --seqlen)");
  explain->add_option("--batch", explainOptions.batch, "Batch size for the decode plan and the "
                      "IO model")
      ->capture_default_str();
  explain->add_option("--sms", explainOptions.numSMs,
                      "SMs the decode plan fills (default: the target's reference part)")
      ->check(CLI::Range(1, 1 << 16));
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
  // Both subcommands compile the spec, so both report its warnings.
  for (CLI::App* command : {compile, explain})
    command->add_flag("--Werror", warningsAreErrors,
                      "Make the spec's warnings errors: print them as such and fail");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (quiet) outputOptions.progressAfter = -1;
  if (compile->parsed()) return runCompile(compileArgs, outputOptions, reportOptions);
  explainOptions.seqLenGiven = seqLenOption->count() > 0;
  if (explainOptions.seqLenGiven) {
    auto [q, kv] = llvm::StringRef(seqLens).split(',');
    bool bothGiven = llvm::StringRef(seqLens).contains(',');
    if (q.trim().getAsInteger(10, explainOptions.seqLen) ||
        (bothGiven && kv.trim().getAsInteger(10, explainOptions.kvSeqLen)))
      return failWith("--seqlen: expected N or Q,KV (positive integers), given '" + seqLens +
                      "'");
    if (bothGiven && kvSeqLenOption->count() > 0)
      return failWith("--seqlen " + seqLens + " gives the key length, and so does --kv-seqlen: "
                      "give one of them");
    if (bothGiven && explainOptions.kvSeqLen < 1)
      return failWith("--seqlen: the key length of Q,KV must be at least 1, given '" + seqLens +
                      "'");
  }
  return runExplain(explainArgs, explainOptions);
}
