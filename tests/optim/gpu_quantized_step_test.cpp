// The CUDA 8-bit Adam step (optim/cuda_quantized_step.hpp) against the host's
// quantized_fused_step: codes, scales, master weights and compute copy bit for bit, for every
// gradient and copy type, Adam and AdamW, partial last blocks, misaligned arrays, more tensors
// than one launch carries, blocks that quantize to zero (a largest magnitude below the smallest
// normal float), a NaN gradient, and three steps in a row. Label `gpu`: skipped without a device.

#include "device_copies.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/half.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/cuda_quantized_step.hpp>
#include <zero/optim/dynamic_map.hpp>
#include <zero/optim/quantized_moments.hpp>
#include <zero/optim/quantized_step.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// A namespace of its own: the test binary's sources may be built as one unit.
namespace quantized_step_test {

using zero::bfloat16;
using zero::half;

using zero::testing::to_device;
using zero::testing::to_host;

// One tensor's master weights, 8-bit moments (quantized from reproducible fp32 moments), gradient
// and compute copy (Copy = float: none), on the host.
template <class Grad, class Copy>
struct Problem {
  static constexpr bool has_copy = !std::is_same_v<Copy, float>;
  std::vector<float> master;
  std::vector<std::uint8_t> codes[2];
  std::vector<float> scales[2];
  std::vector<Grad> grad;
  std::vector<Copy> copy;

  Problem(std::size_t n, unsigned seed) : master(n), grad(n), copy(n) {
    std::mt19937 random(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 2);
    std::vector<float> moment[2] = {std::vector<float>(n), std::vector<float>(n)};
    for (std::size_t i = 0; i < n; ++i) {
      master[i] = normal(random);
      moment[0][i] = normal(random) * 1e-3f;
      moment[1][i] = std::fabs(normal(random)) * 1e-6f;
      grad[i] = zero::convert<Grad>(normal(random) * std::ldexp(1.0f, exponent(random)));
    }
    // The third block's moments and gradients are zero: it stays a block of zeros, scale 0.
    for (std::size_t i = 2 * 2048; i < std::min(n, std::size_t{3 * 2048}); ++i) {
      moment[0][i] = moment[1][i] = 0.0f;
      grad[i] = zero::convert<Grad>(0.0f);
    }
    // The fourth block's are tiny: the first moment's largest magnitude falls below the smallest
    // normal float (a subnormal, with float and bfloat16 gradients), the second's to 0.
    for (std::size_t i = 3 * 2048; i < std::min(n, std::size_t{4 * 2048}); ++i) {
      moment[0][i] = 0.0f;
      moment[1][i] = 0.0f;
      grad[i] = zero::convert<Grad>(i % 2 ? 1e-38f : 0.0f);
    }
    for (int k = 0; k < 2; ++k) {
      codes[k].resize(n);
      scales[k].resize(zero::quantized_blocks(n));
      zero::quantize(k == 0 ? zero::DynamicMap::signed_map() : zero::DynamicMap::unsigned_map(),
                     zero::View<const float>(moment[k].data(), n), moment_of(k));
    }
  }

  zero::QuantizedMoment moment_of(int k) {
    return {zero::View<std::uint8_t>(codes[k].data(), codes[k].size()),
            zero::View<float>(scales[k].data(), scales[k].size())};
  }

  // The step on the elements from `offset` on, their blocks counted from there.
  zero::QuantizedMoment moment_from(int k, std::size_t offset) {
    const std::size_t n = codes[k].size() - offset;
    return {zero::View<std::uint8_t>(codes[k].data() + offset, n),
            zero::View<float>(scales[k].data(), zero::quantized_blocks(n))};
  }
  void host_step(const zero::AdamUpdate& update, float multiplier, std::size_t offset) {
    const std::size_t n = master.size() - offset;
    const zero::View<const Grad> g(grad.data() + offset, n);
    const zero::View<float> weights(master.data() + offset, n);
    if constexpr (has_copy)
      zero::quantized_fused_step(update, weights, moment_from(0, offset), moment_from(1, offset), g,
                                 multiplier, zero::View<Copy>(copy.data() + offset, n));
    else
      zero::quantized_fused_step(update, weights, moment_from(0, offset), moment_from(1, offset), g,
                                 multiplier);
  }
};

template <class Grad, class Copy>
struct DeviceProblem {
  zero::Buffer<float, zero::cuda> master;
  zero::Buffer<std::uint8_t, zero::cuda> codes[2];
  zero::Buffer<float, zero::cuda> scales[2];
  zero::Buffer<Grad, zero::cuda> grad;
  zero::Buffer<Copy, zero::cuda> copy;

  explicit DeviceProblem(const Problem<Grad, Copy>& p)
      : master(to_device(p.master)), codes{to_device(p.codes[0]), to_device(p.codes[1])},
        scales{to_device(p.scales[0]), to_device(p.scales[1])}, grad(to_device(p.grad)),
        copy(to_device(p.copy)) {}

  // The elements from `offset` on, as Problem::host_step takes them.
  zero::cuda_kernels::QuantizedStepTensor tensor(std::size_t offset) {
    zero::cuda_kernels::QuantizedStepTensor t;
    t.master = master.data() + offset;
    for (int k = 0; k < 2; ++k) {
      t.codes[k] = codes[k].data() + offset;
      t.scales[k] = scales[k].data();
    }
    t.grad = grad.data() + offset;
    t.low_precision = Problem<Grad, Copy>::has_copy ? copy.data() + offset : nullptr;
    t.size = master.size() - offset;
    return t;
  }
};

// Byte for byte; where `any_nan` is set, two NaNs of any payload are alike: a NaN weight and its
// compute copy, whose payload the host's arithmetic and conversions keep from the NaN gradient
// while the device's arithmetic gives its canonical NaN. The moments' codes and scales are exact.
template <class T>
void expect_same_bytes(const std::vector<T>& got, const std::vector<T>& want,
                       const std::string& what, bool any_nan = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 &&
        !(any_nan && std::isnan(zero::convert<float>(got[i])) &&
          std::isnan(zero::convert<float>(want[i])))) {
      ADD_FAILURE() << what << ": element " << i << " differs from the host's ("
                    << static_cast<double>(zero::convert<float>(got[i])) << " against "
                    << static_cast<double>(zero::convert<float>(want[i])) << ")";
      return;
    }
}

// Each tensor stepped three times on both sides; every third tensor from its element 1 on, so
// that its arrays are misaligned for vector accesses.
template <class Grad, class Copy, class Optimizer>
void expect_device_equals_host(Optimizer optimizer, const std::vector<std::size_t>& sizes,
                               float multiplier, bool nan_gradient = false) {
  const auto offset = [&](std::size_t t) { return t % 3 == 2 && sizes[t] > 0 ? 1 : 0; };
  std::vector<Problem<Grad, Copy>> host;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    host.emplace_back(sizes[t], static_cast<unsigned>(200 + t));
    if (nan_gradient && sizes[t] > 10)
      host.back().grad[10] = zero::convert<Grad>(std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<DeviceProblem<Grad, Copy>> device;
  std::vector<zero::cuda_kernels::QuantizedStepTensor> tensors;
  device.reserve(host.size());
  for (const auto& p : host)
    device.emplace_back(p);
  for (std::size_t t = 0; t < device.size(); ++t)
    tensors.push_back(device[t].tensor(offset(t)));
  const zero::cuda_kernels::StepTypes types{zero::dtype_of<Grad>, Problem<Grad, Copy>::has_copy
                                                                      ? zero::dtype_of<Copy>
                                                                      : zero::DType::float16};
  for (int step = 0; step < 3; ++step) {
    const auto update = optimizer.begin_step();
    for (std::size_t t = 0; t < host.size(); ++t)
      host[t].host_step(update, multiplier, offset(t));
    zero::cuda_kernels::quantized_fused_step(update, tensors, types, multiplier, nullptr);
  }
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  for (std::size_t t = 0; t < host.size(); ++t) {
    const std::string what = "tensor " + std::to_string(t) + " of " + std::to_string(sizes[t]);
    expect_same_bytes(to_host(device[t].master), host[t].master, what + ", master", true);
    for (int k = 0; k < 2; ++k) {
      expect_same_bytes(to_host(device[t].codes[k]), host[t].codes[k],
                        what + ", codes of moment " + std::to_string(k));
      expect_same_bytes(to_host(device[t].scales[k]), host[t].scales[k],
                        what + ", scales of moment " + std::to_string(k));
    }
    if constexpr (Problem<Grad, Copy>::has_copy)
      expect_same_bytes(to_host(device[t].copy), host[t].copy, what + ", compute copy", true);
  }
}

// Empty, partial single blocks, whole blocks, partial last blocks; the blocks of zeros and of tiny
// values are the third and fourth.
const std::vector<std::size_t> sizes = {0, 1, 7, 2047, 2048, 2049, 5 * 2048 + 17, 40000};

template <class Grad, class Copy>
void both_optimizers(float multiplier) {
  expect_device_equals_host<Grad, Copy>(zero::Adam({.weight_decay = 0.01}), sizes, multiplier);
  expect_device_equals_host<Grad, Copy>(zero::AdamW({.lr = 0.01, .maximize = true}), sizes,
                                        multiplier);
}

TEST(CudaQuantizedStep, MatchesTheHostForEveryType) {
  both_optimizers<float, float>(0.5f);
  both_optimizers<float, half>(1.0f);
  both_optimizers<half, half>(1.0f / 1024);
  both_optimizers<half, bfloat16>(0.37f / 4096);
  both_optimizers<bfloat16, bfloat16>(1.0f);
  both_optimizers<bfloat16, float>(1.0f);
}

TEST(CudaQuantizedStep, MoreTensorsThanOneLaunch) {
  std::vector<std::size_t> many(30, 3000); // past the 12 tensors a launch carries
  many.push_back(300 * 2048 + 5);
  expect_device_equals_host<bfloat16, bfloat16>(zero::AdamW(), many, 1.0f);
}

TEST(CudaQuantizedStep, NanGradientAsTheHost) {
  expect_device_equals_host<half, half>(zero::Adam(), {5000}, 1.0f, true);
}

TEST(CudaQuantizedStep, RefusesMismatchedViews) {
  zero::Buffer<float, zero::cuda> master(4096, zero::uninitialized);
  zero::Buffer<std::uint8_t, zero::cuda> codes(4096, zero::uninitialized);
  zero::Buffer<float, zero::cuda> scales(1, zero::uninitialized);
  zero::Buffer<half, zero::cuda> grad(4096, zero::uninitialized);
  const zero::DeviceQuantizedMoment moment{codes.view(), scales.view()};
  zero::Adam adam;
  EXPECT_THROW(
      zero::quantized_fused_step(adam.begin_step(), master.view(), moment, moment,
                                 zero::View<const half, zero::cuda>(grad.data(), grad.size()), 1.0f,
                                 zero::View<half, zero::cuda>{}, nullptr),
      zero::Error);
}

} // namespace quantized_step_test
