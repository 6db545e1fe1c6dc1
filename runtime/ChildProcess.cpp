#include "runtime/ChildProcess.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace attnc {

namespace {

// The result goes through the pipe as an 8-byte length, then the bytes: the parent knows when it
// has all of it without waiting for end of file (another thread's child, forked before this one
// closed its descriptors, may hold the pipe's write end open for a moment).
constexpr size_t kLengthBytes = sizeof(uint64_t);

// One read() at a time: the size of a Linux pipe's default buffer.
constexpr size_t kReadChunk = 64 * 1024;

bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data += written;
    size -= size_t(written);
  }
  return true;
}

// Reads what is there; false at end of file or on an error other than EINTR/EAGAIN.
bool readSome(int fd, std::string* into) {
  char buffer[kReadChunk];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got > 0) {
      into->append(buffer, size_t(got));
      return true;
    }
    if (got < 0 && errno == EINTR) continue;
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes every descriptor from `from` on except `keep`: close_range where the kernel has it
// (Linux 5.9), else one close() per descriptor up to the process's limit.
void closeFrom(int from, int keep) {
  auto closeRange = [](int first, int last) {
#ifdef SYS_close_range
    if (first > last || ::syscall(SYS_close_range, unsigned(first), unsigned(last), 0u) == 0)
      return;
#endif
    long limit = ::sysconf(_SC_OPEN_MAX);
    for (long fd = first; fd <= std::min<long>(last, limit < 0 ? 1024 : limit - 1); ++fd)
      ::close(int(fd));
  };
  closeRange(from, keep - 1);
  closeRange(keep + 1, INT_MAX);
}

[[noreturn]] void runChild(const std::function<std::string()>& work, int resultFd, int errorFd) {
  // A parent that went away makes write() fail with EPIPE rather than kill the child silently.
  ::signal(SIGPIPE, SIG_IGN);
  // Out of the way of 0-2 first: a host with its standard streams closed gets pipes there.
  int result = ::fcntl(resultFd, F_DUPFD, 3);
  if (result < 0 || ::dup2(errorFd, STDERR_FILENO) < 0) ::_exit(125);
  closeFrom(3, result);
  std::string payload;
  try {
    payload = work();
  } catch (...) {
    ::_exit(124);
  }
  const uint64_t length = payload.size();
  char header[kLengthBytes];
  std::memcpy(header, &length, kLengthBytes);
  const bool sent = writeAll(result, header, kLengthBytes) &&
                    writeAll(result, payload.data(), payload.size());
  ::_exit(sent ? 0 : 123);
}

// Waits for `pid`, through EINTR; the raw status, or -1 when it cannot be had (a host that set
// SIGCHLD to SIG_IGN has its children reaped by the kernel).
int reap(pid_t pid) {
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, 0) == pid) return status;
    if (errno != EINTR) return -1;
  }
}

}  // namespace

std::string describeSignal(int signal) {
  const char* name = nullptr;
  switch (signal) {
    case SIGABRT: name = "SIGABRT"; break;
    case SIGSEGV: name = "SIGSEGV"; break;
    case SIGBUS: name = "SIGBUS"; break;
    case SIGFPE: name = "SIGFPE"; break;
    case SIGILL: name = "SIGILL"; break;
    case SIGKILL: name = "SIGKILL"; break;
    case SIGTERM: name = "SIGTERM"; break;
    case SIGTRAP: name = "SIGTRAP"; break;
    default: break;
  }
  return "signal " + std::to_string(signal) + (name ? std::string(" (") + name + ")" : "");
}

ChildOutcome runInChild(const std::function<std::string()>& work,
                        std::optional<std::chrono::steady_clock::time_point> deadline,
                        const std::function<void()>& forked) {
  ChildOutcome outcome;
  int resultPipe[2] = {-1, -1}, errorPipe[2] = {-1, -1};
  if (::pipe2(resultPipe, O_CLOEXEC) != 0 || ::pipe2(errorPipe, O_CLOEXEC) != 0) {
    outcome.error = std::string("pipe: ") + std::strerror(errno);
    for (int* fd : {&resultPipe[0], &resultPipe[1], &errorPipe[0], &errorPipe[1]}) closeFd(*fd);
    return outcome;
  }
  const pid_t pid = ::fork();
  if (pid == 0) runChild(work, resultPipe[1], errorPipe[1]);
  if (forked) forked();
  closeFd(resultPipe[1]);
  closeFd(errorPipe[1]);
  if (pid < 0) {
    outcome.error = std::string("fork: ") + std::strerror(errno);
    closeFd(resultPipe[0]);
    closeFd(errorPipe[0]);
    return outcome;
  }
  outcome.pid = pid;
  int resultFd = resultPipe[0], errorFd = errorPipe[0];
  ::fcntl(resultFd, F_SETFL, ::fcntl(resultFd, F_GETFL) | O_NONBLOCK);
  ::fcntl(errorFd, F_SETFL, ::fcntl(errorFd, F_GETFL) | O_NONBLOCK);

  std::string received;  // the length, then the payload
  auto complete = [&] {
    if (received.size() < kLengthBytes) return false;
    uint64_t length = 0;
    std::memcpy(&length, received.data(), kLengthBytes);
    return received.size() - kLengthBytes >= length;
  };
  bool timedOut = false;
  while (resultFd >= 0 && !complete()) {
    int waitMs = -1;
    if (deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timedOut = true;
        break;
      }
      waitMs = int(std::min<long long>(left.count(), INT_MAX));
    }
    pollfd fds[2] = {{resultFd, POLLIN, 0}, {errorFd, POLLIN, 0}};
    const int watched = errorFd >= 0 ? 2 : 1;
    const int ready = ::poll(fds, nfds_t(watched), waitMs);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;  // EINTR, or the deadline: checked at the top
    if (fds[0].revents && !readSome(resultFd, &received)) closeFd(resultFd);
    if (watched == 2 && fds[1].revents && !readSome(errorFd, &outcome.errorOutput))
      closeFd(errorFd);
  }
  if (timedOut) ::kill(pid, SIGKILL);
  const int status = reap(pid);
  // The child is gone: what it wrote to standard error is all in the pipe now.
  while (errorFd >= 0 && readSome(errorFd, &outcome.errorOutput)) {
  }
  closeFd(resultFd);
  closeFd(errorFd);

  if (timedOut) {
    outcome.end = ChildOutcome::End::TimedOut;
  } else if (status != -1 && WIFSIGNALED(status)) {
    outcome.end = ChildOutcome::End::Signaled;
    outcome.signal = WTERMSIG(status);
  } else if (complete() && (status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0))) {
    outcome.end = ChildOutcome::End::Finished;
    outcome.payload = received.substr(kLengthBytes);
  } else {
    outcome.end = ChildOutcome::End::Exited;
    outcome.exitStatus = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return outcome;
}

}  // namespace attnc
