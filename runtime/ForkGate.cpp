#include "runtime/ForkGate.h"

namespace attnc {

void ForkGate::enter() {
  if (bypass_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return forking_ == 0; });
  ++running_;
}

void ForkGate::leave() {
  if (bypass_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  --running_;
  lastLeft_ = Clock::now();
  changed_.notify_all();
}

ForkGate::Fork ForkGate::fork(std::optional<Clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  ++forking_;  // from here no work enters
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (deadline && now >= *deadline) break;
    std::optional<Clock::time_point> until = deadline;
    if (running_ == 0) {
      if (!lastLeft_ || now >= *lastLeft_ + settle_) return Fork(this);
      if (!until || *lastLeft_ + settle_ < *until) until = *lastLeft_ + settle_;
    }
    if (until)
      changed_.wait_until(lock, *until);
    else
      changed_.wait(lock);
  }
  --forking_;
  changed_.notify_all();
  return Fork();
}

void ForkGate::Fork::release() {
  if (!gate_) return;
  ForkGate* gate = gate_;
  gate_ = nullptr;
  std::lock_guard<std::mutex> lock(gate->mutex_);
  --gate->forking_;
  gate->changed_.notify_all();
}

bool ForkGate::settling() {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ > 0 || (lastLeft_ && Clock::now() < *lastLeft_ + settle_);
}

}  // namespace attnc
