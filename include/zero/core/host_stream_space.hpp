#pragma once
// HostStreamSpace: the execution space of a HostStream (zero/core/host_stream.hpp), the CPU twin of
// CudaStreamSpace. Its kernels (convert, accumulate, fill_zero, copy) check their arguments at the
// call, as a CUDA launch does, and then only queue the work on the stream and return; record and
// wait order the stream against others, fence() waits for it. The space is a handle: copies refer
// to the same stream, which must outlive them. Views are captured by value, so the buffers behind
// them must outlive the queued work (until fence() or an event recorded after it), exactly as with
// CUDA. Code written over StreamSpace (zero/core/stream_space.hpp) runs over this space in CI,
// where a missing event wait reads stale data deterministically (docs/execution-spaces.md).

#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/host_stream.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/run_table.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"

#include <concepts>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

namespace zero {

template <class Space>
class HostSideStream;

class HostStreamSpace {
 public:
  using execution_space = HostStreamSpace;
  using memory_space = host;
  using event_type = HostEvent;
  static constexpr const char* name = "host_stream";
  using side_stream = HostSideStream<HostStreamSpace>;

  explicit HostStreamSpace(HostStream& stream) noexcept : stream_(&stream) {}
  // The process's default host stream, as CudaStreamSpace{} is CUDA's default stream: what a store
  // built by the engine (Placement<execute_on<HostStreamSpace>>) queues on. Like every stream, it
  // is used from one host thread at a time, and a failure of its work is sticky.
  HostStreamSpace() : stream_(&default_stream()) {}

  HostStream& stream() const noexcept { return *stream_; }
  static HostStream& default_stream() {
    static HostStream stream("default");
    return stream;
  }
  // Waits for everything queued on the stream; rethrows a failure of its work.
  void fence() const { stream_->synchronize(); }

 private:
  HostStream* stream_;
};

// HostStreamSpace or a space built on it (DeviceTwinSpace). Their kernels below take the memory the
// space can access (can_access), as CUDA's take device memory only: host-accessible memory on a
// plain host stream, device_twin on the twin. Copies take any host-backed memory on both sides.
template <class S>
concept HostStreamBased = std::derived_from<S, HostStreamSpace>;

namespace detail {
// The host's view of host-backed memory, for the work a host stream runs (device_twin memory is
// reached there only, as device memory is by kernels).
template <class T, HostBackedSpace Space>
View<T> on_worker(View<T, Space> v) noexcept {
  return {v.data(), v.size()};
}

// Fails at the call, before anything is queued, when `from` does not fill `to` exactly.
inline void require_same_size(const char* operation, std::size_t from, std::size_t to) {
  if (from != to)
    fail(ErrorKind::invalid_argument, std::string(operation) + ": " + std::to_string(from) +
                                          " elements into a buffer of " + std::to_string(to));
}
} // namespace detail

// Queues to[i] = From-to-To conversion of from[i].
template <Element From, Element To, class Space, HostStreamBased S>
requires can_access<S, Space>
void convert(const S& space, View<const From, Space> from, View<To, Space> to) {
  detail::require_same_size("convert", from.size(), to.size());
  space.stream().enqueue("convert " + std::to_string(from.size()) + " " +
                             to_string(dtype_of<From>) + " to " + to_string(dtype_of<To>),
                         [from, to] { convert_n(from.data(), to.data(), from.size()); });
}

// Queues to[i] += float(from[i]).
template <Element From, class Space, HostStreamBased S>
requires can_access<S, Space>
void accumulate(const S& space, View<const From, Space> from, View<float, Space> to) {
  detail::require_same_size("accumulate", from.size(), to.size());
  space.stream().enqueue("accumulate " + std::to_string(from.size()) + " " +
                             to_string(dtype_of<From>) + " into float",
                         [from, to] { accumulate_n(from.data(), to.data(), from.size()); });
}

// Queues every byte of `to` set to zero (the stores' clear(): float and half zero are all-zero
// bits).
template <class T, class Space, HostStreamBased S>
requires(std::is_trivially_copyable_v<T>&& can_access<S, Space>) void fill_zero(const S& space,
                                                                                View<T, Space> to) {
  space.stream().enqueue("fill_zero " + std::to_string(to.size_bytes()) + " bytes", [to] {
    if (!to.empty()) std::memset(static_cast<void*>(to.data()), 0, to.size_bytes());
  });
}

// Queues a copy of `from` into `to` (host-accessible or device_twin memory on both sides).
template <class T, class FromSpace, class ToSpace, HostStreamBased S>
requires(std::is_trivially_copyable_v<T>&& HostBackedSpace<FromSpace>&&
             HostBackedSpace<ToSpace>) void copy(const S& space, View<const T, FromSpace> from,
                                                 View<T, ToSpace> to) {
  detail::require_same_size("copy", from.size(), to.size());
  space.stream().enqueue("copy " + std::to_string(from.size_bytes()) + " bytes", [from, to] {
    if (!from.empty()) std::memcpy(to.data(), from.data(), from.size_bytes());
  });
}

// Queues to[run.to + i] = From-to-To conversion of from[run.from + i] along the table (zeros for
// its zero runs). The table must outlive the queued work, as the views' buffers must.
template <Element From, Element To, class Space, class TableSpace, HostStreamBased S>
requires(can_access<S, Space>&& can_access<S, TableSpace>) void convert_runs(
    const S& space, View<const From, Space> from, View<To, Space> to,
    const RunTable<TableSpace>& table) {
  detail::require_fits("convert_runs", table, from.size(), to.size());
  space.stream().enqueue("convert_runs " + std::to_string(table.elements()) + " " +
                             to_string(dtype_of<From>) + " to " + to_string(dtype_of<To>),
                         [runs = table.host_runs(), from, to] {
                           detail::convert_along(runs, from.data(), to.data());
                         });
}

// Queues to[run.to + i] += float(from[run.from + i]) along the table.
template <Element From, class Space, class TableSpace, HostStreamBased S>
requires(can_access<S, Space>&& can_access<S, TableSpace>) void accumulate_runs(
    const S& space, View<const From, Space> from, View<float, Space> to,
    const RunTable<TableSpace>& table) {
  detail::require_fits("accumulate_runs", table, from.size(), to.size());
  space.stream().enqueue("accumulate_runs " + std::to_string(table.elements()) + " " +
                             to_string(dtype_of<From>) + " into float",
                         [runs = table.host_runs(), from, to] {
                           detail::accumulate_along(runs, from.data(), to.data());
                         });
}

// `event` marks the point after the work queued on the space's stream so far.
inline void record(const HostStreamSpace& space, HostEvent& event) {
  event.record(space.stream());
}

// Work queued on the space's stream after this waits until `event`'s point has passed (nothing, if
// the event was never recorded).
inline void wait(const HostStreamSpace& space, const HostEvent& event) {
  space.stream().wait(event);
}

// A host stream of its own beside a space's (SideStreams): its worker thread runs the work queued
// on space() concurrently with the other streams', ordered against them by events only. Space is
// HostStreamSpace or DeviceTwinSpace, whose memory the stream's work reaches alike.
template <class Space>
class HostSideStream {
 public:
  HostSideStream(const Space& /*beside*/, std::string name) : stream_(std::move(name)) {}
  HostSideStream(const HostSideStream&) = delete;
  HostSideStream& operator=(const HostSideStream&) = delete;
  Space space() const noexcept { return Space(stream_); }

 private:
  // Its destructor runs what is queued before the worker stops. Mutable: space() is a handle to
  // it, through which work is queued, as CudaSideStream's is to its cudaStream_t.
  mutable HostStream stream_;
};

static_assert(SideStreams<HostStreamSpace>);

// DeviceTwinSpace: a host stream whose memory is device_twin, the CPU twin of CudaStreamSpace and
// its device memory. Its kernels, copies, events and fence are HostStreamSpace's; what changes is
// the type of the memory it owns: host code cannot index it, a host communicator does not take it
// (a StagedCommunicator<DeviceTwinSpace> carries it through pinned memory, as on a GPU), and a
// store placed in it must reach it through the stream. Code that compiles and passes over this
// space is the device path with only the hardware left to try.
class DeviceTwinSpace : public HostStreamSpace {
 public:
  using execution_space = DeviceTwinSpace;
  using memory_space = device_twin;
  static constexpr const char* name = "device_twin_stream";
  using side_stream = HostSideStream<DeviceTwinSpace>;

  using HostStreamSpace::HostStreamSpace;
  DeviceTwinSpace() = default; // the default host stream
};

static_assert(SideStreams<DeviceTwinSpace>);

} // namespace zero
