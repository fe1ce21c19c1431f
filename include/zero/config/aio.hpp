#pragma once
// The top-level "aio" section of a DeepSpeed config: how the NVMe tier talks to the disk (request
// size, requests in flight, submission style, I/O threads), with DeepSpeed's defaults. The NVMe
// tier turns it into zero::AioOptions (nvme/aio_options.hpp), which checks the values it needs.

#include <cstdint>

namespace zero::config {

struct AioConfig {
  std::int64_t block_size = 1'048'576;   // bytes per I/O request; larger transfers are split
  std::int64_t queue_depth = 8;          // requests in flight per I/O thread
  std::int64_t intra_op_parallelism = 1; // I/O threads, each with its own queue
  bool single_submit = false;            // true: one request per submission system call
  bool overlap_events = true;            // false: submit a batch, wait for all of it, then the next
  friend bool operator==(const AioConfig&, const AioConfig&) = default;
};

} // namespace zero::config
