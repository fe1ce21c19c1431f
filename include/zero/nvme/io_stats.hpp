#pragma once
// IoStats: what an NvmeTier moved and for how long, so that an engine can report the swap
// bandwidth it got (bytes / busy_seconds) next to the time its step waited for the disk.

#include <cstdint>

namespace zero {

struct IoStats {
  std::uint64_t bytes_read = 0;    // completed, checksum-verified reads
  std::uint64_t bytes_written = 0; // completed writes
  // Requests submitted to the kernel: block_size or less each, a short transfer's continuation
  // counted again.
  std::uint64_t read_requests = 0;
  std::uint64_t write_requests = 0;
  double busy_seconds = 0.0; // wall time with at least one transfer queued or in flight

  friend bool operator==(const IoStats&, const IoStats&) = default;
  IoStats& operator+=(const IoStats& b) noexcept {
    bytes_read += b.bytes_read;
    bytes_written += b.bytes_written;
    read_requests += b.read_requests;
    write_requests += b.write_requests;
    busy_seconds += b.busy_seconds;
    return *this;
  }
  friend IoStats operator+(IoStats a, const IoStats& b) noexcept { return a += b; }
  friend IoStats operator-(IoStats a, const IoStats& b) noexcept {
    a.bytes_read -= b.bytes_read;
    a.bytes_written -= b.bytes_written;
    a.read_requests -= b.read_requests;
    a.write_requests -= b.write_requests;
    a.busy_seconds -= b.busy_seconds;
    return a;
  }
};

} // namespace zero
