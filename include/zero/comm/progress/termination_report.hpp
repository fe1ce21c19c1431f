#pragma once
// What a rank was doing when the launcher terminated it.
//
// When one rank fails, mpirun (like most launchers) ends the others with SIGTERM and names only the
// rank that failed. Which collective each survivor was waiting in is what tells a user where the
// job stood, so each progress thread records its current operation here, and a SIGTERM handler
// prints it: "zero: rank 1 of 4 terminated by signal 15 while in all_reduce(...) for 0.2 s". The
// handler is installed only where SIGTERM still has its default action (a program's own handler is
// left alone); it then lets the signal end the process as it would have.
//
// The handler may only touch memory that outlives every communicator and call async-signal-safe
// functions: records live in a static table, each operation in one of two entries, the one being
// rewritten never the one published. Recording costs a few stores per collective, no allocation.

#include "zero/comm/collective.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zero::detail {

class OperationRecord {
 public:
  OperationRecord(int rank, int size) noexcept : slot_(claim(rank, size)) {}
  OperationRecord(const OperationRecord&) = delete;
  OperationRecord& operator=(const OperationRecord&) = delete;
  ~OperationRecord() {
    if (slot_) slot_->taken.store(false, std::memory_order_release);
  }

  // Both begin()s return when the operation began (CLOCK_MONOTONIC, ns), for the watchdog.
  std::int64_t begin(const CollectiveArgs& args) noexcept {
    if (!slot_) return now_ns(); // more communicators than slots: unreported
    Entry& e = next_entry();
    e.kind = args.kind;
    e.dtype = args.dtype;
    e.op = args.op;
    e.root = args.root;
    e.count = args.count;
    e.variable = args.variable_counts();
    e.task[0] = '\0';
    return publish();
  }
  // An operation other than a collective (e.g. "split(1, 0)").
  std::int64_t begin(std::string_view task) noexcept {
    if (!slot_) return now_ns();
    Entry& e = next_entry();
    const std::size_t n = std::min(task.size(), e.task.size() - 1);
    std::copy_n(task.data(), n, e.task.data());
    e.task[n] = '\0';
    return publish();
  }
  void end() noexcept {
    if (slot_) slot_->running.store(false, std::memory_order_release);
  }

 private:
  struct Entry {
    Collective kind = Collective::barrier;
    DType dtype = DType::float32;
    ReduceOp op = ReduceOp::sum;
    int root = 0;
    std::size_t count = 0;
    bool variable = false;
    std::array<char, 64> task{}; // set: the operation is this task, not a collective
  };
  struct Slot {
    std::atomic<bool> taken{false};
    int rank = 0;
    int size = 0;
    std::atomic<bool> running{false};
    std::atomic<int> published{-1}; // which entry is current; -1: no operation yet
    std::atomic<std::int64_t> since_ns{0};
    std::array<Entry, 2> entries{};
  };

  Entry& next_entry() noexcept {
    const int next = slot_->published.load(std::memory_order_relaxed) == 0 ? 1 : 0;
    return slot_->entries[static_cast<std::size_t>(next)];
  }
  std::int64_t publish() noexcept {
    const std::int64_t now = now_ns();
    const int next = slot_->published.load(std::memory_order_relaxed) == 0 ? 1 : 0;
    slot_->since_ns.store(now, std::memory_order_relaxed);
    slot_->published.store(next, std::memory_order_release);
    slot_->running.store(true, std::memory_order_release);
    return now;
  }
  // Communicators alive at once in one process: the world, the engine's groups, a few more.
  static constexpr std::size_t max_slots = 64;

  static std::array<Slot, max_slots>& slots() noexcept {
    static std::array<Slot, max_slots> table;
    return table;
  }

  static Slot* claim(int rank, int size) noexcept {
    install_handler();
    for (Slot& s : slots()) {
      bool expected = false;
      if (!s.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
      s.rank = rank;
      s.size = size;
      s.running.store(false, std::memory_order_relaxed);
      s.published.store(-1, std::memory_order_release);
      return &s;
    }
    return nullptr; // more communicators than slots: those go unreported
  }

  static void install_handler() noexcept {
    static const bool installed = [] {
      struct sigaction current {};
      if (::sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL)
        return false;
      struct sigaction report {};
      report.sa_handler = &on_signal;
      sigemptyset(&report.sa_mask);
      report.sa_flags = SA_RESETHAND; // the second SIGTERM, or our raise(), ends the process
      return ::sigaction(SIGTERM, &report, nullptr) == 0;
    }();
    (void)installed;
  }

  static void on_signal(int signal) {
    const int saved_errno = errno;
    // The communicators with an operation in flight; failing that, one line for the rank.
    bool said = false;
    for (const bool in_flight : {true, false}) {
      for (const Slot& s : slots()) {
        if (said && !in_flight) break;
        if (!s.taken.load(std::memory_order_acquire) ||
            s.running.load(std::memory_order_acquire) != in_flight)
          continue;
        report(s, signal, in_flight);
        said = true;
      }
    }
    errno = saved_errno;
    ::raise(signal); // the default action now: the process ends as the launcher meant
  }

  static void report(const Slot& s, int signal, bool in_flight) noexcept {
    const int entry = s.published.load(std::memory_order_acquire);
    Line line;
    line.add("zero: rank ").add(s.rank).add(" of ").add(s.size).add(" terminated by signal ");
    line.add(signal);
    if (entry < 0) {
      line.add(" before its first collective");
    } else if (in_flight) {
      const std::int64_t ms = (now_ns() - s.since_ns.load(std::memory_order_relaxed)) / 1000000;
      line.add(" while in ").add(s.entries[static_cast<std::size_t>(entry)]);
      line.add(" for ").add(ms).add(" ms");
    } else {
      line.add(" between collectives (the last was ");
      line.add(s.entries[static_cast<std::size_t>(entry)]).add(")");
    }
    line.add("\n").write();
  }

  static std::int64_t now_ns() noexcept {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
  }

  // A line built without allocating or locking (snprintf is not async-signal-safe).
  class Line {
   public:
    Line& add(const char* text) noexcept {
      while (*text != '\0' && used_ < buffer_.size())
        buffer_[used_++] = *text++;
      return *this;
    }
    Line& add(std::int64_t value) noexcept {
      std::array<char, 24> digits{};
      std::size_t n = 0;
      const bool negative = value < 0;
      auto magnitude =
          static_cast<std::uint64_t>(negative ? -(value + 1) : value) + (negative ? 1 : 0);
      do {
        digits[n++] = static_cast<char>('0' + magnitude % 10);
        magnitude /= 10;
      } while (magnitude != 0);
      if (negative) add("-");
      while (n > 0 && used_ < buffer_.size())
        buffer_[used_++] = digits[--n];
      return *this;
    }
    Line& add(int value) noexcept { return add(static_cast<std::int64_t>(value)); }
    // As CollectiveArgs::describe() words it: "all_reduce(1024 x float, sum)".
    Line& add(const Entry& e) noexcept {
      if (e.task[0] != '\0') return add(e.task.data());
      add(to_string(e.kind)).add("(");
      if (e.kind != Collective::barrier) {
        if (e.variable) add("blocks of different sizes, this rank's ");
        add(static_cast<std::int64_t>(e.count)).add(" x ").add(to_string(e.dtype));
        if (uses_reduce_op(e.kind)) add(", ").add(to_string(e.op));
        if (uses_root(e.kind)) add(", root ").add(e.root);
      }
      return add(")");
    }
    void write() const noexcept {
      std::size_t done = 0;
      while (done < used_) {
        const ssize_t n = ::write(STDERR_FILENO, buffer_.data() + done, used_ - done);
        if (n <= 0) return;
        done += static_cast<std::size_t>(n);
      }
    }

   private:
    std::array<char, 320> buffer_{};
    std::size_t used_ = 0;
  };

  Slot* slot_;
};

} // namespace zero::detail
