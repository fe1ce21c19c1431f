#pragma once
// Work: the handle every non-blocking collective returns. The buffers of the call must stay valid
// until wait() returns or test() returns true. Errors of the operation (a mismatch between ranks,
// a failed MPI or NCCL call) are rethrown by wait()/test().
//
// Dropping a handle whose completion was never observed is a bug that would free buffers still in
// flight, so the destructor waits for the operation and then terminates with a message naming it,
// as std::thread does for a forgotten join. During stack unwinding it only waits.

#include "zero/core/error.hpp"

#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

namespace zero {

namespace detail {
// What a backend implements: completion of one operation.
class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual void wait() = 0;                     // blocks until complete; rethrows its error
  virtual bool test() = 0;                     // true once complete; rethrows its error then
  virtual std::string description() const = 0; // e.g. "all_reduce(1024 x float, sum)"
};
} // namespace detail

class [[nodiscard]] Work {
 public:
  Work() noexcept = default; // an empty handle: nothing in flight
  explicit Work(std::shared_ptr<detail::WorkState> state) noexcept : state_(std::move(state)) {}

  Work(Work&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  Work& operator=(Work&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work() { drop(); }

  // Blocks until the operation completed; rethrows its error.
  void wait() {
    if (!state_) return;
    auto state = std::exchange(state_, nullptr);
    state->wait();
  }

  // True when the operation completed (the handle is then empty); rethrows its error, which also
  // counts as observing the completion.
  bool test() {
    if (!state_) return true;
    bool done = false;
    try {
      done = state_->test();
    } catch (...) {
      state_.reset();
      throw;
    }
    if (done) state_.reset();
    return done;
  }

  // Whether the handle still refers to an operation whose completion was not observed.
  bool pending() const noexcept { return state_ != nullptr; }

 private:
  void drop() noexcept {
    if (!state_) return;
    auto state = std::exchange(state_, nullptr);
    const bool unwinding = std::uncaught_exceptions() > 0;
    try {
      state->wait();
    } catch (const std::exception& e) {
      if (!unwinding) detail::log_error(std::string("operation failed: ") + e.what());
    } catch (...) {
    }
    if (unwinding) return;
    detail::log_error("Work for " + state->description() +
                      " was destroyed without wait() or a successful test(); its buffers could "
                      "have been freed while in flight. Call wait() on every handle.");
    std::terminate();
  }

  std::shared_ptr<detail::WorkState> state_;
};

namespace detail {
// Waits for `work` where nothing can be done about an error (destructors): it is logged.
inline void wait_quietly(Work& work) noexcept {
  try {
    work.wait();
  } catch (const std::exception& e) {
    log_error(std::string("operation failed while being cleaned up: ") + e.what());
  } catch (...) {
    log_error("operation failed while being cleaned up");
  }
}
} // namespace detail

// Waits for every handle in a range; the first error is rethrown after all have completed. The
// last handle is waited for first: a communicator completes its operations in order, so the caller
// sleeps once instead of being woken for every operation (on a busy core, each wake-up takes time
// from the thread doing the communication).
template <class Range>
void wait_all(Range& works) {
  std::exception_ptr first;
  auto wait_one = [&](Work& w) {
    try {
      w.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  };
  auto last = std::end(works);
  if (last != std::begin(works)) wait_one(*std::prev(last));
  for (Work& w : works)
    wait_one(w);
  if (first) std::rethrow_exception(first);
}

} // namespace zero
