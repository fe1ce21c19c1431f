// The CUDA step over split master weights (optim/cuda_step.hpp's split_fused_step, and the 8-bit
// step's split form in optim/cuda_quantized_step.hpp) against the host's: compute weights,
// residuals, moments (fp32, or 8-bit codes and scales) bit for bit after three steps, for every
// optimizer with CUDA kernels, float and 16-bit gradients, bfloat16 and float16 compute copies,
// 8- and 16-bit residuals, sizes around the vector width, a chunk and a quantization block, and
// misaligned arrays. Label `gpu`: skipped without a device.

#include "device_copies.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/half.hpp>
#include <zero/core/memory_space.hpp>
#include <zero/core/view.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/cuda_quantized_step.hpp>
#include <zero/optim/cuda_step.hpp>
#include <zero/optim/dynamic_map.hpp>
#include <zero/optim/quantized_moments.hpp>
#include <zero/optim/quantized_step.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/optim/split_master.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// A namespace of its own: the test binary's sources may be built as one unit.
namespace split_step_test {

using zero::bfloat16;
using zero::half;
using zero::testing::to_device;
using zero::testing::to_host;

template <class T>
std::vector<std::uint16_t> bits_of(const std::vector<T>& values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    bits[i] = values[i].bits;
  return bits;
}
std::vector<std::uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// One tensor's split masters (random masters, split), two fp32 moments, 8-bit ones (quantized
// from the same values) and a gradient, on the host.
template <class Grad, class T, class R>
struct Problem {
  std::vector<T> weights;
  std::vector<R> residuals;
  std::vector<float> state[2];
  std::vector<std::uint8_t> codes[2];
  std::vector<float> scales[2];
  std::vector<Grad> grad;

  Problem(std::size_t n, unsigned seed) : weights(n), residuals(n), grad(n) {
    std::mt19937 random(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 2);
    std::vector<float> masters(n);
    for (auto& s : state)
      s.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      masters[i] = normal(random);
      state[0][i] = normal(random) * 1e-3f;
      state[1][i] = std::fabs(normal(random)) * 1e-6f;
      grad[i] = zero::convert<Grad>(normal(random) * std::ldexp(1.0f, exponent(random)));
    }
    zero::split_masters(zero::View<const float>(masters), split());
    for (int k = 0; k < 2; ++k) {
      codes[k].resize(n);
      scales[k].resize(zero::quantized_blocks(n));
      zero::quantize(
          k == 0 ? zero::DynamicMap::signed_map() : zero::DynamicMap::unsigned_map(),
          zero::View<const float>(state[k]),
          zero::QuantizedMoment{zero::View<std::uint8_t>(codes[k]), zero::View<float>(scales[k])});
    }
  }
  zero::SplitMasterView<T, R> split() { return {zero::View<T>(weights), zero::View<R>(residuals)}; }
  zero::QuantizedMoment moment(int k) {
    return {zero::View<std::uint8_t>(codes[k]), zero::View<float>(scales[k])};
  }
};

// The same on the device; the views start `offset` elements into buffers one element longer
// (offset 1 misaligns every array for the vector accesses).
template <class Grad, class T, class R>
struct DeviceProblem {
  std::size_t n, offset;
  zero::Buffer<T, zero::cuda> weights;
  zero::Buffer<R, zero::cuda> residuals;
  zero::Buffer<float, zero::cuda> state[2];
  zero::Buffer<std::uint8_t, zero::cuda> codes[2];
  zero::Buffer<float, zero::cuda> scales[2];
  zero::Buffer<Grad, zero::cuda> grad;

  DeviceProblem(const Problem<Grad, T, R>& p, std::size_t offset_)
      : n(p.weights.size()), offset(offset_), weights(shifted(p.weights)),
        residuals(shifted(p.residuals)), state{shifted(p.state[0]), shifted(p.state[1])},
        codes{shifted(p.codes[0]), shifted(p.codes[1])}, scales{to_device(p.scales[0]),
                                                                to_device(p.scales[1])},
        grad(shifted(p.grad)) {}

  template <class E>
  zero::Buffer<E, zero::cuda> shifted(const std::vector<E>& values) const {
    std::vector<E> padded(values.size() + 1);
    std::copy(values.begin(), values.end(), padded.begin() + static_cast<std::ptrdiff_t>(offset));
    return to_device(padded);
  }
  template <class E>
  zero::View<E, zero::cuda> view(zero::Buffer<E, zero::cuda>& b) const {
    return {b.data() + offset, n};
  }
  template <class E>
  std::vector<E> read(const zero::Buffer<E, zero::cuda>& b) const {
    std::vector<E> host(n);
    to_host(b.data() + offset, host);
    return host;
  }
  zero::SplitMasterView<T, R, zero::cuda> split() { return {view(weights), view(residuals)}; }
  zero::DeviceQuantizedMoment moment(int k) {
    return {view(codes[k]), zero::View<float, zero::cuda>(scales[k].data(), scales[k].size())};
  }
};

const std::vector<std::size_t> sizes = {1, 3, 4, 5, 2047, 2048, 2049, 6000, 65537};

template <class Grad, class T, class R, class Optimizer>
void expect_split_step_equals_host(Optimizer optimizer, float multiplier) {
  constexpr std::size_t states = Optimizer::state_tensors;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t n = sizes[t];
    Problem<Grad, T, R> host(n, static_cast<unsigned>(7 + t));
    DeviceProblem<Grad, T, R> device(host, t % 2);
    Optimizer mine = optimizer;
    for (int step = 0; step < 3; ++step) {
      const auto update = mine.begin_step();
      std::array<zero::View<float>, states> host_state;
      std::array<zero::View<float, zero::cuda>, states> device_state;
      for (std::size_t k = 0; k < states; ++k) {
        host_state[k] = zero::View<float>(host.state[k]);
        device_state[k] = device.view(device.state[k]);
      }
      zero::split_fused_step(update, host.split(), host_state, zero::View<const Grad>(host.grad),
                             multiplier);
      zero::split_fused_step(update, device.split(), device_state,
                             zero::View<const Grad, zero::cuda>(device.view(device.grad)),
                             multiplier, nullptr);
    }
    ZERO_CHECK_CUDA(cudaDeviceSynchronize());
    const std::string what = std::string(zero::to_string(zero::dtype_of<T>)) + ", " +
                             std::to_string(8 * sizeof(R)) + "-bit residuals, " +
                             std::to_string(n) + " elements";
    EXPECT_EQ(bits_of(device.read(device.weights)), bits_of(host.weights)) << what;
    EXPECT_EQ(device.read(device.residuals), host.residuals) << what;
    for (std::size_t k = 0; k < states; ++k)
      EXPECT_EQ(bits_of(device.read(device.state[k])), bits_of(host.state[k])) << what;
  }
}

template <class Grad, class T, class R>
void expect_quantized_split_step_equals_host(float multiplier) {
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t n = sizes[t];
    Problem<Grad, T, R> host(n, static_cast<unsigned>(31 + t));
    DeviceProblem<Grad, T, R> device(host, t % 2);
    zero::AdamW optimizer({.lr = 0.01, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      const auto update = optimizer.begin_step();
      zero::quantized_fused_step(update, host.split(), host.moment(0), host.moment(1),
                                 zero::View<const Grad>(host.grad), multiplier);
      zero::quantized_fused_step(update, device.split(), device.moment(0), device.moment(1),
                                 zero::View<const Grad, zero::cuda>(device.view(device.grad)),
                                 multiplier, nullptr);
    }
    ZERO_CHECK_CUDA(cudaDeviceSynchronize());
    const std::string what = std::string("8-bit moments, ") + zero::to_string(zero::dtype_of<T>) +
                             ", " + std::to_string(8 * sizeof(R)) + "-bit residuals, " +
                             std::to_string(n) + " elements";
    EXPECT_EQ(bits_of(device.read(device.weights)), bits_of(host.weights)) << what;
    EXPECT_EQ(device.read(device.residuals), host.residuals) << what;
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(device.read(device.codes[k]), host.codes[k]) << what;
      std::vector<float> scales(host.scales[k].size());
      to_host(device.scales[k].data(), scales);
      EXPECT_EQ(bits_of(scales), bits_of(host.scales[k])) << what;
    }
  }
}

template <class Grad, class T, class R>
void every_optimizer(float multiplier) {
  expect_split_step_equals_host<Grad, T, R>(zero::Adam({.weight_decay = 0.01}), multiplier);
  expect_split_step_equals_host<Grad, T, R>(zero::AdamW({.lr = 0.01, .maximize = true}),
                                            multiplier);
  expect_split_step_equals_host<Grad, T, R>(
      zero::SGD({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}), multiplier);
  expect_split_step_equals_host<Grad, T, R>(zero::StatelessSGD({.lr = 1e-3}), multiplier);
  expect_quantized_split_step_equals_host<Grad, T, R>(multiplier);
}

TEST(CudaSplitStep, MatchesTheHostForEveryType) {
  every_optimizer<float, bfloat16, std::int8_t>(0.5f);
  every_optimizer<bfloat16, bfloat16, std::int16_t>(1.0f);
  every_optimizer<half, half, std::int8_t>(1.0f / 1024);
  every_optimizer<float, half, std::int16_t>(1.0f);
}

TEST(CudaSplitStep, RefusesMismatchedViews) {
  zero::Buffer<bfloat16, zero::cuda> w(8);
  zero::Buffer<std::int8_t, zero::cuda> r(7);
  zero::Buffer<float, zero::cuda> m(8), v(8);
  zero::Buffer<float, zero::cuda> g(8);
  const zero::SplitMasterView<bfloat16, std::int8_t, zero::cuda> split{w.view(), r.view()};
  EXPECT_THROW(zero::split_fused_step(zero::Adam().begin_step(), split, {m.view(), v.view()},
                                      zero::View<const float, zero::cuda>(g.view()), 1.0f, nullptr),
               zero::Error);
}

} // namespace split_step_test
