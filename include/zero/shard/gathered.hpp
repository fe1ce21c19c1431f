#pragma once
// Gathered<T>: the whole of a ShardedTensor, gathered into a buffer this guard owns. The gather
// runs in the background until wait() (or the first access, which waits); release(), or leaving
// the scope, frees the buffer, so the memory of a gathered tensor exists only while it is used,
// as ZeRO stage 3 wants for parameters:
//
//   {
//     auto weights = tensor.gather(comm);   // all-gather starts
//     ...                                   // overlap other work
//     forward(weights.view());              // waits, then reads
//   }                                       // freed here

#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <utility>

namespace zero {

template <class T, class Space = host>
class Gathered {
 public:
  Gathered() noexcept = default;
  // Adopts `storage` (at least `numel` elements) and the work that fills it.
  Gathered(Buffer<T, Space> storage, std::size_t numel, Work work,
           std::shared_ptr<const ShardLayout> layout) noexcept
      : storage_(std::move(storage)), numel_(numel), work_(std::move(work)),
        layout_(std::move(layout)) {}

  Gathered(Gathered&& other) noexcept
      : storage_(std::move(other.storage_)), numel_(std::exchange(other.numel_, 0)),
        work_(std::move(other.work_)), layout_(std::move(other.layout_)) {}
  Gathered& operator=(Gathered&& other) noexcept {
    if (this != &other) {
      release();
      storage_ = std::move(other.storage_);
      numel_ = std::exchange(other.numel_, 0);
      work_ = std::move(other.work_);
      layout_ = std::move(other.layout_);
    }
    return *this;
  }
  Gathered(const Gathered&) = delete;
  Gathered& operator=(const Gathered&) = delete;
  ~Gathered() { release(); }

  // Completes the gather; rethrows its error.
  void wait() { work_.wait(); }
  // True once the gather completed; rethrows its error.
  bool test() { return work_.test(); }

  // The gathered tensor: numel() elements in parameter order. Waits for the gather first.
  View<T, Space> view() {
    require_held("view");
    wait();
    return storage_.view().first(numel_);
  }
  // Parameter p of the gathered tensor. Waits for the gather first.
  View<T, Space> parameter(std::size_t p) {
    require_held("parameter");
    const Range range = layout_->element_range(p);
    return view().subview(range.begin, range.size());
  }
  std::size_t numel() const noexcept { return numel_; }
  // Whether the guard still holds a buffer (false after release() or a move).
  bool holds() const noexcept { return layout_ != nullptr; }

  // Frees the buffer now, waiting for a gather still in flight (whose error is logged, since
  // release also runs in destructors).
  void release() noexcept {
    if (work_.pending()) {
      try {
        work_.wait();
      } catch (const std::exception& e) {
        detail::log_error(std::string("gather released with an error: ") + e.what());
      } catch (...) {
        detail::log_error("gather released with an unknown error");
      }
    }
    storage_ = Buffer<T, Space>();
    numel_ = 0;
    layout_.reset();
  }

 private:
  void require_held(const char* what) const {
    if (!holds())
      fail(ErrorKind::invalid_argument,
           std::string("Gathered::") + what + ": the gathered buffer was released");
  }

  Buffer<T, Space> storage_;
  std::size_t numel_ = 0;
  Work work_;
  std::shared_ptr<const ShardLayout> layout_;
};

} // namespace zero
