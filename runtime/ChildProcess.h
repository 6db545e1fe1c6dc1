// Runs a function in a forked child process and brings its result back, so that an abort, a crash
// or a hang inside it (ptxas inside NVRTC, for one) ends the child and is reported to the caller,
// which lives on. POSIX only (fork, pipes, poll).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace attnc {

struct ChildOutcome {
  enum class End {
    Finished,  // `work` returned; `payload` holds what it returned
    Signaled,  // the child was ended by a signal (`signal`: SIGABRT from an abort, SIGSEGV, ...)
    Exited,    // the child exited before handing its result back (`exitStatus`)
    TimedOut,  // the deadline passed first: the child was killed (SIGKILL) and reaped
    NotStarted,  // no child could be made (`error`: why), e.g. fork() failed
  };
  End end = End::NotStarted;
  std::string payload;
  std::string errorOutput;  // what the child wrote to its standard error, in every case
  int signal = 0;
  int exitStatus = 0;
  int pid = -1;  // the child's process id (reaped by the time runInChild returns)
  std::string error;
};

// "signal 6 (SIGABRT)": a signal number with its name, for messages.
std::string describeSignal(int signal);

// Forks, runs `work` in the child and returns what it returned. The child's standard error goes
// to a pipe (ChildOutcome::errorOutput); the child closes every other descriptor it inherited, so
// that no child holds another's pipes open, and ends with _exit (no atexit handlers, no stdio
// flush of the parent's buffers). The caller reads with poll() until the result is complete or
// `deadline` passes, then reaps the child: no zombie is left in any case.
// In a process with threads only the calling thread exists in the child: `work` must not need a
// lock that another thread may hold (malloc is safe: glibc's fork() resets its locks).
// `forked`, when given, runs in the parent right after fork() returns, whether it made a child or
// not (ForkGate::Fork::release, for one).
ChildOutcome runInChild(const std::function<std::string()>& work,
                        std::optional<std::chrono::steady_clock::time_point> deadline,
                        const std::function<void()>& forked = {});

}  // namespace attnc
