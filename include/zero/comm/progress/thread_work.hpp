#pragma once
// The WorkState of an operation run by a progress thread. wait() spins briefly (most collectives
// finish within microseconds of being waited for) and then sleeps on a condition variable.

#include "zero/comm/collective.hpp"
#include "zero/core/work.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace zero::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#endif
}

class ThreadWork final : public WorkState {
 public:
  explicit ThreadWork(const CollectiveArgs& args) : args_(args) {}
  // A task other than a collective (e.g. MPI_Comm_split), ordered with the collectives.
  ThreadWork(std::string label, std::function<void()> task)
      : label_(std::move(label)), task_(std::move(task)) {}

  // Called once by the progress thread.
  void complete(std::exception_ptr error) noexcept {
    {
      std::lock_guard lock(mutex_);
      error_ = std::move(error);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

  void wait() override {
    for (int spin = 0; spin < 64 && !done_.load(std::memory_order_acquire); ++spin)
      cpu_relax();
    if (!done_.load(std::memory_order_acquire)) {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire); });
    }
    rethrow();
  }
  bool test() override {
    if (!done_.load(std::memory_order_acquire)) return false;
    rethrow();
    return true;
  }
  std::string description() const override { return task_ ? label_ : args_.describe(); }
  const CollectiveArgs& args() const noexcept { return args_; }
  const std::function<void()>& task() const noexcept { return task_; }

 private:
  void rethrow() {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }

  CollectiveArgs args_;
  std::string label_;
  std::function<void()> task_;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
};

} // namespace zero::detail
