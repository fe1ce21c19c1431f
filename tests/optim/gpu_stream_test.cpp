// The step and the gradient checks over CudaStreamSpace (optim/cuda_stream_step.hpp,
// precision/cuda_stream_checks.hpp), and the space's own kernels (accumulate, fill_zero, convert,
// copy), against the host on a GPU: the same bits where the host promises them, work queued on
// the space's stream and ordered after another stream only by an event. A latch (a host function
// that blocks its stream) holds the producer, so that with the event wait dropped the step runs
// on the stale gradients every run, as HostStreamSpace's twin shows in CI
// (tests/optim/stream_step_test.cpp). Label gpu: skipped without a device.

#include "step_reference.hpp"

#include <zero/core/buffer.hpp>
#include <zero/core/convert.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>
#include <zero/core/error.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/cuda_stream_step.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/precision/cuda_stream_checks.hpp>
#include <zero/precision/grad_norm.hpp>
#include <zero/precision/overflow.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace {

using zero::bfloat16;
using zero::half;
using zero::testing::Problem;

template <class T>
using Device = zero::Buffer<T, zero::cuda>;
template <class T>
using DeviceView = zero::View<T, zero::cuda>;

struct Stream {
  cudaStream_t native = nullptr;
  Stream() { ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking)); }
  ~Stream() { ZERO_LOG_CUDA(cudaStreamDestroy(native)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// Blocks a stream from a host function (which makes no CUDA call) until opened; the destructor
// opens it and waits for the stream, so the function never outlives the flag.
class StreamLatch {
 public:
  explicit StreamLatch(cudaStream_t stream) : stream_(stream) {
    ZERO_CHECK_CUDA(cudaLaunchHostFunc(stream_, block, &open_));
  }
  ~StreamLatch() {
    open();
    ZERO_LOG_CUDA(cudaStreamSynchronize(stream_));
  }
  void open() { open_.store(true); }

 private:
  static void CUDART_CB block(void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load())
      std::this_thread::yield();
  }
  cudaStream_t stream_;
  std::atomic<bool> open_{false};
};

// Host data staged in pinned memory, so that copies from it stay asynchronous.
template <class T>
zero::Buffer<T, zero::pinned_host> pinned(const std::vector<T>& host) {
  zero::Buffer<T, zero::pinned_host> p(host.size(), zero::uninitialized);
  std::copy(host.begin(), host.end(), p.data());
  return p;
}

template <class T>
std::vector<T> read(const Device<T>& device) {
  std::vector<T> out(device.size());
  if (!out.empty())
    ZERO_CHECK_CUDA(
        cudaMemcpy(out.data(), device.data(), out.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// A copy of `host` in device memory, in place for every stream on return (a pageable cudaMemcpy
// may return before its DMA ends, and non-blocking streams do not wait for the default stream).
template <class T>
Device<T> on_device(const std::vector<T>& host) {
  Device<T> d(host.size(), zero::uninitialized);
  if (!host.empty())
    ZERO_CHECK_CUDA(
        cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  return d;
}

// One problem's states on the device (gradients written separately, by the producer).
template <class Grad, class Copy>
struct DeviceStates {
  Device<float> master;
  std::vector<Device<float>> state;
  Device<Copy> copy;
  explicit DeviceStates(const Problem<Grad, Copy>& p)
      : master(on_device(p.master)), copy(on_device(p.copy)) {
    for (const auto& s : p.state)
      state.push_back(on_device(s));
  }
  template <class U>
  void step(const zero::CudaStreamSpace& space, const U& update, DeviceView<const Grad> grad,
            float multiplier) {
    std::array<DeviceView<float>, U::state_tensors> moments;
    for (std::size_t k = 0; k < U::state_tensors; ++k)
      moments[k] = DeviceView<float>(state[k].data(), state[k].size());
    const DeviceView<float> m(master.data(), master.size());
    if constexpr (Problem<Grad, Copy>::has_copy)
      fused_step(space, update, m, moments, grad, multiplier,
                 DeviceView<Copy>(copy.data(), copy.size()));
    else
      fused_step(space, update, m, moments, grad, multiplier);
  }
  Problem<Grad, Copy> read_back(Problem<Grad, Copy> p) const {
    p.master = read(master);
    for (std::size_t k = 0; k < state.size(); ++k)
      p.state[k] = read(state[k]);
    if constexpr (Problem<Grad, Copy>::has_copy) p.copy = read(copy);
    return p;
  }
};

// Whether `event` passes within a few seconds while another stream is held: it runs at once on a
// GPU, but never under a tool that serializes the streams (compute-sanitizer's memcheck), where
// waiting for it would hang.
bool finishes_while_held(const zero::CudaEvent& event) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!event.query())
    if (std::chrono::steady_clock::now() > deadline) return false;
  return true;
}

// The gradients copied in on a held producer stream, the step on the optimizer's stream after the
// producer's event (or, with wait_for_gradients false, without it), two steps; against the host.
template <class Optimizer, class Grad, class Copy>
void expect_space_step_equals_host(Optimizer optimizer, std::size_t n, float multiplier,
                                   bool wait_for_gradients = true) {
  const std::string what = "n=" + std::to_string(n) + (wait_for_gradients ? "" : " (no wait)");
  Problem<Grad, Copy> host(n, Optimizer::state_tensors, 7 + n);
  DeviceStates<Grad, Copy> device(host);
  Device<Grad> grad(n); // zero: what the step reads if it runs before the producer
  const auto staged = pinned(host.grad);
  Stream producer_stream, optimizer_stream;
  const zero::CudaStreamSpace producer(producer_stream.native), space(optimizer_stream.native);
  Optimizer twin = optimizer;
  Problem<Grad, Copy> expected = host;
  if (!wait_for_gradients) std::fill(expected.grad.begin(), expected.grad.end(), Grad{});
  for (int step = 0; step < 2; ++step) {
    zero::CudaEvent produced, stepped;
    StreamLatch latch(producer.stream());
    copy(producer, zero::View<const Grad, zero::pinned_host>(staged.data(), n),
         DeviceView<Grad>(grad.data(), n));
    record(producer, produced);
    if (wait_for_gradients) wait(space, produced);
    device.step(space, optimizer.begin_step(), DeviceView<const Grad>(grad.data(), n), multiplier);
    record(space, stepped);
    if (wait_for_gradients) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      EXPECT_FALSE(stepped.query()) << what << ": the step ran before the held producer";
    } else if (!finishes_while_held(stepped)) {
      latch.open();
      GTEST_SKIP() << "the step did not run while another stream was held: this device or tool "
                      "serializes streams (compute-sanitizer does), so a dropped wait cannot be "
                      "shown here";
    }
    latch.open();
    stepped.synchronize();
    producer.fence();
    zero::testing::fused_step_on(expected, twin.begin_step(), 0, multiplier);
    if (!wait_for_gradients) // stale again for the next step, ordered before it on its stream
      fill_zero(space, DeviceView<Grad>(grad.data(), n));
  }
  zero::testing::expect_same_bits(device.read_back(host), expected, what);
}

template <class Grad, class Copy>
void both_optimizers(std::size_t n, float multiplier) {
  expect_space_step_equals_host<zero::Adam, Grad, Copy>(
      zero::Adam({.lr = 0.01, .weight_decay = 0.01}), n, multiplier);
  expect_space_step_equals_host<zero::SGD, Grad, Copy>(
      zero::SGD({.lr = 0.1, .momentum = 0.9, .nesterov = true}), n, multiplier);
}

// 1 and 7: scalar tails; 65537 and 300001: several chunks and a tail.
constexpr std::size_t sizes[] = {1, 7, 65537, 300001};

TEST(CudaStreamSpaceStep, WaitsForTheProducerAndGivesTheHostsBits) {
  for (std::size_t n : sizes) {
    both_optimizers<bfloat16, bfloat16>(n, 1.0f);
    both_optimizers<half, half>(n, 1.0f / 1024);
    both_optimizers<float, bfloat16>(n, 0.75f);
    both_optimizers<bfloat16, float>(n, 1.0f); // no compute copy
  }
}

// The dropped wait: the step runs on the zero gradients the producer has not yet replaced, every
// run (the producer is held until the step has finished), and gives the host's step on zeros.
TEST(CudaStreamSpaceStep, DroppedWaitStepsOnStaleGradients) {
  expect_space_step_equals_host<zero::Adam, bfloat16, bfloat16>(zero::Adam({.lr = 0.01}), 65537,
                                                                1.0f, false);
}

template <class G>
std::vector<G> gradients_with(std::size_t n, std::size_t bad_at, float bad) {
  std::vector<G> g = Problem<G, float>(n, 0, 3 + n).grad;
  if (bad_at < n) g[bad_at] = zero::convert<G>(bad);
  return g;
}

// Two buffers' checks into one slot each, queued on the space, read back after one event.
template <class G>
void expect_checks_match_host(std::size_t n, std::size_t bad_at, float bad) {
  const std::string what = "n=" + std::to_string(n) + " bad at " + std::to_string(bad_at);
  const std::vector<G> first = gradients_with<G>(n, bad_at, bad);
  const std::vector<G> second = gradients_with<G>(n, n, 0.0f);
  Stream stream;
  const zero::CudaStreamSpace space(stream.native);
  const Device<G> d_first = on_device(first), d_second = on_device(second);
  Device<int> found(1);
  Device<double> sum(1);
  for (const Device<G>* g : {&d_first, &d_second}) {
    flag_nonfinite(space, DeviceView<const G>(g->data(), n), DeviceView<int>(found.data(), 1));
    accumulate_sum_of_squares(space, DeviceView<const G>(g->data(), n),
                              DeviceView<double>(sum.data(), 1));
  }
  zero::Buffer<int, zero::pinned_host> found_host(1);
  zero::Buffer<double, zero::pinned_host> sum_host(1);
  copy(space, DeviceView<const int>(found.data(), 1),
       zero::View<int, zero::pinned_host>(found_host.data(), 1));
  copy(space, DeviceView<const double>(sum.data(), 1),
       zero::View<double, zero::pinned_host>(sum_host.data(), 1));
  zero::CudaEvent checked;
  record(space, checked);
  checked.synchronize();
  const bool host_found = zero::has_overflow(zero::View<const G>(first));
  EXPECT_EQ(found_host[0] != 0, host_found) << what;
  EXPECT_EQ(found_host[0] != 0, bad_at < n) << what;
  const double host_sum = zero::sum_of_squares(zero::View<const G>(first)) +
                          zero::sum_of_squares(zero::View<const G>(second));
  if (bad_at < n)
    EXPECT_FALSE(std::isfinite(sum_host[0])) << what;
  else // the device adds its blocks' partial sums: the host's sum to fp64 rounding
    EXPECT_NEAR(sum_host[0], host_sum, 1e-12 * host_sum) << what;
}

TEST(CudaStreamSpaceChecks, FindNonFiniteAndSumAsTheHost) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : sizes) {
    expect_checks_match_host<float>(n, n, 0.0f);
    expect_checks_match_host<half>(n, n, 0.0f);
    expect_checks_match_host<bfloat16>(n, n, 0.0f);
    expect_checks_match_host<float>(n, n - 1, nan);
    expect_checks_match_host<half>(n, n / 2, -inf);
    expect_checks_match_host<bfloat16>(n, 0, nan);
  }
}

TEST(CudaStreamSpaceChecks, UnscaleInPlaceGivesTheHostsBits) {
  for (std::size_t n : sizes) {
    std::vector<half> host = gradients_with<half>(n, n / 3, std::numeric_limits<float>::infinity());
    Device<half> device = on_device(host);
    Device<int> found(1);
    Stream stream;
    const zero::CudaStreamSpace space(stream.native);
    unscale_and_flag_nonfinite(space, DeviceView<half>(device.data(), n), 1.0f / 8,
                               DeviceView<int>(found.data(), 1));
    space.fence();
    const bool host_found = zero::unscale_and_check(zero::View<half>(host), 1.0f / 8);
    EXPECT_EQ(read(found)[0] != 0, host_found);
    zero::testing::expect_same_bits(read(device), host, "n=" + std::to_string(n));
  }
}

// accumulate (every gradient type into float), fill_zero and convert: accumulate_n's and
// convert_n's bits, queued on the space.
template <class G>
void expect_accumulate_matches_host(std::size_t n) {
  const std::vector<G> grads = gradients_with<G>(n, n, 0.0f);
  std::vector<float> sums = Problem<float, float>(n, 0, 11 + n).grad;
  Device<G> d_grads = on_device(grads);
  Device<float> d_sums = on_device(sums);
  Stream stream;
  const zero::CudaStreamSpace space(stream.native);
  for (int micro_step = 0; micro_step < 3; ++micro_step) {
    accumulate(space, DeviceView<const G>(d_grads.data(), n), DeviceView<float>(d_sums.data(), n));
    zero::accumulate_n(grads.data(), sums.data(), n);
  }
  space.fence();
  zero::testing::expect_same_bits(read(d_sums), sums,
                                  "accumulate n=" + std::to_string(n) + " " +
                                      zero::to_string(zero::dtype_of<G>));
}

TEST(CudaStreamSpaceKernels, AccumulateFillAndConvertGiveTheHostsBits) {
  for (std::size_t n : sizes) {
    expect_accumulate_matches_host<float>(n);
    expect_accumulate_matches_host<half>(n);
    expect_accumulate_matches_host<bfloat16>(n);

    Stream stream;
    const zero::CudaStreamSpace space(stream.native);
    const std::vector<float> values = Problem<float, float>(n, 0, 5).grad;
    Device<float> d_values = on_device(values);
    Device<bfloat16> narrowed(n, zero::uninitialized);
    convert(space, DeviceView<const float>(d_values.data(), n),
            DeviceView<bfloat16>(narrowed.data(), n));
    std::vector<bfloat16> host_narrowed(n);
    zero::convert_n(values.data(), host_narrowed.data(), n);
    fill_zero(space, DeviceView<float>(d_values.data(), n));
    space.fence();
    zero::testing::expect_same_bits(read(narrowed), host_narrowed, "convert");
    for (float v : read(d_values))
      ASSERT_EQ(v, 0.0f) << "fill_zero n=" << n;
  }
}

TEST(CudaStreamSpaceKernels, SizeMismatchThrowsBeforeAnythingIsQueued) {
  Device<half> grads(8);
  Device<float> sums(7);
  const zero::CudaStreamSpace space;
  EXPECT_THROW(
      accumulate(space, DeviceView<const half>(grads.data(), 8), DeviceView<float>(sums.data(), 7)),
      zero::Error);
  Device<int> two(2);
  EXPECT_THROW(flag_nonfinite(space, DeviceView<const half>(grads.data(), 8),
                              DeviceView<int>(two.data(), 2)),
               zero::Error);
}

} // namespace
