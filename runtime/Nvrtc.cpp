// NVRTC through dlopen (Nvrtc.h): finding and loading libnvrtc, compiling a program here or in an
// isolated child process, and describing a compile that did not end in a cubin.
#include "runtime/Nvrtc.h"

#include "runtime/ChildProcess.h"
#include "runtime/DynamicLibrary.h"
#include "runtime/ForkGate.h"

#include <algorithm>
#include <thread>
#include <system_error>
#include <functional>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace attnc {

// The slice of nvrtc.h attnc uses, declared here so that building attnc needs no CUDA headers.
struct Nvrtc::Api {
  using Result = int;  // nvrtcResult; 0 is NVRTC_SUCCESS
  using Program = struct NvrtcProgramOpaque*;

  Result (*createProgram)(Program*, const char* source, const char* name, int numHeaders,
                          const char* const* headers, const char* const* includeNames);
  Result (*compileProgram)(Program, int numOptions, const char* const* options);
  Result (*getProgramLogSize)(Program, size_t*);
  Result (*getProgramLog)(Program, char*);
  Result (*getPTXSize)(Program, size_t*);
  Result (*getPTX)(Program, char*);
  Result (*getCUBINSize)(Program, size_t*);
  Result (*getCUBIN)(Program, char*);
  Result (*destroyProgram)(Program*);
  Result (*version)(int* major, int* minor);
  const char* (*getErrorString)(Result);

  bool resolve(const DynamicLibrary& library, std::string* error) {
    return library.resolve(createProgram, "nvrtcCreateProgram", error) &&
           library.resolve(compileProgram, "nvrtcCompileProgram", error) &&
           library.resolve(getProgramLogSize, "nvrtcGetProgramLogSize", error) &&
           library.resolve(getProgramLog, "nvrtcGetProgramLog", error) &&
           library.resolve(getPTXSize, "nvrtcGetPTXSize", error) &&
           library.resolve(getPTX, "nvrtcGetPTX", error) &&
           library.resolve(getCUBINSize, "nvrtcGetCUBINSize", error) &&
           library.resolve(getCUBIN, "nvrtcGetCUBIN", error) &&
           library.resolve(destroyProgram, "nvrtcDestroyProgram", error) &&
           library.resolve(version, "nvrtcVersion", error) &&
           library.resolve(getErrorString, "nvrtcGetErrorString", error);
  }

  std::string describe(Result result) const {
    const char* text = getErrorString(result);
    return text ? text : "NVRTC error " + std::to_string(result);
  }
};

namespace {

// Where libnvrtc is looked for, first match wins: $ATTNC_NVRTC_PATH (an explicit file), the loader
// cache / LD_LIBRARY_PATH by soname (13, the version attnc is tested with, before an unversioned
// development link), then the toolkit under $CUDA_HOME, $CUDA_PATH and /usr/local/cuda.
std::vector<std::string> nvrtcCandidates() {
  std::vector<std::string> candidates;
  if (const char* explicitPath = std::getenv("ATTNC_NVRTC_PATH"); explicitPath && *explicitPath)
    candidates.push_back(explicitPath);
  candidates.push_back("libnvrtc.so.13");
  candidates.push_back("libnvrtc.so");
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(variable); root && *root) {
      candidates.push_back(std::string(root) + "/lib64/libnvrtc.so.13");
      candidates.push_back(std::string(root) + "/lib64/libnvrtc.so");
    }
  }
  candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  candidates.push_back("libnvrtc.so.12");
  return candidates;
}

}  // namespace

Nvrtc::Nvrtc(std::unique_ptr<DynamicLibrary> library, std::unique_ptr<Api> api)
    : library_(std::move(library)), api_(std::move(api)) {}

Nvrtc::~Nvrtc() = default;

Nvrtc* Nvrtc::get(std::string* error) {
  struct Loaded {
    std::unique_ptr<Nvrtc> nvrtc;
    std::string error;
  };
  // A function-local static: initialised once, and thread-safe, by the language. Never destroyed:
  // NVRTC stays loaded until the process ends (ptxas's worker threads outlive the compiles that
  // started them, and unloading the library under them crashed processes at exit).
  static const Loaded& loaded = *new Loaded([] {
    Loaded result;
    std::unique_ptr<DynamicLibrary> library =
        DynamicLibrary::open(nvrtcCandidates(), &result.error);
    if (!library) {
      result.error = "NVRTC not found (set ATTNC_NVRTC_PATH or CUDA_HOME): " + result.error;
      return result;
    }
    auto api = std::make_unique<Api>();
    if (!api->resolve(*library, &result.error)) {
      result.error = "unusable NVRTC: " + result.error;
      return result;
    }
    int major = 0, minor = 0;
    if (int status = api->version(&major, &minor); status != 0) {
      result.error = "nvrtcVersion failed in " + library->name() + ": " + api->describe(status);
      return result;
    }
    result.nvrtc.reset(new Nvrtc(std::move(library), std::move(api)));
    result.nvrtc->versionMajor = major;
    result.nvrtc->versionMinor = minor;
    return result;
  }());
  if (!loaded.nvrtc && error)
    *error = loaded.error;
  return loaded.nvrtc.get();
}

NvrtcResult Nvrtc::compileHere(const std::string& source, const std::string& name,
                               const std::vector<EmbeddedFile>& headers, const std::string& arch,
                               const std::vector<std::string>& extraOptions) {
  NvrtcResult result;
  auto start = std::chrono::steady_clock::now();
  auto fail = [&](const char* what, Api::Result status) {
    result.ok = false;
    if (!result.log.empty() && result.log.back() != '\n')
      result.log += '\n';
    result.log += std::string(what) + " failed for " + name + ": " + api_->describe(status) + "\n";
  };

  std::vector<const char*> headerContents, headerNames;
  for (const EmbeddedFile& header : headers) {
    headerContents.push_back(header.contents.c_str());
    headerNames.push_back(header.path.c_str());
  }
  Api::Program program = nullptr;
  if (Api::Result status = api_->createProgram(&program, source.c_str(), name.c_str(),
                                               static_cast<int>(headers.size()),
                                               headerContents.data(), headerNames.data())) {
    fail("nvrtcCreateProgram", status);
    return result;
  }

  std::vector<std::string> options = {"--gpu-architecture=" + arch, "-std=c++17",
                                      "-default-device", "--ptxas-options=-v"};
  // NVRTC >= 12.9 reuses cubins from the driver's compute cache when a driver is installed, and a
  // hit skips ptxas: the log, and so the resource report, comes back empty (seen with 13.0 on the
  // H200 machine). attnc keeps its own kernel cache, so NVRTC's is turned off.
  if (versionMajor > 12 || (versionMajor == 12 && versionMinor >= 9))
    options.push_back("--no-cache");
  // ptxas assembles the entry points of one program (the forward and the five backward kernels)
  // one after another unless told to use threads; with them it emits the same SASS (checked with
  // cuobjdump on every example, CUDA 13.0) and the same report, per entry and in order. NVRTC's own
  // --split-compile (the NVVM optimizer) is left off: it changed register allocation.
  // (kPtxasOneThread among the extra options replaces it: ptxas's threads print its notes to
  // stderr, where the log's reader cannot see them)
  const bool oneThread =
      std::find(extraOptions.begin(), extraOptions.end(), kPtxasOneThread) != extraOptions.end();
  if (versionMajor >= 13 && !oneThread)
    options.push_back("--ptxas-options=--split-compile=0");
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char*> optionPointers;
  for (const std::string& option : options)
    optionPointers.push_back(option.c_str());

  Api::Result compileStatus =
      api_->compileProgram(program, static_cast<int>(optionPointers.size()), optionPointers.data());

  size_t logSize = 0;
  if (api_->getProgramLogSize(program, &logSize) == 0 && logSize > 1) {
    result.log.resize(logSize);
    api_->getProgramLog(program, result.log.data());
    result.log.resize(logSize - 1);  // drop the NUL
  }

  result.ok = compileStatus == 0;
  if (!result.ok) {
    fail("nvrtcCompileProgram", compileStatus);
  } else {
    size_t size = 0;
    if (Api::Result status = api_->getPTXSize(program, &size)) {
      fail("nvrtcGetPTXSize", status);
    } else if (size > 0) {
      result.ptx.resize(size);
      if (Api::Result status = api_->getPTX(program, result.ptx.data()))
        fail("nvrtcGetPTX", status);
      while (!result.ptx.empty() && result.ptx.back() == '\0')
        result.ptx.pop_back();
    }
    // A virtual architecture (compute_XX) has no CUBIN: size 0, which is not an error.
    if (result.ok && arch.rfind("sm_", 0) == 0) {
      if (Api::Result status = api_->getCUBINSize(program, &size)) {
        fail("nvrtcGetCUBINSize", status);
      } else if (size > 0) {
        result.cubin.resize(size);
        if (Api::Result status = api_->getCUBIN(program, result.cubin.data()))
          fail("nvrtcGetCUBIN", status);
      }
    }
    result.resources = parsePtxasInfo(result.log);
  }
  api_->destroyProgram(&program);
  result.end = result.ok ? NvrtcEnd::Compiled : NvrtcEnd::Failed;
  result.compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

namespace {

// A compile's result through the child's pipe: whether it compiled, then the log, the PTX and the
// CUBIN, each an 8-byte length and its bytes. The resource report is parsed again from the log.
void appendField(std::string* to, const char* data, size_t size) {
  const uint64_t length = size;
  to->append(reinterpret_cast<const char*>(&length), sizeof length);
  to->append(data, size);
}

std::string encodeResult(const NvrtcResult& result) {
  std::string bytes(1, result.ok ? '1' : '0');
  appendField(&bytes, result.log.data(), result.log.size());
  appendField(&bytes, result.ptx.data(), result.ptx.size());
  appendField(&bytes, result.cubin.data(), result.cubin.size());
  return bytes;
}

bool decodeResult(const std::string& bytes, NvrtcResult* result) {
  size_t at = 1;
  auto field = [&](auto* into) {
    uint64_t length = 0;
    if (bytes.size() - at < sizeof length) return false;
    std::memcpy(&length, bytes.data() + at, sizeof length);
    at += sizeof length;
    if (bytes.size() - at < length) return false;
    into->assign(bytes.data() + at, bytes.data() + at + length);
    at += length;
    return true;
  };
  if (bytes.empty()) return false;
  result->ok = bytes[0] == '1';
  result->end = result->ok ? NvrtcEnd::Compiled : NvrtcEnd::Failed;
  return field(&result->log) && field(&result->ptx) && field(&result->cubin) && at == bytes.size();
}

// The last lines of a log, at most this many bytes of it, for a message: ptxas's fatal lines come
// last, and a whole log can be megabytes.
constexpr size_t kLogTailBytes = 4096;

std::string logTail(const std::string& log) {
  if (log.size() <= kLogTailBytes) return log;
  size_t from = log.find('\n', log.size() - kLogTailBytes);
  return "...\n" + log.substr(from == std::string::npos ? log.size() - kLogTailBytes : from + 1);
}

// The results of an isolated compile of `results->size()` programs from the child's `outcome`:
// decoded by `decode` from its payload when it finished, else each program ended as the child did.
// Compiled results get their resource report; the child's standard error goes to the caller's
// (ptxas's notes, as without the child) or, when a program did not compile, into its log.
void finishIsolated(const ChildOutcome& child, const std::string& name,
                    const std::function<bool(const std::string&)>& decode,
                    std::vector<NvrtcResult>* results) {
  auto endAll = [&](NvrtcEnd end, const std::string& crash, const std::string& log) {
    for (NvrtcResult& result : *results) {
      result = NvrtcResult();
      result.end = end;
      result.crash = crash;
      result.log = log;
    }
  };
  switch (child.end) {
    case ChildOutcome::End::Finished:
      if (!decode(child.payload)) endAll(NvrtcEnd::Crashed, "a malformed result", "");
      break;
    case ChildOutcome::End::Signaled:
      endAll(NvrtcEnd::Crashed, describeSignal(child.signal), "");
      break;
    case ChildOutcome::End::Exited:
      endAll(NvrtcEnd::Crashed, "exit status " + std::to_string(child.exitStatus), "");
      break;
    case ChildOutcome::End::TimedOut:
      endAll(NvrtcEnd::TimedOut, "", "");
      break;
    case ChildOutcome::End::NotStarted:
      endAll(NvrtcEnd::Failed, "",
             "cannot start a process to compile " + name + " in: " + child.error + "\n");
      break;
  }
  bool allCompiled = true;
  for (NvrtcResult& result : *results) {
    if (result.end == NvrtcEnd::Compiled) result.resources = parsePtxasInfo(result.log);
    else allCompiled = false;
  }
  if (child.errorOutput.empty()) return;
  if (allCompiled) {
    std::fwrite(child.errorOutput.data(), 1, child.errorOutput.size(), stderr);
    return;
  }
  for (NvrtcResult& result : *results)
    if (result.end != NvrtcEnd::Compiled) {
      if (!result.log.empty() && result.log.back() != '\n') result.log += '\n';
      result.log += child.errorOutput;
    }
}

}  // namespace

ForkGate& nvrtcForkGate() {
  // Never destroyed: threads may use it after main returns.
  static ForkGate* gate = new ForkGate(kNvrtcForkSettle);
  return *gate;
}

NvrtcResult Nvrtc::compile(const std::string& source, const std::string& name,
                           const std::vector<EmbeddedFile>& headers, const std::string& arch,
                           const std::vector<std::string>& extraOptions,
                           const NvrtcLimits& limits) {
  const auto start = std::chrono::steady_clock::now();
  auto pastDeadline = [&] {
    return limits.deadline && std::chrono::steady_clock::now() > *limits.deadline;
  };
  NvrtcResult result;
  if (!limits.isolate) {
    {
      ForkGate::Inside inside(nvrtcForkGate());
      result = compileHere(source, name, headers, arch, extraOptions);
    }
    if (pastDeadline()) result = NvrtcResult{false, NvrtcEnd::TimedOut};
    result.compileSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }
  ForkGate::Fork fork = nvrtcForkGate().fork(limits.deadline);  // empty: past the deadline
  if (!fork) {
    result.end = NvrtcEnd::TimedOut;
    return result;
  }
  ChildOutcome child = runInChild(
      [&] {
        nvrtcForkGate().inChild();
        return encodeResult(compileHere(source, name, headers, arch, extraOptions));
      },
      limits.deadline, [&] { fork.release(); });
  std::vector<NvrtcResult> results(1);
  finishIsolated(child, name, [&](const std::string& payload) {
    return decodeResult(payload, &results[0]);
  }, &results);
  result = std::move(results[0]);
  result.compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<NvrtcResult> Nvrtc::compileEach(const std::string& source, const std::string& name,
                                           const std::vector<EmbeddedFile>& headers,
                                           const std::string& arch,
                                           const std::vector<std::vector<std::string>>& variants,
                                           const NvrtcLimits& limits) {
  auto onThreads = [&](const NvrtcLimits& each) {
    std::vector<NvrtcResult> results(variants.size());
    auto compileVariant = [&](size_t i) {
      results[i] = compile(source, name, headers, arch, variants[i], each);
    };
    std::vector<std::thread> threads;
    size_t inline_ = variants.size();  // the first program not given a thread
    for (size_t i = 1; i < variants.size(); ++i) {
      try {
        threads.emplace_back(compileVariant, i);
      } catch (const std::system_error&) {
        inline_ = i;
        break;
      }
    }
    if (!variants.empty()) compileVariant(0);
    for (size_t i = inline_; i < variants.size(); ++i) compileVariant(i);
    for (std::thread& thread : threads) thread.join();
    return results;
  };
  if (!limits.isolate || variants.size() <= 1) return onThreads(limits);

  const auto start = std::chrono::steady_clock::now();
  ForkGate::Fork fork = nvrtcForkGate().fork(limits.deadline);  // empty: past the deadline
  if (!fork) {
    std::vector<NvrtcResult> results(variants.size());
    for (NvrtcResult& result : results) result.end = NvrtcEnd::TimedOut;
    return results;
  }
  NvrtcLimits inChild = limits;
  inChild.isolate = false;
  ChildOutcome child = runInChild(
      [&] {
        nvrtcForkGate().inChild();
        std::string bytes;
        for (const NvrtcResult& result : onThreads(inChild)) {
          const std::string one = encodeResult(result);
          appendField(&bytes, one.data(), one.size());
        }
        return bytes;
      },
      limits.deadline, [&] { fork.release(); });
  std::vector<NvrtcResult> results(variants.size());
  finishIsolated(
      child, name,
      [&](const std::string& payload) {
        size_t at = 0;
        for (NvrtcResult& result : results) {
          uint64_t length = 0;
          if (payload.size() - at < sizeof length) return false;
          std::memcpy(&length, payload.data() + at, sizeof length);
          at += sizeof length;
          if (payload.size() - at < length ||
              !decodeResult(payload.substr(at, length), &result))
            return false;
          at += length;
        }
        return at == payload.size();
      },
      &results);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (NvrtcResult& result : results) result.compileSeconds = seconds;
  return results;
}

bool ptxasOutOfRegisters(const NvrtcResult& result) {
  return result.end != NvrtcEnd::Compiled && result.log.find("(C7602)") != std::string::npos;
}

std::string describeNvrtcFailure(const NvrtcResult& result, const std::string& name,
                                 const std::string& arch, double timeoutSeconds) {
  switch (result.end) {
    case NvrtcEnd::Compiled:
      return "";
    case NvrtcEnd::TimedOut: {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeoutSeconds);
      return "compiling '" + name + "' for " + arch + " took longer than " + seconds +
             " s (ATTNC_COMPILE_TIMEOUT / JitOptions::compileTimeoutSeconds)";
    }
    case NvrtcEnd::Crashed:
    case NvrtcEnd::Failed:
      break;
  }
  if (ptxasOutOfRegisters(result)) {
    const size_t at = result.log.find("(C7602)");
    const size_t end = result.log.find('\n', at);
    return "'" + name + "': the mask or score expression needs more registers than the " + arch +
           " kernel has; simplify it (ptxas: " +
           result.log.substr(at, end == std::string::npos ? end : end - at) + ")";
  }
  if (result.end == NvrtcEnd::Crashed)
    return "NVRTC/ptxas crashed (" + result.crash + ") compiling '" + name + "' for " + arch +
           (result.log.empty() ? std::string() : ":\n" + logTail(result.log));
  return "NVRTC failed to compile the kernel for '" + name + "' for " + arch +
         " (a bug in attnc):\n" + result.log;
}

std::optional<bool> NvrtcLimits::isolationSetting() {
  const char* value = std::getenv("ATTNC_COMPILE_ISOLATION");
  if (value && std::string(value) == "0") return false;
  if (value && std::string(value) == "1") return true;
  return std::nullopt;
}

NvrtcLimits NvrtcLimits::within(double seconds) {
  NvrtcLimits limits;
  limits.isolate = isolationSetting().value_or(true);
  if (seconds > 0) {
    limits.timeoutSeconds = seconds;
    limits.deadline = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(seconds));
  }
  return limits;
}

// The largest timeout accepted: a bit over 31 years, past which steady_clock's nanoseconds in
// 64 bits would overflow when added to now.
constexpr double kMaxTimeoutSeconds = 1e9;

bool compileTimeoutFromEnvironment(double* seconds, std::string* error) {
  *seconds = 0;
  const char* value = std::getenv("ATTNC_COMPILE_TIMEOUT");
  if (!value || !*value) return true;
  char* end = nullptr;
  errno = 0;
  const double parsed = std::strtod(value, &end);
  if (end == value || *end != '\0' || errno == ERANGE || !std::isfinite(parsed) || parsed < 0 ||
      parsed > kMaxTimeoutSeconds) {
    *error = "ATTNC_COMPILE_TIMEOUT: expected a number of seconds from 0 (no limit) to 1e9, got '" +
             std::string(value) + "'";
    return false;
  }
  *seconds = parsed;
  return true;
}

}  // namespace attnc
