#pragma once
// CudaStreamSpace: the execution space of a CUDA stream, and CudaEvent, an owned cudaEvent_t. Work
// is queued on the stream and returns at once; record and wait are cudaEventRecord and
// cudaStreamWaitEvent, copy is cudaMemcpyAsync, fence() is cudaStreamSynchronize. The space does
// not own its stream (the caller creates and destroys it), and the buffers behind queued work must
// outlive it, as with any asynchronous CUDA call. convert() uses the kernels of
// zero/core/device_convert.hpp (half and bfloat16 to and from float; a copy when the types are
// equal), accumulate() its kernel that adds float, half or bfloat16 into float sums, fill_zero()
// is cudaMemsetAsync, convert_runs() and accumulate_runs() launch one kernel per run table
// (zero/core/run_table.hpp). HostStreamSpace (zero/core/host_stream_space.hpp) is its CPU twin,
// with the same ordering rules and the same bits; tests/optim/gpu_stream_test.cpp compares the two
// on a GPU.

#include "zero/core/cuda_check.hpp"
#include "zero/core/device_convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/run_table.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"

#if !ZERO_HAS_CUDA
#error "zero/core/cuda_stream_space.hpp needs the CUDA backend: link zero::cuda"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace zero {

// An owned CUDA event without timing (the cheaper kind: only ordering is asked of it).
class CudaEvent {
 public:
  CudaEvent() { ZERO_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept {
    if (this != &other) {
      destroy();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  ~CudaEvent() { destroy(); }

  cudaEvent_t native() const noexcept { return event_; }

  // Whether the recorded work has completed (true if never recorded); throws on a CUDA error.
  bool query() const {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    ZERO_CHECK_CUDA(status);
    return true;
  }
  // Blocks the host until the recorded work has completed.
  void synchronize() const { ZERO_CHECK_CUDA(cudaEventSynchronize(event_)); }

 private:
  void destroy() noexcept {
    if (event_ != nullptr) ZERO_LOG_CUDA(cudaEventDestroy(std::exchange(event_, nullptr)));
  }
  cudaEvent_t event_ = nullptr;
};

class CudaSideStream;

class CudaStreamSpace {
 public:
  using execution_space = CudaStreamSpace;
  using memory_space = cuda;
  using event_type = CudaEvent;
  using side_stream = CudaSideStream;
  static constexpr const char* name = "cuda_stream";

  // The default stream unless one is given; the space never destroys it. The device current at
  // construction is the stream's (a stream belongs to the device current when it was created).
  explicit CudaStreamSpace(cudaStream_t stream = nullptr) : stream_(stream) {
    ZERO_CHECK_CUDA(cudaGetDevice(&device_));
  }
  // A stream of `device`, whichever is current.
  CudaStreamSpace(cudaStream_t stream, int device) noexcept : stream_(stream), device_(device) {}

  cudaStream_t stream() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  void fence() const { ZERO_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

  // Makes the space's device current on the calling thread: a thread of one's own (a worker)
  // starts on device 0, where events created for another device's stream cannot be recorded.
  void make_current() const { ZERO_CHECK_CUDA(cudaSetDevice(device_)); }

 private:
  cudaStream_t stream_;
  int device_ = 0;
};

// A non-blocking CUDA stream of its own on the device of the space it is built beside
// (SideStreams): a copy stream, whose copies run on the copy engines while the space's kernels
// run. Destroyed once its work has run.
class CudaSideStream {
 public:
  CudaSideStream(const CudaStreamSpace& beside, const std::string& /*name*/) {
    int current = 0;
    ZERO_CHECK_CUDA(cudaGetDevice(&current));
    ZERO_CHECK_CUDA(cudaSetDevice(beside.device()));
    const cudaError_t created = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    ZERO_CHECK_CUDA(cudaSetDevice(current));
    ZERO_CHECK_CUDA(created);
    device_ = beside.device();
  }
  CudaSideStream(const CudaSideStream&) = delete;
  CudaSideStream& operator=(const CudaSideStream&) = delete;
  ~CudaSideStream() {
    ZERO_LOG_CUDA(cudaStreamSynchronize(stream_));
    ZERO_LOG_CUDA(cudaStreamDestroy(stream_));
  }
  CudaStreamSpace space() const noexcept { return {stream_, device_}; }

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

inline void record(const CudaStreamSpace& space, CudaEvent& event) {
  ZERO_CHECK_CUDA(cudaEventRecord(event.native(), space.stream()));
}

// Waiting on a never-recorded event does nothing (CUDA's rule, kept by HostStreamSpace).
inline void wait(const CudaStreamSpace& space, const CudaEvent& event) {
  ZERO_CHECK_CUDA(cudaStreamWaitEvent(space.stream(), event.native(), 0));
}

// An asynchronous copy between any two spaces (unified addressing tells the direction). From or
// to pageable host memory CUDA may complete it before returning; pinned_host keeps it async.
template <class T, class FromSpace, class ToSpace>
requires std::is_trivially_copyable_v<T>
void copy(const CudaStreamSpace& space, View<const T, FromSpace> from, View<T, ToSpace> to) {
  if (from.size() != to.size())
    fail(ErrorKind::invalid_argument, "copy: " + std::to_string(from.size()) +
                                          " elements into a buffer of " +
                                          std::to_string(to.size()));
  if (from.empty()) return;
  ZERO_CHECK_CUDA(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyDefault,
                                  space.stream()));
}

// Queues to[i] = From-to-To conversion of from[i] on device memory: a kernel of
// zero::cuda_kernels where one exists for the pair, a copy when the types are equal.
template <Element From, Element To>
requires(std::is_same_v<From, To> || requires(const From* source, To* destination,
                                              cudaStream_t stream) {
  cuda_kernels::convert(source, destination, std::size_t{}, stream);
}) void convert(const CudaStreamSpace& space, View<const From, cuda> from, View<To, cuda> to) {
  if (from.size() != to.size())
    fail(ErrorKind::invalid_argument, "convert: " + std::to_string(from.size()) +
                                          " elements into a buffer of " +
                                          std::to_string(to.size()));
  if constexpr (std::is_same_v<From, To>) {
    copy(space, from, to);
  } else if (!from.empty()) {
    cuda_kernels::convert(from.data(), to.data(), from.size(), space.stream());
    ZERO_CHECK_CUDA(cudaGetLastError()); // a failed launch
  }
}

// Queues to[i] += float(from[i]) (one correctly rounded addition, as accumulate_n on the host).
template <Element From>
requires requires(const From* source, float* sums, cudaStream_t stream) {
  cuda_kernels::accumulate(source, sums, std::size_t{}, stream);
}
void accumulate(const CudaStreamSpace& space, View<const From, cuda> from, View<float, cuda> to) {
  if (from.size() != to.size())
    fail(ErrorKind::invalid_argument, "accumulate: " + std::to_string(from.size()) +
                                          " elements into a buffer of " +
                                          std::to_string(to.size()));
  if (from.empty()) return;
  cuda_kernels::accumulate(from.data(), to.data(), from.size(), space.stream());
  ZERO_CHECK_CUDA(cudaGetLastError()); // a failed launch
}

// Queues every byte of `to` set to zero.
template <class T>
requires std::is_trivially_copyable_v<T>
void fill_zero(const CudaStreamSpace& space, View<T, cuda> to) {
  if (to.empty()) return;
  ZERO_CHECK_CUDA(
      cudaMemsetAsync(static_cast<void*>(to.data()), 0, to.size_bytes(), space.stream()));
}

// Queues to[run.to + i] = From-to-To conversion of from[run.from + i] along the table (zeros for
// its zero runs): one kernel for the whole table, which lives in device memory.
template <cuda_kernels::RunElement From, cuda_kernels::RunElement To>
void convert_runs(const CudaStreamSpace& space, View<const From, cuda> from, View<To, cuda> to,
                  const RunTable<cuda>& table) {
  detail::require_fits("convert_runs", table, from.size(), to.size());
  cuda_kernels::convert_runs(table.runs().data(), table.size(), from.data(), to.data(),
                             space.stream());
}

// Queues to[run.to + i] += float(from[run.from + i]) along the table (its zero runs add nothing).
template <cuda_kernels::RunElement From>
void accumulate_runs(const CudaStreamSpace& space, View<const From, cuda> from,
                     View<float, cuda> to, const RunTable<cuda>& table) {
  detail::require_fits("accumulate_runs", table, from.size(), to.size());
  cuda_kernels::accumulate_runs(table.runs().data(), table.size(), from.data(), to.data(),
                                space.stream());
}

static_assert(SideStreams<CudaStreamSpace>);

} // namespace zero
