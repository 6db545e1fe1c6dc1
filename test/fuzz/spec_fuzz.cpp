// The spec fuzzer's driver: generates cases (SpecGen.h) and runs each in-process through the
// parser and the pipeline to CUDA C++ on sm_80 and sm_90a (some with the backward), checking that
// nothing crashes or hangs, that every error says file:line:col, that valid-by-construction specs
// are accepted and invalid-by-construction ones rejected; every Nth accepted spec also goes
// through NVRTC on both targets (the differential test: what the front end accepts, the back end
// must compile). A failure prints the seed, the case number and the spec, and writes the spec to
// --out for a regression test. The last line is a summary; exit status 1 on any failure.
#include "SpecGen.h"

#include "compiler/Pipeline.h"
#include "compiler/Spec/Spec.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <time.h>
#include <unistd.h>

using namespace attnc;
namespace cl = llvm::cl;

static cl::opt<uint64_t> seedOpt("seed", cl::desc("generator seed"), cl::init(1));
static cl::opt<uint64_t> casesOpt("cases", cl::desc("number of cases"), cl::init(300));
static cl::opt<uint64_t> firstOpt("first", cl::desc("first case number (to rerun one case)"),
                                  cl::init(0));
static cl::opt<unsigned> nvrtcEveryOpt(
    "nvrtc-every",
    cl::desc("also compile one accepted spec in N with NVRTC, drawn by case number (0: none)"),
    cl::init(0));
static cl::opt<unsigned> timeoutOpt("timeout",
                                    cl::desc("CPU seconds one compile of a case may take (the "
                                             "pipeline, or one NVRTC run)"),
                                    cl::init(20));
static cl::opt<std::string> outOpt("out", cl::desc("directory for failing specs"), cl::init(""));
static cl::opt<bool> exceedOpt(
    "exceed-limits", cl::desc("let the generator go past the front end's size limits"));
static cl::opt<bool> printOpt("print", cl::desc("print each case's spec instead of running it"));
static cl::opt<std::string> specOpt(
    "spec", cl::desc("run this spec file instead of generated cases (verdict unknown; with "
                     "--nvrtc-every=1 through NVRTC)"),
    cl::init(""));
static cl::opt<unsigned> showOpt("show", cl::desc("failures printed in full"), cl::init(10));

namespace {

// The case in flight, for the watchdog and the crash handler. The message and the path are built
// before the case runs: a signal handler may only write() and open().
struct InFlight {
  std::atomic<int64_t> startMs{-1};  // steady clock; -1: between cases
  std::atomic<int64_t> startCpuMs{0};  // the process's CPU time (all threads) at the same moment
  std::mutex lock;
  std::string banner;  // "specfuzz: seed S case N (recipe)\n" + the spec
  std::string text;
  std::string path;    // where the spec goes on a crash or hang; empty: nowhere
  char counts[1024] = "";  // the summary line of the cases before this one
};
InFlight inFlight;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of every thread of the process (NVRTC's ptxas threads included).
int64_t cpuMs() {
  timespec time{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
  return int64_t(time.tv_sec) * 1000 + time.tv_nsec / 1000000;
}

// Marks the start of one compile step for the watchdog.
void startStep() {
  inFlight.startCpuMs = cpuMs();
  inFlight.startMs = nowMs();
}

void writeAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += size_t(n);
  }
}

void dumpInFlight(const char* what) {
  writeAll(2, std::string("\nspecfuzz: ") + what + " in ");
  writeAll(2, inFlight.banner);
  // The counts so far, so that a script adding up rounds loses none of them.
  writeAll(1, inFlight.counts);
  if (!inFlight.path.empty()) {
    int fd = ::open(inFlight.path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd >= 0) {
      writeAll(fd, inFlight.text);
      ::close(fd);
      writeAll(2, "specfuzz: spec written to " + inFlight.path + "\n");
    }
  }
}

// Shown in messages: long specs (up to the size limit and past it) only in part.
std::string excerpt(const std::string& text) {
  constexpr size_t kShown = 2000;  // a screenful; the whole spec goes to --out
  if (text.size() <= kShown) return text;
  return text.substr(0, kShown) + "\n... (" + std::to_string(text.size()) + " bytes in all)\n";
}

// Whether a diagnostic renders as `<file>:<line>:<col>: error: ...`.
bool located(const Diagnostic& diag, const std::string& file) {
  return diag.loc.file == file && diag.loc.line >= 1 && diag.loc.col >= 1;
}

// The pipeline's error for a mask and score too large for any tile's registers (SelectTiles.cpp).
constexpr const char* kRegisterBudget = "need more registers than the";

struct Counts {
  uint64_t cases = 0, accepted = 0, rejected = 0, nvrtcCompiled = 0, registerBudget = 0;
  double nvrtcSeconds = 0;
  uint64_t byVerdict[3] = {};  // by fuzz::Verdict: valid, invalid, unknown
  std::map<std::string, uint64_t> failures;
  double slowestSeconds = 0;
  uint64_t slowestCase = 0;
  // One line of key=value pairs: dev/fuzz.sh adds up the rounds' lines.
  std::string summary(double seconds) const {
    uint64_t total = 0;
    std::string classes;
    for (const auto& [kind, count] : failures) {
      total += count;
      classes += " failures-" + kind + "=" + std::to_string(count);
    }
    return llvm::formatv("specfuzz: seed={0} cases={1} valid={2} invalid={3} unknown={4} "
                         "accepted={5} rejected={6} nvrtc-compiled={7} nvrtc-seconds={8:f1} "
                         "slowest-case={9} slowest-seconds={10:f1} seconds={11:f1} "
                         "register-budget={12} failures={13}",
                         uint64_t(seedOpt), cases, byVerdict[0], byVerdict[1], byVerdict[2],
                         accepted, rejected, nvrtcCompiled, nvrtcSeconds, slowestCase,
                         slowestSeconds, seconds, registerBudget, total)
               .str() +
           classes + "\n";
  }
};

class Runner {
public:
  Runner(uint64_t seed, bool exceed) : seed(seed), generator(seed, limits(exceed)) {}

  static fuzz::Limits limits(bool exceed) {
    fuzz::Limits result;
    result.respect = !exceed;
    return result;
  }

  void run(uint64_t index) { run(index, generator.generate(index)); }
  void run(uint64_t index, const fuzz::Case& c);
  Counts counts;

private:
  void fail(const std::string& kind, uint64_t index, const fuzz::Case& c,
            const std::string& detail);
  // Every diagnostic must carry file:line:col; `where` names the stage for the message.
  void checkLocations(const Diagnostics& diags, uint64_t index, const fuzz::Case& c,
                      const std::string& where);
  Compiler& compiler() {
    // A context keeps every attribute and name it ever uniqued: a fresh one now and then keeps a
    // long run's memory flat.
    constexpr uint64_t kCompilesPerContext = 200;
    if (!pipeline || ++compilesOnContext > kCompilesPerContext) {
      pipeline = std::make_unique<Compiler>();
      compilesOnContext = 0;
    }
    return *pipeline;
  }

  static constexpr const char* kFile = "fuzz.yaml";
  const int64_t runStartMs = nowMs();
  uint64_t seed;
  fuzz::SpecGenerator generator;
  std::unique_ptr<Compiler> pipeline;
  uint64_t compilesOnContext = 0;
};

void Runner::fail(const std::string& kind, uint64_t index, const fuzz::Case& c,
                  const std::string& detail) {
  const uint64_t seen = counts.failures[kind]++;
  uint64_t total = 0;
  for (const auto& entry : counts.failures) total += entry.second;
  std::string path;
  if (!outOpt.empty()) {
    llvm::SmallString<128> file(outOpt);
    llvm::sys::path::append(file, kind + "-seed" + std::to_string(seed) + "-case" +
                                      std::to_string(index) + ".yaml");
    path = std::string(file);
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    if (!ec) out << c.text;
    llvm::raw_fd_ostream note(path + ".txt", ec);
    if (!ec) note << kind << ": seed " << seed << " case " << index << " (" << c.recipe << ")\n"
                  << detail << "\n";
  }
  llvm::errs() << "specfuzz: FAIL " << kind << ": seed " << seed << " case " << index
               << " (expected " << fuzz::toString(c.expected) << "; " << c.recipe << ")"
               << (path.empty() ? "" : ": " + path) << "\n";
  // The first few of each class in full; the rest as one line each.
  if (total <= showOpt && seen < 3)
    llvm::errs() << detail << "\n--- spec ---\n" << excerpt(c.text) << "--- end ---\n";
}

void Runner::checkLocations(const Diagnostics& diags, uint64_t index, const fuzz::Case& c,
                            const std::string& where) {
  if (diags.empty()) {
    fail("silent-rejection", index, c, where + ": rejected without a diagnostic");
    return;
  }
  for (const Diagnostic& diag : diags)
    if (!located(diag, kFile)) {
      fail("no-location", index, c, where + ": an error without file:line:col:\n" + diag.render());
      return;
    }
}

void Runner::run(uint64_t index, const fuzz::Case& c) {
  if (printOpt) {
    llvm::outs() << "# case " << index << ": " << fuzz::toString(c.expected) << "; " << c.recipe
                 << "\n" << c.text << "\n";
    return;
  }
  {
    std::lock_guard<std::mutex> guard(inFlight.lock);
    inFlight.banner = "seed " + std::to_string(seed) + " case " + std::to_string(index) +
                      " (expected " + fuzz::toString(c.expected) + "; " + c.recipe + ")\n" +
                      excerpt(c.text) + "\n";
    inFlight.text = c.text;
    inFlight.path.clear();
    if (!outOpt.empty()) {
      llvm::SmallString<128> file(outOpt);
      llvm::sys::path::append(file, "crash-or-hang-seed" + std::to_string(seed) + "-case" +
                                        std::to_string(index) + ".yaml");
      inFlight.path = std::string(file);
    }
  }
  const int64_t start = nowMs();
  startStep();
  ++counts.cases;
  ++counts.byVerdict[int(c.expected)];

  Diagnostics parseDiags;
  std::optional<Spec> spec = parseSpecText(c.text, kFile, parseDiags);
  bool accepted = false;
  std::vector<std::pair<const Target*, CompileOptions>> compiled;
  static const Target hopper = *Target::byName("sm_90a", nullptr);
  static const Target ampere = *Target::byName("sm_80", nullptr);
  if (!spec) {
    checkLocations(parseDiags, index, c, "parser");
    if (c.expected == fuzz::Verdict::Valid)
      fail("valid-rejected", index, c, "parser:\n" + renderAll(parseDiags));
  } else {
    // The backward for a third of the specs: it derives more and runs more passes.
    CompileOptions options;
    options.backward = index % 3 == 0;
    std::string rejections;
    bool onlyRegisterBudget = true;
    for (const Target* target : {&ampere, &hopper}) {
      Diagnostics diags;
      std::optional<CompiledKernel> kernel =
          compiler().compile(*spec, *target, Stage::CUDA, options, diags);
      if (!kernel) {
        checkLocations(diags, index, c, "pipeline on " + target->name);
        rejections += target->name + ":\n" + renderAll(diags);
        for (const Diagnostic& diag : diags)
          onlyRegisterBudget &= diag.message.find(kRegisterBudget) != std::string::npos;
        continue;
      }
      if (kernel->cuda.empty()) fail("empty-output", index, c, target->name + ": no CUDA");
      compiled.push_back({target, options});
    }
    accepted = !compiled.empty();
    // A valid spec whose expressions need more registers than a kernel has is refused at the
    // expression (docs/spec.md, Size): counted, not a failure.
    if (c.expected == fuzz::Verdict::Valid && !rejections.empty() && onlyRegisterBudget)
      ++counts.registerBudget;
    else if (c.expected == fuzz::Verdict::Valid && !rejections.empty())
      fail("valid-rejected", index, c, "pipeline" + std::string(options.backward ? " (backward)" :
                                                                 "") + ":\n" + rejections);
  }
  if (accepted) ++counts.accepted;
  else ++counts.rejected;
  if (accepted && c.expected == fuzz::Verdict::Invalid)
    fail("wrong-acceptance", index, c, "accepted; the generator broke a rule on purpose");

  // The differential test: the back end compiles what the front end accepts.
  // The sample is drawn from the case number, not from a count of the run's acceptances, so
  // that a rerun of one case (or a round resumed after a crash) samples the same specs.
  const uint64_t draw = ((index + 1) * 0x9e3779b97f4a7c15ull) >> 32;  // Fibonacci hashing
  if (accepted && nvrtcEveryOpt > 0 && draw % nvrtcEveryOpt == 0) {
    for (const auto& [target, pipelineOptions] : compiled) {
      // --timeout bounds each compile: the front end and passes, then each NVRTC run. NVRTC runs in
      // a child process, as in the CLI: a ptxas abort is a failure to report, not the fuzzer's end.
      startStep();
      const int64_t compileStart = inFlight.startMs;
      Diagnostics diags;
      CompileOptions options = pipelineOptions;
      options.nvrtc.isolate = NvrtcLimits::isolationSetting().value_or(true);
      std::optional<CompiledKernel> kernel =
          compiler().compile(*spec, *target, Stage::Binary, options, diags);
      counts.nvrtcSeconds += double(nowMs() - compileStart) / 1000;
      if (kernel && !kernel->cubin.empty()) {
        ++counts.nvrtcCompiled;
        continue;
      }
      fail("nvrtc-rejects-accepted", index, c,
           target->name + (options.backward ? " (backward)" : "") +
               ": the pipeline made CUDA, NVRTC did not compile it:\n" + renderAll(diags));
    }
  }

  inFlight.startMs = -1;
  const double seconds = double(nowMs() - start) / 1000;
  if (seconds > counts.slowestSeconds) {
    counts.slowestSeconds = seconds;
    counts.slowestCase = index;
  }
  const std::string line = counts.summary(double(nowMs() - runStartMs) / 1000);
  std::lock_guard<std::mutex> guard(inFlight.lock);
  snprintf(inFlight.counts, sizeof inFlight.counts, "%s", line.c_str());
}

// Ends the process when one compile step runs past --timeout: a hang is a failure with its case.
// The limit is on CPU time, so that a loaded machine (other processes taking the cores) does not
// turn a slow compile into a hang; a step that waits without computing (a read that blocks) is
// caught by wall-clock time, at kBlockedFactor times the limit.
void watchdog(unsigned timeoutSeconds) {
  constexpr int64_t kBlockedFactor = 10;  // far above any load seen on a shared 2-core machine
  const int64_t limitMs = int64_t(timeoutSeconds) * 1000;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const int64_t start = inFlight.startMs;
    if (start < 0) continue;
    const int64_t wallMs = nowMs() - start, stepCpuMs = cpuMs() - inFlight.startCpuMs;
    if (stepCpuMs > limitMs || wallMs > kBlockedFactor * limitMs) {
      std::lock_guard<std::mutex> guard(inFlight.lock);
      dumpInFlight(("HANG (" + std::to_string(stepCpuMs / 1000) + " s of CPU, " +
                    std::to_string(wallMs / 1000) + " s of wall-clock time in one compile)")
                       .c_str());
      writeAll(2, "specfuzz: summary: hang\n");
      std::_Exit(3);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  cl::ParseCommandLineOptions(argc, argv, "attnc spec fuzzer\n");
  llvm::sys::PrintStackTraceOnErrorSignal(argv[0]);
  llvm::sys::AddSignalHandler([](void*) { dumpInFlight("CRASH"); }, nullptr);
  if (!outOpt.empty()) llvm::sys::fs::create_directories(outOpt);

  Runner runner(seedOpt, exceedOpt);
  if (!printOpt) std::thread(watchdog, unsigned(timeoutOpt)).detach();
  const auto started = std::chrono::steady_clock::now();
  if (!specOpt.empty()) {
    auto buffer = llvm::MemoryBuffer::getFile(specOpt);
    if (!buffer) {
      llvm::errs() << "specfuzz: cannot read --spec " << specOpt << ": "
                   << buffer.getError().message() << "\n";
      return 2;
    }
    runner.run(0, fuzz::Case{(*buffer)->getBuffer().str(), fuzz::Verdict::Unknown, specOpt});
  } else {
    for (uint64_t index = firstOpt; index < firstOpt + casesOpt; ++index) runner.run(index);
  }
  if (printOpt) return 0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const std::string summary = runner.counts.summary(seconds);
  llvm::outs() << summary;
  return runner.counts.failures.empty() ? 0 : 1;
}
