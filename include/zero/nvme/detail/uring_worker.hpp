#pragma once
// UringWorker: one I/O thread and its io_uring. Callers enqueue slices of transfers and go back to
// computing; the thread splits each slice into requests of block_size bytes, keeps up to
// queue_depth of them in flight, continues short transfers where they stopped, records checksums
// before a write is submitted and checks them when a read completes, and reports each slice to its
// Work. Completions must be reaped while the caller computes, or requests beyond queue_depth would
// wait for the caller's next wait() and the disk would sit idle: hence a thread, not a poll.

#include "zero/core/error.hpp"
#include "zero/nvme/aio_options.hpp"
#include "zero/nvme/detail/io_work.hpp"
#include "zero/nvme/detail/swap_file_state.hpp"
#include "zero/nvme/detail/uring.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace zero::detail {

enum class IoDirection { read, write };

// A contiguous part of one transfer, carried out by one worker.
struct IoSlice {
  std::shared_ptr<IoWork> work;
  std::shared_ptr<SwapFileState> file;
  IoDirection direction = IoDirection::read;
  std::size_t file_offset = 0;
  std::byte* data = nullptr;
  std::size_t length = 0;
};

// Bytes and requests carried out, summed over the workers of a tier.
struct IoCounters {
  std::atomic<std::uint64_t> bytes_read{0};
  std::atomic<std::uint64_t> bytes_written{0};
  std::atomic<std::uint64_t> read_requests{0};
  std::atomic<std::uint64_t> write_requests{0};
};

class UringWorker {
 public:
  UringWorker(const AioOptions& options, IoCounters& counters)
      : options_(options), counters_(counters), ring_(static_cast<unsigned>(options.queue_depth)),
        requests_(static_cast<std::size_t>(options.queue_depth)) {
    for (std::size_t i = requests_.size(); i-- > 0;)
      free_requests_.push_back(i);
    thread_ = std::thread([this] { run(); });
  }
  UringWorker(const UringWorker&) = delete;
  UringWorker& operator=(const UringWorker&) = delete;

  // Carries out everything enqueued, then stops the thread.
  ~UringWorker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ring_.ring_doorbell();
    thread_.join();
  }

  void enqueue(IoSlice slice) {
    {
      std::lock_guard lock(mutex_);
      incoming_.push_back(std::move(slice));
    }
    ring_.ring_doorbell();
  }

 private:
  struct Active {
    IoSlice slice;
    std::size_t issued = 0;   // bytes handed to requests so far
    int in_flight = 0;        // requests not yet settled: in the ring, or read and not yet checked
    std::exception_ptr error; // the first one; no further requests are issued after it
    std::list<Active>::iterator self;
  };
  struct Request {
    Active* active = nullptr;
    std::size_t offset = 0; // within the slice
    std::size_t length = 0;
    std::size_t done = 0; // bytes transferred so far: a short transfer continues from here
  };
  // A completed read whose checksums are still to be checked.
  struct Unchecked {
    Active* active;
    std::size_t offset; // within the slice
    std::size_t length;
  };
  struct Completion {
    UringWorker* worker;
    void operator()(std::uint64_t tag, int result) const {
      worker->complete(static_cast<std::size_t>(tag), result);
    }
  };
  // Checksumming a write delays its submission; past this many bytes, what was checksummed is
  // submitted rather than left waiting for the rest of the batch.
  static constexpr std::size_t submit_after_checksummed = std::size_t{256} << 10;

  void run() noexcept {
    ring_.arm_doorbell();
    for (;;) {
      ring_.take_doorbell(); // what it announced is taken now
      const bool stopping = take_incoming();
      issue();
      submit();
      // Reads are checked after the requests that replace them were submitted: the disk works
      // while the thread hashes.
      check_reads();
      if (stopping && active_.empty()) return;
      if (ring_.take_doorbell()) continue; // it rang while reads were checked
      checksummed_ = 0;                    // submitted by the wait
      ring_.wait_and_reap(Completion{this});
    }
  }

  bool take_incoming() {
    std::lock_guard lock(mutex_);
    for (IoSlice& slice : incoming_) {
      Active& active = active_.emplace_back();
      active.slice = std::move(slice);
      active.self = std::prev(active_.end());
    }
    incoming_.clear();
    return stopping_;
  }

  // Hands out requests in submission order, up to queue_depth in flight. Without overlap_events a
  // batch is submitted only once the previous one has completed entirely.
  void issue() {
    if (!options_.overlap_events && in_flight_ > 0) return;
    for (Active& active : active_) {
      while (!active.error && active.issued < active.slice.length && !free_requests_.empty()) {
        const std::size_t index = free_requests_.back();
        free_requests_.pop_back();
        Request& request = requests_[index];
        request = {&active, active.issued,
                   std::min(options_.block_size, active.slice.length - active.issued), 0};
        active.issued += request.length;
        ++active.in_flight;
        ++in_flight_;
        const IoSlice& slice = active.slice;
        ChecksumTable* sums = slice.file->checksums();
        if (sums && slice.direction == IoDirection::write) {
          sums->record(slice.file_offset + request.offset, slice.data + request.offset,
                       request.length);
          checksummed_ += request.length;
        }
        prepare(index);
        if (options_.single_submit || checksummed_ >= submit_after_checksummed) submit();
      }
      if (free_requests_.empty()) return;
    }
  }

  // Queues (the rest of) a request in the ring.
  void prepare(std::size_t index) {
    const Request& request = requests_[index];
    const IoSlice& slice = request.active->slice;
    std::byte* address = slice.data + request.offset + request.done;
    const auto length = static_cast<unsigned>(request.length - request.done);
    const std::uint64_t at = slice.file_offset + request.offset + request.done;
    io_uring_sqe* sqe = ring_.next_sqe(index);
    if (slice.direction == IoDirection::read) {
      ::io_uring_prep_read(sqe, slice.file->fd(), address, length, at);
      counters_.read_requests.fetch_add(1, std::memory_order_relaxed);
    } else {
      ::io_uring_prep_write(sqe, slice.file->fd(), address, length, at);
      counters_.write_requests.fetch_add(1, std::memory_order_relaxed);
    }
  }

  void submit() {
    ring_.submit();
    checksummed_ = 0;
  }

  void complete(std::size_t index, int result) {
    Request& request = requests_[index];
    const IoSlice& slice = request.active->slice;
    if (result == -EINTR || result == -EAGAIN) return prepare(index); // try again
    if (result < 0) return finish(index, failure(request, system_text(-result)));
    if (result == 0) return finish(index, failure(request, {}));
    request.done += static_cast<std::size_t>(result);
    if (request.done < request.length) {
      // A read that stops inside a unit stopped at the end of the file: going on from there would
      // be an unaligned request, which O_DIRECT refuses.
      if (slice.direction == IoDirection::read && request.done % AioOptions::alignment != 0)
        return finish(index, failure(request, {}));
      return prepare(index); // continue a short transfer where it stopped
    }
    if (slice.file->checksums() && slice.direction == IoDirection::read) {
      unchecked_.push_back({request.active, request.offset, request.length});
      return release(index); // settled by check_reads()
    }
    auto& bytes =
        slice.direction == IoDirection::read ? counters_.bytes_read : counters_.bytes_written;
    bytes.fetch_add(request.length, std::memory_order_relaxed);
    finish(index, nullptr);
  }

  // Requests that complete while the thread hashes are replaced before it hashes on, so that
  // the disk keeps queue_depth requests even when they are small and hashing takes a while.
  void check_reads() {
    for (std::size_t i = 0; i < unchecked_.size(); ++i) {
      const Unchecked read = unchecked_[i]; // a copy: reaping below may grow the vector
      const IoSlice& slice = read.active->slice;
      std::exception_ptr error;
      if (auto problem =
              slice.file->checksums()->verify(slice.file->path(), slice.file_offset + read.offset,
                                              slice.data + read.offset, read.length))
        error = std::make_exception_ptr(Error(ErrorKind::io, *problem));
      else
        counters_.bytes_read.fetch_add(read.length, std::memory_order_relaxed);
      settle(*read.active, std::move(error));
      if (ring_.completions_ready()) {
        ring_.reap(Completion{this});
        issue();
        submit();
      }
    }
    unchecked_.clear();
  }

  // The error of a failed request; `reason` empty: the call transferred nothing.
  static std::exception_ptr failure(const Request& request, const std::string& reason) {
    const IoSlice& slice = request.active->slice;
    const std::string path = slice.file->path().string();
    const std::size_t at = slice.file_offset + request.offset;
    std::string message;
    if (slice.direction == IoDirection::read && reason.empty())
      message = "swap file " + path + " ends early: expected " + std::to_string(request.length) +
                " bytes at byte " + std::to_string(at) + ", got " + std::to_string(request.done) +
                " (was it truncated under us?)";
    else
      message = std::string(slice.direction == IoDirection::read ? "reading" : "writing") +
                " swap file " + path + " at byte " + std::to_string(at + request.done) +
                " failed: " + (reason.empty() ? "the device accepted no bytes" : reason);
    return std::make_exception_ptr(Error(ErrorKind::io, message));
  }

  void finish(std::size_t index, std::exception_ptr error) {
    Active& active = *requests_[index].active;
    release(index);
    settle(active, std::move(error));
  }

  // Frees the request's slot in the ring for the next request.
  void release(std::size_t index) {
    requests_[index] = {};
    free_requests_.push_back(index);
    --in_flight_;
  }

  // Once a slice has nothing left unsettled or to issue, reports it to its Work.
  void settle(Active& active, std::exception_ptr error) {
    if (error && !active.error) active.error = std::move(error);
    if (--active.in_flight > 0 || (!active.error && active.issued < active.slice.length)) return;
    active.slice.work->part_done(active.error);
    active_.erase(active.self);
  }

  AioOptions options_;
  IoCounters& counters_;
  Uring ring_;

  std::mutex mutex_; // guards incoming_ and stopping_, shared with the callers
  std::vector<IoSlice> incoming_;
  bool stopping_ = false;

  // Owned by the I/O thread.
  std::list<Active> active_;
  std::vector<Request> requests_;
  std::vector<std::size_t> free_requests_;
  std::vector<Unchecked> unchecked_;
  int in_flight_ = 0;           // requests in the ring
  std::size_t checksummed_ = 0; // bytes of writes checksummed since the last submission

  std::thread thread_;
};

} // namespace zero::detail
