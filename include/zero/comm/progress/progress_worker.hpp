#pragma once
// One thread per communicator that runs its collectives in submission order (the order MPI and
// every rank agree on), so that the caller's thread computes while communication progresses.
// A watchdog thread reports an operation that runs past the timeout: the sign of a rank that
// skipped or mismatched a collective, which would otherwise hang the job forever. Before that, it
// offers every slow operation to `on_slow` twice a second (the communicator looks for a lost or
// departed peer), and the operation in progress is recorded for the termination report. Operations
// are numbered from 1 in the order they run, the same on every rank of a correct program: a peer
// that left after completing fewer than the one running will never take part in it.

#include "zero/comm/collective.hpp"
#include "zero/comm/progress/termination_report.hpp"
#include "zero/comm/progress/thread_work.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace zero::detail {

struct Watchdog {
  // `operation`: the running operation's number (1 for the first this worker ran).
  using OnLate =
      std::function<void(const std::string& what, double seconds, std::uint64_t operation)>;
  double timeout_seconds = 300;
  OnLate on_timeout; // the running operation is past the timeout (expected not to return)
  OnLate on_slow;    // it has run longer than `slow_seconds`; called again every period
  double slow_seconds = 0.5;
  int rank = 0; // how the termination report names this communicator's rank
  int size = 1;
};

class ProgressWorker {
 public:
  using Execute = std::function<void(const CollectiveArgs&)>;

  ProgressWorker(Execute execute, Watchdog watchdog)
      : execute_(std::move(execute)), watchdog_options_(std::move(watchdog)),
        timeout_(std::chrono::duration<double>(watchdog_options_.timeout_seconds)),
        record_(watchdog_options_.rank, watchdog_options_.size) {
    worker_ = std::thread([this] { run(); });
    watchdog_ = std::thread([this] { watch(); });
  }

  ProgressWorker(const ProgressWorker&) = delete;
  ProgressWorker& operator=(const ProgressWorker&) = delete;

  ~ProgressWorker() { stop(); }

  // Lets the queued operations finish, then stops both threads. Nothing may be submitted after.
  void stop() {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    worker_.join();
    {
      std::lock_guard lock(watch_mutex_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    watchdog_.join();
  }

  std::shared_ptr<ThreadWork> enqueue(const CollectiveArgs& args) {
    return push(std::make_shared<ThreadWork>(args));
  }

  // Nothing queued or running: an operation run now, on the caller's thread, keeps the order.
  // (Only the thread that submits calls this, so nothing can be queued meanwhile.)
  bool idle() const noexcept { return unfinished_.load(std::memory_order_acquire) == 0; }

  // Runs `args` on the calling thread, watched like a queued operation; requires idle(). Errors
  // are kept in the returned (completed) work, as for a queued one.
  std::shared_ptr<ThreadWork> run_here(const CollectiveArgs& args) {
    auto work = std::make_shared<ThreadWork>(args);
    unfinished_.fetch_add(1, std::memory_order_acq_rel);
    execute_watched(work);
    return work;
  }

  // Runs `task` on the progress thread after everything queued before it, and waits for it.
  void run_and_wait(std::string label, std::function<void()> task) {
    push(std::make_shared<ThreadWork>(std::move(label), std::move(task)))->wait();
  }

  // How many operations ran to their end (with or without an error).
  std::uint64_t operations_completed() const noexcept {
    return completed_.load(std::memory_order_acquire);
  }

 private:
  std::shared_ptr<ThreadWork> push(std::shared_ptr<ThreadWork> work) {
    unfinished_.fetch_add(1, std::memory_order_acq_rel);
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(work);
      queued_.fetch_add(1, std::memory_order_release);
    }
    queue_cv_.notify_one();
    return work;
  }

  void run() {
    for (;;) {
      std::shared_ptr<ThreadWork> work = next();
      if (!work) return;
      execute_watched(work);
    }
  }

  // Runs one operation where the watchdog and the termination report see it, then completes it.
  void execute_watched(const std::shared_ptr<ThreadWork>& work) {
    const std::int64_t began =
        work->task() ? record_.begin(work->description()) : record_.begin(work->args());
    set_running(work, began, completed_.load(std::memory_order_relaxed) + 1);
    std::exception_ptr error;
    try {
      if (work->task())
        work->task()();
      else
        execute_(work->args());
    } catch (...) {
      error = std::current_exception();
    }
    record_.end();
    set_running(nullptr, 0, 0);
    completed_.fetch_add(1, std::memory_order_acq_rel);
    unfinished_.fetch_sub(1, std::memory_order_acq_rel);
    work->complete(error);
  }

  std::shared_ptr<ThreadWork> next() {
    // Back-to-back collectives are common (a bucket after a bucket): spin a little before sleeping.
    for (int spin = 0; spin < 4000 && queued_.load(std::memory_order_acquire) == 0; ++spin)
      cpu_relax();
    std::unique_lock lock(mutex_);
    queue_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return nullptr;
    auto work = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    return work;
  }

  void watch() {
    // Twice a second: a lost or departed peer is named within about a second.
    const auto period =
        std::min<std::chrono::duration<double>>(timeout_ / 4, std::chrono::milliseconds(500));
    std::unique_lock lock(watch_mutex_);
    while (!watch_cv_.wait_for(lock, period, [&] { return watch_stop_; })) {
      std::shared_ptr<ThreadWork> running;
      std::int64_t since = 0;
      std::uint64_t number = 0;
      {
        std::lock_guard running_lock(running_mutex_);
        running = running_;
        since = running_since_;
        number = running_number_;
      }
      if (!running) continue;
      const double seconds = static_cast<double>(now_ns() - since) * 1e-9;
      if (seconds > timeout_.count())
        watchdog_options_.on_timeout(running->description(), seconds, number);
      else if (seconds > watchdog_options_.slow_seconds && watchdog_options_.on_slow)
        watchdog_options_.on_slow(running->description(), seconds, number);
    }
  }

  void set_running(std::shared_ptr<ThreadWork> work, std::int64_t since_ns, std::uint64_t number) {
    std::lock_guard lock(running_mutex_);
    running_ = std::move(work);
    running_since_ = since_ns;
    running_number_ = number;
  }

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  Execute execute_;
  Watchdog watchdog_options_;
  std::chrono::duration<double> timeout_;
  OperationRecord record_; // for the termination report

  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<ThreadWork>> queue_;
  std::atomic<int> queued_{0};
  std::atomic<int> unfinished_{0}; // queued or running, on either thread
  std::atomic<std::uint64_t> completed_{0};
  bool stopping_ = false;

  std::mutex running_mutex_; // the operation in progress, for the watchdog
  std::shared_ptr<ThreadWork> running_;
  std::int64_t running_since_ = 0;
  std::uint64_t running_number_ = 0;

  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;

  std::thread worker_;
  std::thread watchdog_;
};

} // namespace zero::detail
