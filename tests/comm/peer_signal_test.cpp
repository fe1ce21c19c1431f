// The wait of the shared-memory transport (zero/comm/transport/peer_signal.hpp): two threads play
// two ranks, each signalling a phase and waiting for the other's, as ShmTransport does. Data
// published before a signal is seen after the wait, a waiter that fell asleep is woken by the
// signal (never by the backstop timeout), and the path that sleeps at once (the peer last ran on
// the waiter's CPU) works as well as the spinning one.
//
// The data is plain memory, written before signal_peers and read once the wait returns, and a
// waiter knows the phase arrived only from the signal's own sequence word: nothing but
// signal_peers' release (and the acquire that wait_for_peer's contract asks of `arrived`) orders
// the two. With that release weakened to relaxed, ThreadSanitizer (the tsan preset) reports the
// payload's read as a data race; a stale value fails the count below on a machine or compiler
// that reorders.

#include "zero/comm/transport/peer_signal.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace {

struct Rank {
  alignas(64) zero::detail::PeerSignal signal;
  // Phase k's payload, in slot k % 2: the peer reads phase k's slot while this rank writes phase
  // k + 1's, and this rank writes phase k + 2's only after the peer signalled k + 1, which it does
  // after its read. Not atomic: only the signal orders it.
  std::uint64_t payload[2] = {0, 0};
};

struct Totals {
  unsigned sleeps = 0;
  unsigned backstop_timeouts = 0;
  unsigned stale_payloads = 0;
};

// `rounds` phases on both sides; every `delay_every` rounds, `delayed` waits `delay` before it
// signals, so that the other falls asleep.
Totals play(Rank& mine, Rank& other, int rounds, int delay_every, bool delayed,
            std::chrono::microseconds delay, int cpu = -1) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  Totals totals;
  for (std::uint64_t k = 1; k <= std::uint64_t(rounds); ++k) {
    if (delayed && delay_every > 0 && k % std::uint64_t(delay_every) == 0)
      std::this_thread::sleep_for(delay);
    mine.payload[k % 2] = k;
    zero::detail::signal_peers(mine.signal, static_cast<std::uint32_t>(k));
    // The rounds stay far below 2^32: the sequence word's low 32 bits never wrap here.
    const auto wait = zero::detail::wait_for_peer(
        other.signal, [&] { return other.signal.sequence.load(std::memory_order_acquire) >= k; });
    totals.sleeps += wait.slept ? 1 : 0;
    totals.backstop_timeouts += wait.backstop_timeouts;
    if (other.payload[k % 2] != k) ++totals.stale_payloads;
  }
  return totals;
}

TEST(PeerSignal, WakesASleepingPeerAndOrdersItsData) {
  Rank a, b;
  Totals from_b;
  std::thread peer([&] { from_b = play(b, a, 20000, 500, true, std::chrono::microseconds(400)); });
  const Totals from_a = play(a, b, 20000, 500, false, {});
  peer.join();
  EXPECT_EQ(from_a.stale_payloads + from_b.stale_payloads, 0u);
  EXPECT_GE(from_a.sleeps, 20u) << "the delayed peer should have sent the waiter to sleep";
  EXPECT_EQ(from_a.backstop_timeouts + from_b.backstop_timeouts, 0u)
      << "a sleeping waiter must be woken by the signal it waits for";
}

TEST(PeerSignal, PeersSharingOneCpu) {
  // More ranks than cores: both on CPU 0, where spinning only delays the peer. The waiter sees
  // that the peer last signalled from its own CPU and sleeps at once.
  Rank a, b;
  Totals from_b;
  std::thread peer([&] { from_b = play(b, a, 2000, 0, false, {}, 0); });
  const Totals from_a = play(a, b, 2000, 0, false, {}, 0);
  peer.join();
  EXPECT_EQ(from_a.stale_payloads + from_b.stale_payloads, 0u);
  EXPECT_GT(from_a.sleeps + from_b.sleeps, 0u);
  EXPECT_EQ(from_a.backstop_timeouts + from_b.backstop_timeouts, 0u);
}

} // namespace
