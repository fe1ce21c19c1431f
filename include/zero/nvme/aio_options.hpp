#pragma once
// AioOptions: how the NVMe tier drives the disk, DeepSpeed's "aio" section under the same names.
// Each key is honoured as DeepSpeed means it; values the tier cannot honour are refused by
// validate() with the key and the reason, rather than silently changed.
//
// The tier runs `intra_op_parallelism` I/O threads, each with its own io_uring of `queue_depth`
// requests: a transfer is split into one contiguous slice per thread, and each slice into requests
// of `block_size` bytes. So at most intra_op_parallelism x queue_depth requests are in flight.

#include "zero/config/config.hpp"
#include "zero/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace zero {

namespace detail {
inline void check_aio_count(const char* key, std::int64_t value, int max) {
  if (value < 1 || value > max)
    fail(ErrorKind::invalid_argument, std::string("aio.") + key + ": expected 1.." +
                                          std::to_string(max) + ", got " + std::to_string(value));
}
} // namespace detail

struct AioOptions {
  // O_DIRECT needs offsets, lengths and addresses aligned to the logical block size of the disk;
  // 4096 covers every disk in use (512-byte and 4K-native ones alike).
  static constexpr std::size_t alignment = 4096;
  static constexpr std::size_t max_block_size = std::size_t{1} << 30; // io_uring lengths are 32-bit
  static constexpr int max_queue_depth = 4096;
  static constexpr int max_intra_op_parallelism = 64;

  std::size_t block_size = 1'048'576; // bytes per I/O request: larger transfers are split
  int queue_depth = 8;                // requests in flight at most, per I/O thread
  bool single_submit = false;         // true: one system call per request, not one per batch
  bool overlap_events = true;         // false: submit a batch, wait for all of it, then the next
  int intra_op_parallelism = 1;       // I/O threads, each with its own ring and queue_depth

  // Throws Error(invalid_argument) naming the key ("aio.block_size: ...") and the reason.
  void validate() const {
    if (block_size < alignment || block_size > max_block_size || block_size % alignment != 0)
      fail(ErrorKind::invalid_argument,
           "aio.block_size: expected a multiple of " + std::to_string(alignment) +
               " bytes (the O_DIRECT alignment) between " + std::to_string(alignment) + " and " +
               std::to_string(max_block_size) + ", got " + std::to_string(block_size));
    detail::check_aio_count("queue_depth", queue_depth, max_queue_depth);
    detail::check_aio_count("intra_op_parallelism", intra_op_parallelism, max_intra_op_parallelism);
  }

  // The "aio" section of a DeepSpeed config, validated.
  static AioOptions from_config(const config::Config& c) {
    const config::AioConfig& aio = c.aio;
    detail::check_aio_count("queue_depth", aio.queue_depth, max_queue_depth);
    detail::check_aio_count("intra_op_parallelism", aio.intra_op_parallelism,
                            max_intra_op_parallelism);
    AioOptions options;
    options.block_size = aio.block_size < 0 ? 0 : static_cast<std::size_t>(aio.block_size);
    options.queue_depth = static_cast<int>(aio.queue_depth);
    options.single_submit = aio.single_submit;
    options.overlap_events = aio.overlap_events;
    options.intra_op_parallelism = static_cast<int>(aio.intra_op_parallelism);
    options.validate();
    return options;
  }
};

} // namespace zero
