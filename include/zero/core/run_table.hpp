#pragma once
// RunTable<Space>: copies between two orders of the same elements, listed once and kept in the
// memory where the kernels that follow it run. A CopyRun moves `length` elements from position
// `from` of a source to position `to` of a destination; a run whose `from` is CopyRun::zeros
// writes zeros instead (an image's padding). The stores' image packing and unpacking (the bucketed
// reducer's packing and delivery, stage 3's unpacking of an out-of-order image) are such tables,
// built once per layout, and run by two kernels every execution space provides:
//
//   convert_runs(exec, from, to, table)     to[run.to + i] = convert(from[run.from + i]), or zero
//   accumulate_runs(exec, from, to, table)  to[run.to + i] += float(from[run.from + i])
//                                           (zero runs add nothing: -0 sums keep their sign)
//
// HostThreads runs them inline (zero/core/execution_space.hpp), HostStreamSpace queues them
// (zero/core/host_stream_space.hpp), CudaStreamSpace launches one kernel per table
// (zero/core/cuda_stream_space.hpp). The table is checked once, when built: its destinations do
// not overlap (a device kernel writes them all at once), and each call checks that the views are
// long enough for it before anything runs or is queued. Over a stream space the table, like the
// views, must outlive the queued work.

#include "zero/core/buffer.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/cuda_check.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace zero {

struct CopyRun {
  static constexpr std::size_t zeros = std::numeric_limits<std::size_t>::max();
  std::size_t from = 0; // in the source, or `zeros`
  std::size_t to = 0;   // in the destination
  std::size_t length = 0;
  friend constexpr bool operator==(const CopyRun&, const CopyRun&) = default;
};

template <MemorySpace Space = host>
class RunTable {
 public:
  // A device kernel gives each run (of at most this many elements) to one block of threads, so
  // longer runs are cut: a layer-sized run then still spreads over the whole device.
  static constexpr std::size_t longest_run =
      Space::host_accessible ? std::numeric_limits<std::size_t>::max() : std::size_t{1} << 14;

  RunTable() = default;
  explicit RunTable(std::span<const CopyRun> runs) {
    std::vector<CopyRun> cut;
    cut.reserve(runs.size());
    for (const CopyRun& run : runs) {
      if (run.length == 0) continue;
      elements_ += run.length;
      destination_extent_ = std::max(destination_extent_, run.to + run.length);
      if (run.from != CopyRun::zeros)
        source_extent_ = std::max(source_extent_, run.from + run.length);
      for (std::size_t done = 0; done < run.length; done += longest_run) {
        const std::size_t length = std::min(longest_run, run.length - done);
        cut.push_back(
            {run.from == CopyRun::zeros ? CopyRun::zeros : run.from + done, run.to + done, length});
      }
    }
    require_disjoint_destinations(cut);
    runs_ = Buffer<CopyRun, Space>(cut.size(), uninitialized);
    if (cut.empty()) return;
    if constexpr (HostBackedSpace<Space>) {
      std::memcpy(runs_.data(), cut.data(), cut.size() * sizeof(CopyRun));
    } else {
#if ZERO_HAS_CUDA
      // Built once per layout, before any work uses it: a synchronous copy is fine here.
      ZERO_CHECK_CUDA(cudaMemcpy(runs_.data(), cut.data(), cut.size() * sizeof(CopyRun),
                                 cudaMemcpyHostToDevice));
      // From pageable memory cudaMemcpy may return before the copy landed, and kernels on a
      // non-blocking stream are not ordered after the default stream: wait for it here.
      ZERO_CHECK_CUDA(cudaStreamSynchronize(nullptr));
#endif
    }
  }

  // The runs as the kernels read them (in Space's memory).
  View<const CopyRun, Space> runs() const noexcept {
    return runs_.view();
  }
  // The same runs, for host loops (a host stream's, over device_twin memory).
  std::span<const CopyRun> host_runs() const noexcept requires HostBackedSpace<Space> {
    return {runs_.data(), runs_.size()};
  }
  std::size_t size() const noexcept {
    return runs_.size();
  }
  bool empty() const noexcept {
    return runs_.empty();
  }
  // Elements written, and how long a source and a destination must at least be.
  std::size_t elements() const noexcept {
    return elements_;
  }
  std::size_t source_extent() const noexcept {
    return source_extent_;
  }
  std::size_t destination_extent() const noexcept {
    return destination_extent_;
  }
  std::size_t size_bytes() const noexcept {
    return runs_.size_bytes();
  }

 private:
  static void require_disjoint_destinations(std::vector<CopyRun> runs) {
    std::sort(runs.begin(), runs.end(),
              [](const CopyRun& a, const CopyRun& b) { return a.to < b.to; });
    for (std::size_t i = 1; i < runs.size(); ++i)
      if (runs[i - 1].to + runs[i - 1].length > runs[i].to)
        fail(ErrorKind::invalid_argument,
             "run table: two runs write destination element " + std::to_string(runs[i].to));
  }

  Buffer<CopyRun, Space> runs_;
  std::size_t elements_ = 0, source_extent_ = 0, destination_extent_ = 0;
};

namespace detail {
// Fails, naming the operation, when a view is too short for the table (checked at the call).
template <class Space>
void require_fits(const char* operation, const RunTable<Space>& table, std::size_t source,
                  std::size_t destination) {
  if (source < table.source_extent() || destination < table.destination_extent())
    fail(ErrorKind::invalid_argument,
         std::string(operation) + ": the run table reads " + std::to_string(table.source_extent()) +
             " and writes " + std::to_string(table.destination_extent()) +
             " elements, but the source has " + std::to_string(source) + " and the destination " +
             std::to_string(destination));
}

// The host's loops behind convert_runs and accumulate_runs.
template <class From, class To>
void convert_along(std::span<const CopyRun> runs, const From* from, To* to) noexcept {
  for (const CopyRun& run : runs) {
    if (run.from == CopyRun::zeros)
      std::memset(static_cast<void*>(to + run.to), 0, run.length * sizeof(To));
    else
      convert_n(from + run.from, to + run.to, run.length);
  }
}
template <class From>
void accumulate_along(std::span<const CopyRun> runs, const From* from, float* to) noexcept {
  for (const CopyRun& run : runs)
    if (run.from != CopyRun::zeros) accumulate_n(from + run.from, to + run.to, run.length);
}
} // namespace detail

} // namespace zero
