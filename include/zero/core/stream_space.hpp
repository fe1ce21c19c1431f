#pragma once
// StreamSpace: an execution space whose work is queued on a stream and returns at once, ordered
// within the stream and across streams only through its events (CUDA's model). Code that moves
// data between streams (the stores, the bucketed reducer, stage 3's gather) is written once over
// it and runs on the GPU over CudaStreamSpace (zero/core/cuda_stream_space.hpp) and on the CPU over
// HostStreamSpace (zero/core/host_stream_space.hpp), where a missing event wait reads stale data
// deterministically. A space S provides, found by argument-dependent lookup:
//
//   typename S::event_type            an event of S's streams
//   record(space, event)              the event marks the point after the work queued so far
//   wait(space, event)                later work on `space` waits until the event's point passed
//   copy(space, from, to)             an asynchronous copy between Views, sizes checked at the call
//   space.fence()                     the host waits for everything queued on `space`
//   event.synchronize(), query()      the host waits for, or polls, the event's point
//   typename S::side_stream           a stream of one's own beside a space's stream, owned:
//                                     side_stream(space, name), .space() (SideStreams below)
//
// The buffers behind queued work must outlive it: until fence() or an event recorded after it.

#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/view.hpp"

#include <concepts>
#include <cstddef>
#include <optional>
#include <string>

namespace zero {

template <class S>
concept StreamSpace = ExecutionSpace<S> &&
    requires(const S& space, typename S::event_type& event, const typename S::event_type& done,
             View<const float, typename S::memory_space> from,
             View<float, typename S::memory_space> to) {
  record(space, event);
  wait(space, done);
  copy(space, from, to);
  done.synchronize();
  { done.query() } -> std::convertible_to<bool>;
};

// A space whose stores can own a stream beside the caller's: built from the caller's space (on its
// device) and a name, it owns the stream (fenced and released when it goes), and space() is a
// handle to it, ordered against the caller's stream through events only. What a copy stream is
// for: copies on it overlap the work on the caller's stream (a GPU's copy engines run beside its
// kernels; a stream's own work runs in order).
template <class S>
concept SideStreams = StreamSpace<S> && requires(const typename S::side_stream& side) {
  requires std::constructible_from<typename S::side_stream, const S&, std::string>;
  { side.space() } -> std::same_as<S>;
};

// A communicator whose collectives start after the work queued on a caller stream of Exec once
// pointed at it with set_caller (StagedCommunicator); others are ordered by the host.
template <class Comm, class Exec>
concept OrderedAfterCaller = StreamSpace<Exec> &&
    requires(Comm& comm, const Comm& held, Exec exec) {
  comm.set_caller(exec);
  { held.caller() } -> std::convertible_to<Exec>;
};

// While it lives, `comm` (when given, and ordered after a caller stream) starts its collectives
// after the work queued on `exec`; afterwards after its own caller stream again, so that a
// communicator shared with code on other streams keeps their ordering. For any other communicator
// or space it does nothing: the caller orders those collectives itself.
template <class Comm, class Exec>
class CallerScope {
 public:
  CallerScope(Comm* comm, const Exec& exec) {
    if constexpr (OrderedAfterCaller<Comm, Exec>) {
      if (comm == nullptr) return;
      previous_.emplace(comm->caller());
      comm->set_caller(exec);
      comm_ = comm;
    }
  }
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;
  ~CallerScope() {
    if constexpr (OrderedAfterCaller<Comm, Exec>)
      if (comm_ != nullptr) comm_->set_caller(*previous_);
  }

 private:
  Comm* comm_ = nullptr;
  std::optional<Exec> previous_;
};

// The last member of a class whose buffers work queued on `exec` uses: when the class is destroyed
// it waits for that work first (a no-op for inline spaces), so that the buffers outlive it even
// when an exception cut the class's own waits short. A failure of the work is not rethrown from a
// destructor (its stream reports it to whoever synchronizes next).
template <class Exec>
class DrainOnDestruction {
 public:
  explicit DrainOnDestruction(const Exec& exec) noexcept : exec_(exec) {}
  DrainOnDestruction(const DrainOnDestruction&) = delete;
  DrainOnDestruction& operator=(const DrainOnDestruction&) = delete;
  ~DrainOnDestruction() {
    if constexpr (StreamSpace<Exec>) {
      try {
        exec_.fence();
      } catch (...) { // NOLINT(bugprone-empty-catch): nothing to do with it in a destructor
      }
    }
  }

 private:
  const Exec& exec_;
};

namespace detail {
// Checks that write their result into the caller's slot (a flag, a sum; read after an event) take
// exactly one element: a wider view is a caller's mistake (a slot per buffer meant, or a bucket
// passed by error), caught at the call on every stream space alike.
inline void require_result_slot(const char* operation, std::size_t size) {
  if (size != 1)
    fail(ErrorKind::invalid_argument, std::string(operation) + ": the result slot has " +
                                          std::to_string(size) + " elements, not 1");
}
} // namespace detail

} // namespace zero
