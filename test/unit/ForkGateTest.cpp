// The gate between in-process compiles and forks (runtime/ForkGate.h).
#include "runtime/ChildProcess.h"
#include "runtime/ForkGate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace attnc;
using namespace std::chrono_literals;

namespace {

using Clock = ForkGate::Clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST(ForkGate, ForkWithoutInProcessWorkDoesNotWait) {
  ForkGate gate(10s);
  const auto start = Clock::now();
  ForkGate::Fork fork = gate.fork(std::nullopt);
  EXPECT_TRUE(fork);
  EXPECT_LT(secondsSince(start), 1.0);
  EXPECT_FALSE(gate.settling());
}

TEST(ForkGate, ForkWaitsForRunningWorkAndThenTheSettle) {
  ForkGate gate(200ms);
  gate.enter();
  std::atomic<bool> forked{false};
  Clock::time_point forkedAt;
  std::thread forker([&] {
    ForkGate::Fork fork = gate.fork(std::nullopt);
    forkedAt = Clock::now();
    forked = fork ? true : false;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(forked) << "a fork was made while in-process work ran";
  const auto left = Clock::now();
  gate.leave();
  forker.join();
  EXPECT_TRUE(forked);
  EXPECT_GE(std::chrono::duration<double>(forkedAt - left).count(), 0.2)
      << "the fork did not wait for the settle after the work left";
}

TEST(ForkGate, WorkWaitsWhileAForkIsMade) {
  ForkGate gate(0s);
  ForkGate::Fork fork = gate.fork(std::nullopt);
  ASSERT_TRUE(fork);
  std::atomic<bool> entered{false};
  std::thread worker([&] {
    ForkGate::Inside inside(gate);
    entered = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(entered) << "work entered while a fork was being made";
  fork.release();
  worker.join();
  EXPECT_TRUE(entered);
}

TEST(ForkGate, DeadlineEndsTheWaitAndLetsWorkIn) {
  ForkGate gate(0s);
  gate.enter();
  const auto start = Clock::now();
  ForkGate::Fork fork = gate.fork(Clock::now() + 100ms);
  EXPECT_FALSE(fork);
  EXPECT_GE(secondsSince(start), 0.1);
  EXPECT_LT(secondsSince(start), 5.0);
  // The failed fork holds nothing: more work enters at once.
  std::thread worker([&] { ForkGate::Inside inside(gate); });
  worker.join();
  gate.leave();
  EXPECT_FALSE(gate.fork(Clock::now() - 1s)) << "a deadline already past";
  EXPECT_TRUE(gate.fork(std::nullopt));
}

// The child gets the gate as the forking thread held it (a fork being made): work in the child
// passes only once inChild() has bypassed it.
TEST(ForkGate, ChildBypassesTheGateItWasForkedThrough) {
  ForkGate gate(0s);
  ForkGate::Fork fork = gate.fork(std::nullopt);
  ASSERT_TRUE(fork);
  ChildOutcome bypassed = runInChild(
      [&] {
        gate.inChild();
        ForkGate::Inside inside(gate);
        return std::string("in");
      },
      Clock::now() + 60s);
  EXPECT_EQ(bypassed.end, ChildOutcome::End::Finished);
  EXPECT_EQ(bypassed.payload, "in");
  ChildOutcome held = runInChild(
      [&] {
        ForkGate::Inside inside(gate);
        return std::string("in");
      },
      Clock::now() + 500ms);
  EXPECT_EQ(held.end, ChildOutcome::End::TimedOut);
}
