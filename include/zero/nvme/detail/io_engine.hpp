#pragma once
// IoEngine: a tier's I/O threads (intra_op_parallelism of them, as DeepSpeed's aio handle has).
// A transfer is cut into one contiguous slice per thread, aligned to 4096 bytes, and its Work
// completes when every slice has; successive transfers start on successive threads, so that
// transfers smaller than the slices still spread over all of them.

#include "zero/core/error.hpp"
#include "zero/core/work.hpp"
#include "zero/nvme/aio_options.hpp"
#include "zero/nvme/detail/io_work.hpp"
#include "zero/nvme/detail/swap_file_state.hpp"
#include "zero/nvme/detail/uring_worker.hpp"
#include "zero/nvme/io_stats.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero::detail {

class IoEngine {
 public:
  explicit IoEngine(const AioOptions& options) {
    workers_.reserve(static_cast<std::size_t>(options.intra_op_parallelism));
    for (int i = 0; i < options.intra_op_parallelism; ++i)
      workers_.push_back(std::make_unique<UringWorker>(options, counters_));
  }

  // Starts a transfer of [offset, offset + length) of `file` from or into `data`; both aligned.
  Work submit(IoDirection direction, const std::shared_ptr<SwapFileState>& file, std::size_t offset,
              std::byte* data, std::size_t length) {
    if (workers_.empty())
      fail(ErrorKind::invalid_argument,
           "swap file " + file->path().string() + " is used after its NvmeTier was destroyed");
    if (length == 0) return Work();
    const std::size_t threads = workers_.size();
    const std::size_t units = length / AioOptions::alignment;
    const std::size_t slice_bytes = (units + threads - 1) / threads * AioOptions::alignment;
    const std::size_t slices = (length + slice_bytes - 1) / slice_bytes;
    auto work = std::make_shared<IoWork>(describe(direction, *file, offset, length),
                                         static_cast<int>(slices), clock_);
    for (std::size_t i = 0; i < slices; ++i) {
      const std::size_t begin = i * slice_bytes;
      workers_[(next_worker_ + i) % threads]->enqueue({work, file, direction, offset + begin,
                                                       data + begin,
                                                       std::min(slice_bytes, length - begin)});
    }
    next_worker_ = (next_worker_ + slices) % threads;
    return Work(std::move(work));
  }

  // Carries out every transfer already submitted, then stops the threads.
  void shutdown() noexcept { workers_.clear(); }

  IoStats stats() const {
    return {counters_.bytes_read.load(), counters_.bytes_written.load(),
            counters_.read_requests.load(), counters_.write_requests.load(), clock_->seconds()};
  }

 private:
  static std::string describe(IoDirection direction, const SwapFileState& file, std::size_t offset,
                              std::size_t length) {
    return std::string(direction == IoDirection::read ? "read" : "write") + " of " +
           std::to_string(length) + " bytes at byte " + std::to_string(offset) + " of swap file " +
           file.path().string();
  }

  IoCounters counters_; // before the workers, which count into it until they stop
  std::shared_ptr<BusyClock> clock_ = std::make_shared<BusyClock>();
  std::vector<std::unique_ptr<UringWorker>> workers_;
  std::size_t next_worker_ = 0;
};

} // namespace zero::detail
