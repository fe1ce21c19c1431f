#pragma once
// NcclCommunicator: collectives among GPUs through NCCL, bootstrapped over MPI (rank 0 creates the
// ncclUniqueId and broadcasts it). Needs zero::cuda and zero::mpi.
//
// Ordering. Operations run on the communicator's own non-blocking CUDA stream, stream(), which by
// itself is ordered after nothing else. The contract:
//  - before: every operation starts after all the work queued on the caller stream before its
//    submit (an event recorded there, which stream() waits on; no host or device-wide sync). The
//    caller stream is the default stream (0: the legacy stream, or the per-thread one where the
//    calling code is compiled with per-thread default streams), where a plain cudaMemcpy or
//    cudaMemset is ordered, unless the constructor's `caller_stream` or set_caller_stream() names
//    another. Work on any other stream must be finished or made visible to that stream by the
//    caller before submitting (a pageable cudaMemcpy can return before its copy has landed).
//  - after: the Work handle records an event after the operation; wait() blocks the host until it
//    has passed (polling NCCL's asynchronous error state, so a stuck collective is aborted after
//    the timeout with a message naming the op, instead of hanging). A caller that wants stream
//    ordering instead calls make_stream_wait(s): s waits on the device for every operation
//    submitted so far. The Work must still be waited or tested before it is dropped; test() is then
//    true once s has passed that point.
//
// Arithmetic. Half and bfloat16 reductions accumulate in float: the operands are widened on the
// stream, reduced as float, and rounded once. `avg` of floating types is NCCL's sum divided by the
// rank count on the stream (correctly rounded), the host communicators' formula, not ncclAvg
// (which pre-multiplies every input by 1/n, and before NCCL 2.29.7 skips the last elements of a
// one-rank average); integer `avg` is ncclAvg, which divides the wrapped sum truncating, like the
// host. Blocks of different sizes are a group of one rooted call per rank (NCCL has no
// reduce-scatter-v or all-gather-v).
//
// Threads. One communicator is used from one host thread at a time: NCCL forbids concurrent use of
// one communicator, and the caller stream's event (caller_mark), make_stream_wait's event
// (done_mark) and the float scratch are shared by every operation without a lock.
//
// Host synchronization. The first half or bfloat16 reduction, or barrier, that grows the float
// scratch synchronizes the communicator's stream (and so waits for the caller stream's work queued
// before it), and freeing the old scratch (cudaFree) synchronizes the device: the "no host or
// device-wide sync" promise above holds once the scratch is large enough.

#include "zero/comm/communicator.hpp"
#include "zero/comm/detail/collective_api.hpp"
#include "zero/comm/mpi_communicator.hpp"
#include "zero/comm/options.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/cuda_check.hpp"
#include "zero/core/cuda_stream_space.hpp"
#include "zero/core/device_convert.hpp"

#if !ZERO_HAS_CUDA
#error "zero/comm/nccl_communicator.hpp needs the CUDA backend: link zero::cuda"
#endif

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>

namespace zero {
namespace detail {

struct NcclStatus {
  static bool ok(ncclResult_t status) noexcept { return status == ncclSuccess; }
  static std::string message(ncclResult_t status, const char* call, const char* file, int line) {
    return std::string(call) + " failed: " + ncclGetErrorString(status) + " at " + file + ":" +
           std::to_string(line);
  }
};

} // namespace detail
} // namespace zero

// Throwing, asserting and logging checks for NCCL calls, like the CUDA and MPI ones.
#define ZERO_CHECK_NCCL(call) ZERO_CHECK_STATUS(::zero::detail::NcclStatus, nccl, call)
#define ZERO_ASSERT_NCCL(call) ZERO_ASSERT_STATUS(::zero::detail::NcclStatus, call)
#define ZERO_LOG_NCCL(call) ZERO_LOG_STATUS(::zero::detail::NcclStatus, call)

namespace zero {
namespace detail {

inline ncclDataType_t nccl_datatype(DType type) {
  switch (type) {
  case DType::float32:
    return ncclFloat32;
  case DType::float64:
    return ncclFloat64;
  case DType::int32:
    return ncclInt32;
  case DType::int64:
    return ncclInt64;
  case DType::uint8:
    return ncclUint8;
  case DType::float16:
    return ncclFloat16;
  case DType::bfloat16:
    return ncclBfloat16;
  }
  return ncclFloat32;
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::sum:
    return ncclSum;
  case ReduceOp::avg:
    return ncclAvg;
  case ReduceOp::max:
    return ncclMax;
  case ReduceOp::min:
    return ncclMin;
  }
  return ncclSum;
}

struct NcclShared {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaStream_t caller = nullptr;     // operations start after the work queued here before submit
  cudaEvent_t caller_mark = nullptr; // recorded on `caller` at each submit (one event, reused)
  cudaEvent_t done_mark = nullptr;   // recorded on `stream` by make_stream_wait
  int rank = 0;
  int size = 1;
  double timeout_seconds = 300;
  Buffer<float, cuda> scratch; // float operands of half/bfloat16 reductions, grown on demand

  ~NcclShared() {
    if (stream != nullptr) ZERO_LOG_CUDA(cudaStreamSynchronize(stream));
    if (comm != nullptr) ZERO_LOG_NCCL(ncclCommDestroy(comm));
    scratch = {};
    if (caller_mark != nullptr) ZERO_LOG_CUDA(cudaEventDestroy(caller_mark));
    if (done_mark != nullptr) ZERO_LOG_CUDA(cudaEventDestroy(done_mark));
    if (stream != nullptr) ZERO_LOG_CUDA(cudaStreamDestroy(stream));
  }

  // The stream and the two events, on the current device.
  void create_stream(cudaStream_t caller_stream) {
    caller = caller_stream;
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ZERO_CHECK_CUDA(cudaEventCreateWithFlags(&caller_mark, cudaEventDisableTiming));
    ZERO_CHECK_CUDA(cudaEventCreateWithFlags(&done_mark, cudaEventDisableTiming));
  }

  // `stream` waits for what the caller stream holds now. cudaStreamWaitEvent waits for the record
  // made before it, so the next submit may record the same event again.
  void order_after_caller() {
    if (caller == stream) return;
    ZERO_CHECK_CUDA(cudaEventRecord(caller_mark, caller));
    ZERO_CHECK_CUDA(cudaStreamWaitEvent(stream, caller_mark, 0));
  }

  float* scratch_for(std::size_t elements) {
    if (scratch.size() < elements) {
      ZERO_CHECK_CUDA(cudaStreamSynchronize(stream)); // the old scratch may still be in use
      scratch = Buffer<float, cuda>(elements, uninitialized);
    }
    return scratch.data();
  }
};

// Completion of one stream-ordered operation: an event recorded after it.
class NcclWork final : public WorkState {
 public:
  NcclWork(std::shared_ptr<NcclShared> shared, const CollectiveArgs& args)
      : shared_(std::move(shared)), args_(args) {
    ZERO_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    ZERO_CHECK_CUDA(cudaEventRecord(event_, shared_->stream));
  }
  ~NcclWork() override { ZERO_LOG_CUDA(cudaEventDestroy(event_)); }

  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    while (!test()) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (seconds > shared_->timeout_seconds) {
        ncclCommAbort(shared_->comm);
        shared_->comm = nullptr;
        fail(ErrorKind::timeout, description() + " on rank " + std::to_string(shared_->rank) +
                                     " of " + std::to_string(shared_->size) +
                                     " did not complete within " + std::to_string(seconds) +
                                     " s; the NCCL communicator was aborted");
      }
      std::this_thread::yield();
    }
  }
  bool test() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) ZERO_CHECK_CUDA(status);
    ncclResult_t async = ncclSuccess;
    if (shared_->comm != nullptr) ZERO_CHECK_NCCL(ncclCommGetAsyncError(shared_->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      fail(ErrorKind::nccl, description() + " failed: " + ncclGetErrorString(async));
    return false;
  }
  std::string description() const override { return args_.describe(); }

 private:
  std::shared_ptr<NcclShared> shared_;
  CollectiveArgs args_;
  cudaEvent_t event_ = nullptr;
};

} // namespace detail

class NcclCommunicator : public detail::CollectiveApi<NcclCommunicator, cuda> {
 public:
  static constexpr bool supports_variable_counts = true;
  // The communicator an engine takes beside this one for its host collectives.
  using host_type = MpiCommunicator;

  // One GPU per rank: rank r of `bootstrap` uses device `device` (default: r modulo the device
  // count). Operations start after the work queued on `caller_stream` before their submit (the
  // default stream unless named; a stream of that device).
  explicit NcclCommunicator(MpiCommunicator& bootstrap, int device = -1,
                            CommOptions options = CommOptions::from_environment(),
                            cudaStream_t caller_stream = nullptr)
      : shared_(std::make_shared<detail::NcclShared>()) {
    int devices = 0;
    ZERO_CHECK_CUDA(cudaGetDeviceCount(&devices));
    require(devices > 0, "NcclCommunicator: no CUDA device", ErrorKind::cuda);
    ZERO_CHECK_CUDA(cudaSetDevice(device >= 0 ? device : bootstrap.rank() % devices));
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) ZERO_CHECK_NCCL(ncclGetUniqueId(&id));
    auto bytes = std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&id), sizeof id);
    bootstrap.broadcast(bytes, 0).wait();
    shared_->rank = bootstrap.rank();
    shared_->size = bootstrap.size();
    shared_->timeout_seconds = options.timeout_seconds;
    shared_->create_stream(caller_stream);
    ZERO_CHECK_NCCL(ncclCommInitRank(&shared_->comm, shared_->size, id, shared_->rank));
  }

  int rank() const noexcept { return shared_->rank; }
  int size() const noexcept { return shared_->size; }
  // The stream the operations run on (non-blocking, owned by the communicator).
  cudaStream_t stream() const noexcept { return shared_->stream; }
  ncclComm_t native_handle() const noexcept { return shared_->comm; }

  // The stream that later submits are ordered after (see the top of this file); nullptr is the
  // default stream, stream() turns the ordering off. A split() communicator starts with its
  // parent's.
  cudaStream_t caller_stream() const noexcept { return shared_->caller; }
  void set_caller_stream(cudaStream_t caller) noexcept { shared_->caller = caller; }
  // The same as execution spaces (OrderedAfterCaller, zero/core/stream_space.hpp): a bucketed
  // reducer or a gather over CudaStreamSpace points the communicator at its stream while it
  // launches (CallerScope), so its collectives start after its packing on the device, with no
  // host wait.
  void set_caller(const CudaStreamSpace& caller) noexcept { set_caller_stream(caller.stream()); }
  CudaStreamSpace caller() const { return CudaStreamSpace(shared_->caller); }

  // `s` waits, on the device, for every operation submitted so far (an event on stream(); the
  // host does not block). For stream-ordered use of the results without Work::wait(); the Work
  // handles must still be waited or tested before they are dropped.
  void make_stream_wait(cudaStream_t s) {
    ZERO_CHECK_CUDA(cudaEventRecord(shared_->done_mark, shared_->stream));
    ZERO_CHECK_CUDA(cudaStreamWaitEvent(s, shared_->done_mark, 0));
  }

  NcclCommunicator split(int color, int key) {
    require(color >= 0, "split: color must be non-negative (every rank joins one group)");
    auto shared = std::make_shared<detail::NcclShared>();
    ZERO_CHECK_NCCL(ncclCommSplit(shared_->comm, color, key, &shared->comm, nullptr));
    ZERO_CHECK_NCCL(ncclCommUserRank(shared->comm, &shared->rank));
    ZERO_CHECK_NCCL(ncclCommCount(shared->comm, &shared->size));
    shared->timeout_seconds = shared_->timeout_seconds;
    shared->create_stream(shared_->caller);
    return NcclCommunicator(std::move(shared));
  }

  Work submit(const CollectiveArgs& a) {
    shared_->order_after_caller();
    if (a.kind == Collective::barrier) {
      int* flag = reinterpret_cast<int*>(shared_->scratch_for(1));
      ZERO_CHECK_NCCL(
          ncclAllReduce(flag, flag, 1, ncclInt32, ncclSum, shared_->comm, shared_->stream));
    } else if (is_low_precision(a.dtype) && uses_reduce_op(a.kind)) {
      reduce_in_float(a);
    } else {
      launch(a, a.send, a.recv, detail::nccl_datatype(a.dtype), a.element_bytes());
    }
    return Work(std::make_shared<detail::NcclWork>(shared_, a));
  }

 private:
  explicit NcclCommunicator(std::shared_ptr<detail::NcclShared> shared)
      : shared_(std::move(shared)) {}

  static bool is_floating(ncclDataType_t type) noexcept {
    return type == ncclFloat32 || type == ncclFloat64;
  }

  // NCCL's reduction for `a` on `type`: a floating average is a sum here, divided by
  // finish_average.
  static ncclRedOp_t nccl_op_for(const CollectiveArgs& a, ncclDataType_t type) noexcept {
    if (a.op == ReduceOp::avg && is_floating(type)) return ncclSum;
    return detail::nccl_op(a.op);
  }

  // A floating average's sum divided by the rank count where it was received, on the stream: the
  // host's acc / ranks, correctly rounded. One rank divides by 1, which changes nothing.
  void finish_average(const CollectiveArgs& a, void* recv, ncclDataType_t type) {
    if (!uses_reduce_op(a.kind) || a.op != ReduceOp::avg || !is_floating(type)) return;
    if (shared_->size == 1 || (a.kind == Collective::reduce && a.root != shared_->rank)) return;
    const std::size_t n =
        a.kind == Collective::reduce_scatter ? a.block_count(shared_->rank) : a.count;
    if (type == ncclFloat32)
      cuda_kernels::divide(static_cast<float*>(recv), n, static_cast<float>(shared_->size),
                           shared_->stream);
    else
      cuda_kernels::divide(static_cast<double*>(recv), n, static_cast<double>(shared_->size),
                           shared_->stream);
  }

  void launch(const CollectiveArgs& a, const void* send, void* recv, ncclDataType_t type,
              std::size_t element_bytes) {
    if (a.variable_counts()) {
      launch_blocks(a, send, recv, type, element_bytes);
      return finish_average(a, recv, type);
    }
    ncclComm_t c = shared_->comm;
    cudaStream_t s = shared_->stream;
    const ncclRedOp_t op = nccl_op_for(a, type);
    switch (a.kind) {
    case Collective::all_reduce:
      ZERO_CHECK_NCCL(ncclAllReduce(send, recv, a.count, type, op, c, s));
      break;
    case Collective::reduce_scatter:
      ZERO_CHECK_NCCL(ncclReduceScatter(send, recv, a.count, type, op, c, s));
      break;
    case Collective::all_gather:
      ZERO_CHECK_NCCL(ncclAllGather(send, recv, a.count, type, c, s));
      break;
    case Collective::broadcast:
      ZERO_CHECK_NCCL(ncclBroadcast(send, recv, a.count, type, a.root, c, s));
      break;
    case Collective::reduce:
      ZERO_CHECK_NCCL(ncclReduce(send, recv, a.count, type, op, a.root, c, s));
      break;
    case Collective::barrier:
      break;
    }
    finish_average(a, recv, type);
  }

  // Blocks of different sizes: a reduce to each rank of its block, or a broadcast from each rank of
  // its block, grouped so that NCCL runs them as one operation. Empty blocks are skipped on every
  // rank alike (the counts agree). In place, as NCCL allows: the root's own block of `send`
  // (reduce_scatter) or of `recv` (all_gather) is its other buffer.
  // Not yet run on a GPU (no device where it was written): compiled, not tested.
  void launch_blocks(const CollectiveArgs& a, const void* send, void* recv, ncclDataType_t type,
                     std::size_t element_bytes) {
    ncclComm_t c = shared_->comm;
    cudaStream_t s = shared_->stream;
    ZERO_CHECK_NCCL(ncclGroupStart());
    for (int root = 0; root < shared_->size; ++root) {
      const std::size_t n = a.block_count(root);
      if (n == 0) continue;
      const std::size_t start = a.block_offset(root) * element_bytes;
      if (a.kind == Collective::reduce_scatter) {
        // Only the root writes `recv`; the others pass theirs, which NCCL ignores.
        ZERO_CHECK_NCCL(ncclReduce(static_cast<const std::byte*>(send) + start, recv, n, type,
                                   nccl_op_for(a, type), root, c, s));
      } else {
        ZERO_CHECK_NCCL(
            ncclBroadcast(send, static_cast<std::byte*>(recv) + start, n, type, root, c, s));
      }
    }
    ZERO_CHECK_NCCL(ncclGroupEnd());
  }

  // Half and bfloat16: widen to float on the stream, reduce in float, round once.
  void reduce_in_float(const CollectiveArgs& a) {
    const std::size_t in_count = a.send_count(shared_->size);
    const std::size_t out_count = a.recv_count(shared_->size);
    float* in = shared_->scratch_for(in_count + out_count);
    float* out = in + in_count;
    cudaStream_t s = shared_->stream;
    visit_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (LowPrecision<T>) {
        cuda_kernels::convert(static_cast<const T*>(a.send), in, in_count, s);
        launch(a, in, out, ncclFloat32, sizeof(float));
        const bool receives = a.kind != Collective::reduce || a.root == shared_->rank;
        if (receives) cuda_kernels::convert(out, static_cast<T*>(a.recv), out_count, s);
      }
    });
  }

  std::shared_ptr<detail::NcclShared> shared_;
};

static_assert(Communicator<NcclCommunicator>);
static_assert(VariableCountCommunicator<NcclCommunicator>);
static_assert(OrderedAfterCaller<NcclCommunicator, CudaStreamSpace>);

} // namespace zero
