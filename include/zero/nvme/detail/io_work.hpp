#pragma once
// The WorkState of one read or write of a swap file. The I/O threads each carry out a slice of
// it and report with part_done(); the last one completes the Work, with the first error any slice
// met. wait() sleeps on a condition variable: a transfer takes milliseconds, so spinning would
// only take the core from the caller's computation.

#include "zero/core/work.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace zero::detail {

// Seconds during which at least one transfer of a tier was queued or in flight: how long the
// disk was kept busy, for IoStats::busy_seconds.
class BusyClock {
 public:
  void begin() {
    std::lock_guard lock(mutex_);
    if (outstanding_++ == 0) since_ = std::chrono::steady_clock::now();
  }
  void end() noexcept {
    std::lock_guard lock(mutex_);
    if (--outstanding_ == 0) busy_ += std::chrono::steady_clock::now() - since_;
  }
  double seconds() const {
    std::lock_guard lock(mutex_);
    auto busy = busy_;
    if (outstanding_ > 0) busy += std::chrono::steady_clock::now() - since_;
    return std::chrono::duration<double>(busy).count();
  }

 private:
  mutable std::mutex mutex_;
  long outstanding_ = 0;
  std::chrono::steady_clock::time_point since_{};
  std::chrono::steady_clock::duration busy_{};
};

class IoWork final : public WorkState {
 public:
  IoWork(std::string description, int parts, std::shared_ptr<BusyClock> clock)
      : description_(std::move(description)), remaining_(parts), clock_(std::move(clock)) {
    clock_->begin();
  }

  // Called once per slice, from the I/O thread that carried it out.
  void part_done(std::exception_ptr error) noexcept {
    if (error) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::move(error);
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    clock_->end();
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
  }

  void wait() override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool test() override {
    std::lock_guard lock(mutex_);
    if (!done_) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  std::string description() const override { return description_; }

 private:
  std::string description_;
  std::atomic<int> remaining_;
  std::shared_ptr<BusyClock> clock_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

} // namespace zero::detail
