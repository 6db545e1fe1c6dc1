// Keeps forks away from in-process work whose threads outlive it. NVRTC's worker threads finish
// exiting after nvrtcCompileProgram has returned, and may hold NVRTC's internal mutex meanwhile;
// a fork() then gives the child that mutex locked, with no thread left to unlock it, and the
// child's own compile waits on it forever.
// In-process compiles enter and leave the gate; a fork waits until none runs and `settle` has
// passed since the last one left, and no compile enters until the fork is made.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

namespace attnc {

class ForkGate {
public:
  using Clock = std::chrono::steady_clock;

  explicit ForkGate(Clock::duration settle) : settle_(settle) {}

  // Around in-process work: enter() waits while a fork is being made.
  void enter();
  void leave();
  struct Inside {  // enter() to leave(), as a scope
    explicit Inside(ForkGate& gate) : gate(gate) { gate.enter(); }
    ~Inside() { gate.leave(); }
    Inside(const Inside&) = delete;
    Inside& operator=(const Inside&) = delete;
    ForkGate& gate;
  };

  // Held from before fork() to just after it; release() (or the destructor) lets work enter again.
  class Fork {
  public:
    Fork() = default;
    Fork(Fork&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Fork& operator=(Fork&&) = delete;
    ~Fork() { release(); }
    void release();
    explicit operator bool() const { return gate_ != nullptr; }

  private:
    friend class ForkGate;
    explicit Fork(ForkGate* gate) : gate_(gate) {}
    ForkGate* gate_ = nullptr;
  };

  // Waits until no in-process work runs and `settle` has passed since the last left; an empty
  // Fork when `deadline` passes first (or has passed).
  Fork fork(std::optional<Clock::time_point> deadline);

  // In the forked child, first: enter() and leave() pass from then on (the mutex may have been
  // copied locked by a parent thread, and the child makes no fork of its own).
  void inChild() { bypass_ = true; }

  // Whether fork() would wait now (tests).
  bool settling();

private:
  const Clock::duration settle_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int running_ = 0;
  int forking_ = 0;
  std::optional<Clock::time_point> lastLeft_;
  bool bypass_ = false;  // set in a child before it starts threads
};

}  // namespace attnc
