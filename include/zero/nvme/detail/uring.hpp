#pragma once
// Uring: an io_uring with a doorbell, the mechanics under an I/O thread. The thread sleeps in one
// place, waiting for completions; a read of an eventfd (the doorbell) is always in flight in the
// same ring, so another thread wakes it by ringing, and no wake-up can be lost between checking
// for work and going to sleep.

#include "zero/core/error.hpp"
#include "zero/nvme/detail/swap_file_state.hpp"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

namespace zero::detail {

class Uring {
 public:
  // Room for `requests` in flight, and the doorbell.
  explicit Uring(unsigned requests) {
    if (const int rc = ::io_uring_queue_init(requests + 1, &ring_, 0); rc < 0)
      fail(ErrorKind::io, "the NVMe tier needs io_uring, which the kernel refused (" +
                              system_text(-rc) +
                              "): it needs Linux 5.6 or later, not disabled by "
                              "kernel.io_uring_disabled or a container's seccomp profile");
    doorbell_fd_ = ::eventfd(0, EFD_CLOEXEC); // blocking: io_uring then waits for it to be written
    if (doorbell_fd_ < 0) {
      const int error = errno;
      ::io_uring_queue_exit(&ring_);
      fail(ErrorKind::io, "cannot create the NVMe tier's eventfd: " + system_text(error));
    }
  }
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;
  ~Uring() {
    ::io_uring_queue_exit(&ring_); // cancels the doorbell's read
    ::close(doorbell_fd_);
  }

  // From any thread: wakes the thread waiting in wait_and_reap().
  void ring_doorbell() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(doorbell_fd_, &one, sizeof one);
  }

  // The rest only from the I/O thread.
  void arm_doorbell() {
    io_uring_sqe* sqe = next_sqe();
    ::io_uring_prep_read(sqe, doorbell_fd_, &doorbell_count_, sizeof doorbell_count_, 0);
    ::io_uring_sqe_set_data64(sqe, doorbell_tag);
  }

  // An entry for a request tagged `tag`, submitted by the next submit() or wait_and_reap(). The
  // ring has a slot for every request and the doorbell, and all are submitted between two waits,
  // so it is full only after a refused submission, retried here.
  io_uring_sqe* next_sqe(std::uint64_t tag = doorbell_tag) {
    io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      submit();
      sqe = ::io_uring_get_sqe(&ring_);
    }
    if (sqe == nullptr) abort_with("the io_uring submission queue is full");
    ::io_uring_sqe_set_data64(sqe, tag);
    ++unsubmitted_;
    return sqe;
  }

  void submit() {
    if (unsubmitted_ == 0) return;
    const int rc = ::io_uring_submit(&ring_);
    if (rc >= 0)
      unsubmitted_ = 0;
    else if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) // retried by the next call
      abort_with("io_uring_submit failed: " + system_text(-rc));
  }

  // Submits what is queued, sleeps until at least one completion (or the doorbell), and reaps.
  template <class OnCompletion>
  void wait_and_reap(OnCompletion&& on_completion) {
    io_uring_cqe* cqe = nullptr;
    const int rc = unsubmitted_ > 0 ? ::io_uring_submit_and_wait(&ring_, 1)
                                    : ::io_uring_wait_cqe(&ring_, &cqe);
    if (rc >= 0) unsubmitted_ = 0;
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
      abort_with("waiting for io_uring completions failed: " + system_text(-rc));
    reap(on_completion);
  }

  bool completions_ready() const noexcept { return ::io_uring_cq_ready(&ring_) > 0; }

  // Calls on_completion(tag, result) for each request completed so far, without waiting;
  // re-arms the doorbell.
  template <class OnCompletion>
  void reap(OnCompletion&& on_completion) {
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (cqe->user_data == doorbell_tag) {
        rang_ = true;
        arm_doorbell();
      } else
        on_completion(cqe->user_data, cqe->res);
      ++seen;
    }
    ::io_uring_cq_advance(&ring_, seen);
  }

  // Whether the doorbell rang since the last call: then there may be new work, and the thread
  // must look for it before it sleeps again.
  bool take_doorbell() noexcept { return std::exchange(rang_, false); }

 private:
  static constexpr std::uint64_t doorbell_tag = ~std::uint64_t{0};

  // Only a broken ring gets here: its queued requests can be neither run nor withdrawn, and
  // their buffers may be written at any time, so going on would be worse than stopping.
  [[noreturn]] static void abort_with(const std::string& message) noexcept {
    log_error("NVMe tier I/O thread: " + message);
    std::abort();
  }

  io_uring ring_{};
  int doorbell_fd_ = -1;
  std::uint64_t doorbell_count_ = 0;
  int unsubmitted_ = 0;
  bool rang_ = false;
};

} // namespace zero::detail
