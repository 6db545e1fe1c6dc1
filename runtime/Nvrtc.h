// NVRTC, loaded with dlopen at first use: compiles a CUDA C++ translation unit plus headers passed
// by name and contents into PTX and a CUBIN, and reports each kernel's registers, spills and
// shared memory as ptxas prints them. Needs no CUDA headers to build and no GPU to run.
// Each compile runs in a child process of its own by default (NvrtcLimits), so that ptxas aborting
// or NVRTC crashing or hanging is an error, never the end of the caller.
#pragma once

#include "runtime/EmbeddedTemplates.h"
#include "runtime/PtxasInfo.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

class DynamicLibrary;

// An extra option for Nvrtc::compile: ptxas in one thread, which replaces the threads NVRTC 13
// is given otherwise (compile() below). Only then does NVRTC's log hold ptxas's notes (a wgmma
// pipeline ptxas serialized, for one); its threads print them to the process's stderr.
inline constexpr const char* kPtxasOneThread = "--ptxas-options=--split-compile=1";

// How a compile ended.
enum class NvrtcEnd {
  Compiled,  // PTX (and a CUBIN for a real architecture)
  Failed,    // NVRTC reported an error: the log says which
  Crashed,   // NVRTC or ptxas ended the compile's process: a signal (an abort), or an exit
  TimedOut,  // the deadline (NvrtcLimits) passed first
};

struct NvrtcResult {
  bool ok = false;          // end == Compiled
  NvrtcEnd end = NvrtcEnd::Failed;
  std::string crash;        // Crashed: "signal 6 (SIGABRT)", or "exit status 1"
  std::string log;          // NVRTC's log: errors as "<name>(<line>): error: ...", ptxas info
  std::string ptx;          // without the trailing NUL
  std::vector<char> cubin;  // empty when `arch` is virtual (compute_XX)
  std::map<std::string, ResourceUsage> resources;  // per entry function, by (mangled) name
  double compileSeconds = 0;
};

// Whether ptxas gave up for lack of registers: "ptxas fatal : (C7602) Insufficient registers (128)
// to compile instruction at line 427 in function 's_fwd'", after which it aborts the process.
// The kernel asked for more live values than its register budget (launch bounds) holds; a smaller
// tile may fit.
bool ptxasOutOfRegisters(const NvrtcResult& result);

// The message for a compile that did not end in Compiled, naming the spec `name` and `arch`;
// `timeoutSeconds` is the limit a TimedOut compile ran past.
std::string describeNvrtcFailure(const NvrtcResult& result, const std::string& name,
                                 const std::string& arch, double timeoutSeconds);

// How long an isolated compile's fork waits past this process's last in-process compile, for
// NVRTC's worker threads to finish exiting (runtime/ForkGate.h). They exit within microseconds
// of the compile's return on an idle CPU; 50 ms covers a descheduled one on a loaded machine, and
// only the first isolated compile after an in-process one waits.
inline constexpr std::chrono::milliseconds kNvrtcForkSettle{50};

class ForkGate;
// The process's gate between in-process compiles and isolated compiles' forks.
ForkGate& nvrtcForkGate();

// How Nvrtc::compile runs: where, and for how long.
struct NvrtcLimits {
  // In a child process (runtime/ChildProcess.h), so that an abort, a crash or a hang of NVRTC or
  // ptxas ends the child, not the caller, and a deadline can stop it mid-compile; costs a fork and
  // a pipe (milliseconds). Off, a timeout is checked only once NVRTC returns.
  bool isolate = false;
  // The wall-clock limit the deadline was set from (for messages); 0 = none.
  double timeoutSeconds = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;

  // $ATTNC_COMPILE_ISOLATION: 0 (never isolate) or 1 (always); nullopt when unset or other.
  static std::optional<bool> isolationSetting();
  // Limits with a deadline `seconds` from now (none for 0), isolated unless
  // $ATTNC_COMPILE_ISOLATION is 0.
  static NvrtcLimits within(double seconds);
};

// The compile timeout from $ATTNC_COMPILE_TIMEOUT in seconds into *seconds (0 when unset or
// empty); false, with a message naming the variable in *error, for a value that is not a finite
// number of seconds >= 0.
bool compileTimeoutFromEnvironment(double* seconds, std::string* error);

class Nvrtc {
public:
  // The process-wide NVRTC, loaded on the first call (thread-safe). Null, with a message listing
  // the places searched in *error, when no usable libnvrtc exists.
  static Nvrtc* get(std::string* error);

  int versionMajor = 0;
  int versionMinor = 0;

  // Compiles `source` (reported as `name` in diagnostics) for `arch` ("sm_80", "sm_90a": a real
  // architecture yields PTX and a CUBIN; "compute_90a" yields PTX only). `headers` are visible to
  // #include by their path exactly as written, from the source and from each other.
  // Default options: --gpu-architecture=<arch> -std=c++17 -default-device --ptxas-options=-v,
  // --no-cache from NVRTC 12.9 on (a driver-cache hit would skip ptxas and its report), and from
  // NVRTC 13 on --ptxas-options=--split-compile=0 (entry points assembled on all CPUs at once);
  // `extraOptions` are appended (e.g. "-lineinfo", "-DFOO=1", "--maxrregcount=128").
  // Thread-safe: each call owns its NVRTC program (and, isolated, its process).
  NvrtcResult compile(const std::string& source, const std::string& name,
                      const std::vector<EmbeddedFile>& headers, const std::string& arch,
                      const std::vector<std::string>& extraOptions,
                      const NvrtcLimits& limits = NvrtcLimits());

  // `source` compiled once for each of `variants` (the extra options of each program), all at
  // once on threads of their own (one after another where no thread can be started). Isolated,
  // they all run in one child process forked from the calling thread, under one deadline: the
  // child compiles them on its threads as the caller would.
  std::vector<NvrtcResult> compileEach(const std::string& source, const std::string& name,
                                       const std::vector<EmbeddedFile>& headers,
                                       const std::string& arch,
                                       const std::vector<std::vector<std::string>>& variants,
                                       const NvrtcLimits& limits = NvrtcLimits());

  ~Nvrtc();

private:
  struct Api;
  Nvrtc(std::unique_ptr<DynamicLibrary> library, std::unique_ptr<Api> api);
  // compile() in this process.
  NvrtcResult compileHere(const std::string& source, const std::string& name,
                          const std::vector<EmbeddedFile>& headers, const std::string& arch,
                          const std::vector<std::string>& extraOptions);

  std::unique_ptr<DynamicLibrary> library_;
  std::unique_ptr<Api> api_;
};

}  // namespace attnc
