#pragma once
// How a rank tells its peers on the node that it reached a phase, and how a peer waits for that,
// through a word in shared memory (docs/collective-benchmark.md, "When a core is busy").
//
// The waiting side spins briefly, then sleeps on a futex that the signalling side wakes. It never
// calls sched_yield: with another busy thread on its core (a trainer's compute, a second job),
// Linux's scheduler hands that thread the core for the rest of its slice, milliseconds, at every
// yield, while the peer on the other core has long signalled. With the old spin-yield-sleep wait a
// 2-rank 16 MB all_reduce beside one busy loop made 145 000 sched_yield calls and 47 000 context
// switches in 53 calls, and ran at 0.3-0.5 GB/s; sleeping on the futex instead gave 3-5 GB/s.
//
// Spinning pays only while the peer runs elsewhere: a peer that last signalled from this waiter's
// own CPU (more ranks than cores) needs that CPU to arrive, so the waiter sleeps at once.
//
// A sleeper is woken by the FUTEX_WAKE of the signal it waits for. The Dekker pair (sleepers
// raised, then the sequence read; the sequence stored, then sleepers read, all sequentially
// consistent) guarantees that either the waiter sees the new sequence or the signaller sees the
// sleeper; FUTEX_WAIT itself rechecks the word in the kernel. A backstop timeout (50 ms) rechecks
// anyway; tests/comm/peer_signal_test.cpp checks that no wait ever needs it.

#include "zero/comm/progress/thread_work.hpp" // cpu_relax

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

namespace zero::detail {

// Lives in memory shared by the ranks (a non-private futex, so it works across processes).
struct PeerSignal {
  std::atomic<std::uint32_t> sequence{0}; // low 32 bits of the last phase signalled
  std::atomic<std::uint32_t> sleepers{0}; // peers asleep on `sequence`
  std::atomic<std::int32_t> cpu{-1};      // the CPU the owner signalled from last
  std::uint32_t reserved = 0;
};
static_assert(sizeof(PeerSignal) == 16 && std::atomic<std::uint32_t>::is_always_lock_free);

// Spinning longer than this rarely pays: a peer that has not arrived within it is usually
// descheduled, and the spinner then only takes the core from other work. (Measured at 5-200 us,
// docs/collective-benchmark.md: 50 us was as fast as any at 2 ranks with a busy core and at 3
// ranks on 2 cores.)
inline constexpr std::int64_t peer_spin_ns = 50'000;

namespace peer_signal_detail {

inline std::int64_t monotonic_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

inline std::uint32_t* futex_word(std::atomic<std::uint32_t>& word) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  return reinterpret_cast<std::uint32_t*>(&word);
}

} // namespace peer_signal_detail

// Publishes `sequence` (after whatever the caller stored before it, release) and wakes sleepers.
inline void signal_peers(PeerSignal& mine, std::uint32_t sequence) noexcept {
  mine.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  mine.sequence.store(sequence, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) != 0)
    syscall(SYS_futex, peer_signal_detail::futex_word(mine.sequence), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

// How a wait went, for tests.
struct PeerWait {
  bool slept = false;
  unsigned backstop_timeouts = 0; // FUTEX_WAITs that ended on the backstop, not on a wake-up
};

// Returns once `arrived()` holds; `arrived` reads what the owner of `other` published before it
// called signal_peers (it must use acquire loads).
template <class Arrived>
PeerWait wait_for_peer(PeerSignal& other, Arrived arrived) noexcept {
  PeerWait outcome;
  if (arrived()) return outcome;
  const bool peer_needs_my_cpu = other.cpu.load(std::memory_order_relaxed) == sched_getcpu();
  if (!peer_needs_my_cpu) {
    // Most waits end within the first few hundred nanoseconds: read the clock only after them.
    std::int64_t start = 0;
    for (unsigned spin = 1;; ++spin) {
      cpu_relax();
      if (arrived()) return outcome;
      if (spin % 64 != 0) continue;
      const std::int64_t now = peer_signal_detail::monotonic_ns();
      if (start == 0)
        start = now;
      else if (now - start > peer_spin_ns)
        break;
    }
  }
  outcome.slept = true;
  other.sleepers.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = other.sequence.load(std::memory_order_seq_cst);
    if (arrived()) break;
    timespec backstop{0, 50'000'000};
    if (syscall(SYS_futex, peer_signal_detail::futex_word(other.sequence), FUTEX_WAIT, seen,
                &backstop, nullptr, 0) != 0 &&
        errno == ETIMEDOUT)
      ++outcome.backstop_timeouts;
  }
  other.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return outcome;
}

} // namespace zero::detail
