#pragma once
// Work handles for ShardedTensor operations that finish on the host after their collective: the
// copy out of a staging buffer runs in wait() (or in the test() that observes completion), and
// the staging buffers live in the handle until then, so callers keep only their own buffers alive.

#include "zero/core/work.hpp"

#include <memory>
#include <string>
#include <utility>

namespace zero::detail {

template <class Then>
class ContinuedWork final : public WorkState {
 public:
  ContinuedWork(Work inner, Then then, std::string description)
      : inner_(std::move(inner)), then_(std::move(then)), description_(std::move(description)) {}

  void wait() override {
    inner_.wait();
    finish();
  }
  bool test() override {
    if (!inner_.test()) return false;
    finish();
    return true;
  }
  std::string description() const override { return description_; }

 private:
  void finish() {
    if (done_) return;
    done_ = true;
    then_();
  }

  Work inner_;
  Then then_;
  std::string description_;
  bool done_ = false;
};

// `inner`, then `then()` on the thread that observes completion.
template <class Then>
Work continue_with(Work inner, Then then, std::string description) {
  return Work(std::make_shared<ContinuedWork<Then>>(std::move(inner), std::move(then),
                                                    std::move(description)));
}

// A handle for an operation that completed inside the call (local copies).
inline Work completed(std::string description) {
  return continue_with(
      Work(), [] {}, std::move(description));
}

} // namespace zero::detail
