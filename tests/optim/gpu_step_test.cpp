// The CUDA units against the host: the multi-tensor fused step (every optimizer, gradient and
// copy type; tensors larger than a chunk, misaligned, empty, and more tensors and chunks than
// one launch carries) must give the host's bits, and so must the overflow flags, the in-place
// unscale and (to fp64 rounding) the sum of squares; LAMB's two passes must give the host's
// moments, sums of squares and weights bit for bit. Label `gpu`: skipped without a device.

#include "device_copies.hpp"
#include "step_reference.hpp"

#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/cuda_step.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/optim/trust_ratio_step.hpp>
#include <zero/precision/cuda_checks.hpp>
#include <zero/precision/grad_norm.hpp>
#include <zero/precision/overflow.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using zero::bfloat16;
using zero::half;
using zero::testing::Problem;

using zero::testing::to_device;
using zero::testing::to_host;

// A Problem's buffers on the device; the views start `offset` elements in, to misalign them.
template <class Grad, class Copy>
struct DeviceProblem {
  zero::Buffer<float, zero::cuda> master;
  std::vector<zero::Buffer<float, zero::cuda>> state;
  zero::Buffer<Grad, zero::cuda> grad;
  zero::Buffer<Copy, zero::cuda> copy;
  std::size_t offset;

  DeviceProblem(const Problem<Grad, Copy>& p, std::size_t offset_)
      : master(to_device(p.master)), grad(to_device(p.grad)), copy(to_device(p.copy)),
        offset(offset_) {
    for (const auto& s : p.state)
      state.push_back(to_device(s));
  }

  zero::cuda_kernels::StepTensor tensor() {
    zero::cuda_kernels::StepTensor t;
    t.master = master.data() + offset;
    for (std::size_t k = 0; k < state.size(); ++k)
      t.state[k] = state[k].data() + offset;
    t.grad = grad.data() + offset;
    t.low_precision = Problem<Grad, Copy>::has_copy ? copy.data() + offset : nullptr;
    t.size = master.size() - offset;
    return t;
  }

  void read_back(Problem<Grad, Copy>& p) {
    to_host(master.data(), p.master);
    for (std::size_t k = 0; k < state.size(); ++k)
      to_host(state[k].data(), p.state[k]);
    to_host(copy.data(), p.copy);
  }
};

template <class Optimizer, class Grad, class Copy>
void expect_device_equals_host(Optimizer optimizer, const std::vector<std::size_t>& sizes,
                               float multiplier) {
  std::vector<Problem<Grad, Copy>> host;
  std::vector<DeviceProblem<Grad, Copy>> device;
  std::vector<zero::cuda_kernels::StepTensor> tensors;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t offset = t % 3; // every third tensor aligned, the others misaligned
    host.emplace_back(sizes[t] + offset, Optimizer::state_tensors, 100 + t);
    device.emplace_back(host.back(), offset);
  }
  for (auto& d : device)
    tensors.push_back(d.tensor());
  const zero::cuda_kernels::StepTypes types{zero::dtype_of<Grad>, Problem<Grad, Copy>::has_copy
                                                                      ? zero::dtype_of<Copy>
                                                                      : zero::DType::float16};
  for (int step = 0; step < 2; ++step) {
    const auto update = optimizer.begin_step();
    for (std::size_t t = 0; t < host.size(); ++t)
      zero::testing::fused_step_on(host[t], update, device[t].offset, multiplier);
    zero::cuda_kernels::fused_step(update, tensors, types, multiplier, nullptr);
  }
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  for (std::size_t t = 0; t < host.size(); ++t) {
    Problem<Grad, Copy> got = host[t];
    device[t].read_back(got);
    // The elements before the offset were never touched on either side.
    zero::testing::expect_same_bits(got, host[t], "tensor " + std::to_string(t));
  }
}

template <class Grad, class Copy>
void every_optimizer(const std::vector<std::size_t>& sizes, float multiplier) {
  expect_device_equals_host<zero::Adam, Grad, Copy>(zero::Adam({.weight_decay = 0.01}), sizes,
                                                    multiplier);
  expect_device_equals_host<zero::AdamW, Grad, Copy>(zero::AdamW({.lr = 0.01, .maximize = true}),
                                                     sizes, multiplier);
  expect_device_equals_host<zero::SGD, Grad, Copy>(
      zero::SGD({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}), sizes,
      multiplier);
  expect_device_equals_host<zero::StatelessSGD, Grad, Copy>(zero::StatelessSGD({.lr = 0.1}), sizes,
                                                            multiplier);
}

const std::vector<std::size_t> mixed_sizes = {0, 1, 3, 4, 5, 17, 1000, 65536, 65537, 200003};

TEST(CudaFusedStep, MatchesTheHostForEveryType) {
  every_optimizer<float, float>(mixed_sizes, 0.5f);
  every_optimizer<float, half>(mixed_sizes, 1.0f);
  every_optimizer<half, half>(mixed_sizes, 1.0f / 1024);
  every_optimizer<half, bfloat16>(mixed_sizes, 0.37f / 4096);
  every_optimizer<bfloat16, bfloat16>(mixed_sizes, 1.0f);
}

TEST(CudaFusedStep, MoreTensorsAndChunksThanOneLaunch) {
  std::vector<std::size_t> many(330, 7);       // past 24 tensors and 320 blocks per launch
  many.push_back(25 * (std::size_t{1} << 16)); // a tensor split across launches
  many.push_back(9);
  expect_device_equals_host<zero::Adam, half, half>(zero::Adam(), many, 1.0f / 256);
}

TEST(CudaFusedStep, SingleViewOverload) {
  Problem<half, half> host(100003, 2, 5);
  DeviceProblem<half, half> device(host, 0);
  zero::Adam adam;
  const auto update = adam.begin_step();
  zero::testing::fused_step_on(host, update, 0, 1.0f / 64);
  zero::fused_step(update, device.master.view(), {device.state[0].view(), device.state[1].view()},
                   zero::View<const half, zero::cuda>(device.grad.data(), device.grad.size()),
                   1.0f / 64, device.copy.view(), nullptr);
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  Problem<half, half> got = host;
  device.read_back(got);
  zero::testing::expect_same_bits(got, host, "single view");
}

// An fp32 run's compute copy is float: every tensor's copy is its masters' bits, and the masters
// and moments are the host's, aligned and misaligned. A float copy beside half gradients has no
// kernel and is refused by name.
TEST(CudaFusedStep, FloatComputeCopyIsTheMasters) {
  std::vector<Problem<float, float>> host;
  std::vector<DeviceProblem<float, float>> device;
  std::vector<zero::cuda_kernels::StepTensor> tensors;
  for (std::size_t t = 0; t < mixed_sizes.size(); ++t) {
    host.emplace_back(mixed_sizes[t] + t % 3, 2, 300 + t);
    device.emplace_back(host.back(), t % 3);
    tensors.push_back(device.back().tensor());
    tensors.back().low_precision = device.back().copy.data() + t % 3; // float: written too
  }
  zero::AdamW adamw({.lr = 0.01, .weight_decay = 0.01});
  for (int step = 0; step < 2; ++step) {
    const auto update = adamw.begin_step();
    for (std::size_t t = 0; t < host.size(); ++t)
      zero::testing::fused_step_on(host[t], update, t % 3, 0.5f);
    zero::cuda_kernels::fused_step(update, tensors, {zero::DType::float32, zero::DType::float32},
                                   0.5f, nullptr);
  }
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  for (std::size_t t = 0; t < host.size(); ++t) {
    Problem<float, float> got = host[t];
    device[t].read_back(got);
    zero::testing::expect_same_bits(got, host[t], "tensor " + std::to_string(t)); // no copy
    for (std::size_t i = t % 3; i < got.copy.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got.copy[i]),
                std::bit_cast<std::uint32_t>(got.master[i]))
          << "tensor " << t << " element " << i;
  }

  Problem<half, float> mixed(8, 2, 7);
  DeviceProblem<half, float> on_device(mixed, 0);
  zero::cuda_kernels::StepTensor tensor = on_device.tensor();
  tensor.low_precision = on_device.copy.data();
  try {
    zero::cuda_kernels::fused_step(adamw.begin_step(), {&tensor, 1},
                                   {zero::DType::float16, zero::DType::float32}, 1.0f, nullptr);
    ADD_FAILURE() << "a float compute copy from half gradients was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a float compute copy is written from float gradients"),
              std::string::npos)
        << e.what();
  }
}

// LAMB on tensors that are pieces of parameters: the device's chunk sums, added in order, and
// its moments and weights are the host's bits (optim/trust_ratio_step.hpp).
template <class Grad, class Copy>
void expect_lamb_equals_host(const std::vector<std::size_t>& sizes, float multiplier) {
  zero::Lamb lamb({.lr = 0.01, .weight_decay = 0.01});
  std::vector<Problem<Grad, Copy>> host;
  std::vector<DeviceProblem<Grad, Copy>> device;
  std::vector<zero::cuda_kernels::StepTensor> tensors;
  std::size_t chunks = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    host.emplace_back(sizes[t] + t % 3, 2, 300 + t); // misaligned, as above
    device.emplace_back(host.back(), t % 3);
    chunks += zero::cuda_kernels::lamb_chunks(sizes[t]);
  }
  for (auto& d : device)
    tensors.push_back(d.tensor());
  const zero::cuda_kernels::StepTypes types{zero::dtype_of<Grad>, Problem<Grad, Copy>::has_copy
                                                                      ? zero::dtype_of<Copy>
                                                                      : zero::DType::float16};
  zero::Buffer<double, zero::cuda> chunk_sums(2 * chunks + 1);
  for (int step = 0; step < 2; ++step) {
    const auto update = lamb.begin_step();
    zero::cuda_kernels::lamb_prepare(update, tensors, types, multiplier, chunk_sums.data(),
                                     nullptr);
    std::vector<double> sums(2 * chunks);
    to_host(chunk_sums.data(), sums);
    std::vector<float> neg_steps;
    std::size_t chunk = 0;
    for (std::size_t t = 0; t < host.size(); ++t) {
      auto& p = host[t];
      const std::size_t offset = device[t].offset, n = sizes[t];
      const auto part = [&](std::vector<float>& v) {
        return zero::View<float>(v.data() + offset, n);
      };
      const zero::ParameterSums want = zero::trust_ratio_prepare(
          update, zero::View<const float>(part(p.master)), {part(p.state[0]), part(p.state[1])},
          zero::View<const Grad>(p.grad.data() + offset, n), multiplier);
      zero::ParameterSums got;
      for (std::size_t c = 0; c < zero::cuda_kernels::lamb_chunks(n); ++c, ++chunk)
        got += zero::ParameterSums{sums[2 * chunk], sums[2 * chunk + 1]};
      EXPECT_EQ(std::bit_cast<std::uint64_t>(got.param), std::bit_cast<std::uint64_t>(want.param))
          << "tensor " << t;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(got.direction),
                std::bit_cast<std::uint64_t>(want.direction))
          << "tensor " << t;
      neg_steps.push_back(update.neg_step(want.param, want.direction));
      const std::array<zero::View<const float>, 2> moments{
          zero::View<const float>(part(p.state[0])), zero::View<const float>(part(p.state[1]))};
      if constexpr (Problem<Grad, Copy>::has_copy)
        zero::trust_ratio_apply(update, neg_steps.back(), part(p.master), moments,
                                zero::View<Copy>(p.copy.data() + offset, n));
      else
        zero::trust_ratio_apply(update, neg_steps.back(), part(p.master), moments);
    }
    zero::cuda_kernels::lamb_apply(update, tensors, neg_steps, types, nullptr);
  }
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());
  for (std::size_t t = 0; t < host.size(); ++t) {
    Problem<Grad, Copy> got = host[t];
    device[t].read_back(got);
    zero::testing::expect_same_bits(got, host[t], "lamb tensor " + std::to_string(t));
  }
}

TEST(CudaLamb, MatchesTheHostForEveryType) {
  const std::vector<std::size_t> sizes = {0, 1, 37, 2048, 2100, 65537, 200003};
  expect_lamb_equals_host<float, float>(sizes, 0.5f);
  expect_lamb_equals_host<half, half>(sizes, 1.0f / 1024);
  expect_lamb_equals_host<bfloat16, bfloat16>(sizes, 1.0f);
  std::vector<std::size_t> many(330, 7); // past 24 tensors and 320 blocks per launch
  many.push_back(700 * zero::trust_ratio_chunk + 5);
  expect_lamb_equals_host<half, half>(many, 1.0f / 256);
}

template <class G>
void expect_checks_match(std::vector<G> values) {
  auto device = to_device(values);
  zero::Buffer<int, zero::cuda> flag(1);
  zero::Buffer<double, zero::cuda> sum(1);
  zero::cuda_kernels::flag_nonfinite(device.data(), zero::dtype_of<G>, values.size(), flag.data(),
                                     nullptr);
  zero::cuda_kernels::accumulate_sum_of_squares(device.data(), zero::dtype_of<G>, values.size(),
                                                sum.data(), nullptr);
  std::vector<int> host_flag(1);
  std::vector<double> host_sum(1);
  to_host(flag.data(), host_flag);
  to_host(sum.data(), host_sum);
  EXPECT_EQ(host_flag[0] != 0, zero::has_overflow(zero::view(values)));
  const double expected = zero::sum_of_squares(zero::view(values));
  if (std::isfinite(expected))
    EXPECT_NEAR(host_sum[0], expected, 1e-12 * expected);
  else
    EXPECT_FALSE(std::isfinite(host_sum[0]));

  zero::Buffer<int, zero::cuda> unscale_flag(1);
  zero::cuda_kernels::unscale_and_flag_nonfinite(device.data(), zero::dtype_of<G>, values.size(),
                                                 0.125f, unscale_flag.data(), nullptr);
  const bool host_overflow = zero::unscale_and_check(zero::view(values), 0.125f);
  auto unscaled = values;
  to_host(device.data(), unscaled);
  to_host(unscale_flag.data(), host_flag);
  EXPECT_EQ(host_flag[0] != 0, host_overflow);
  zero::testing::expect_same_bits(unscaled, values, "unscaled");
}

TEST(CudaGradChecks, MatchTheHost) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{3000017}}) {
    std::vector<float> f(n);
    std::vector<half> h(n);
    std::vector<bfloat16> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float x = std::sin(0.01f * static_cast<float>(i)) * 1000.0f;
      f[i] = x;
      h[i] = half(x);
      b[i] = bfloat16(x);
    }
    expect_checks_match(f);
    expect_checks_match(h);
    expect_checks_match(b);
    f[n / 2] = std::numeric_limits<float>::infinity();
    h[n - 1] = half::from_bits(0x7e00);
    b[0] = bfloat16::from_bits(0xff80);
    expect_checks_match(f);
    expect_checks_match(h);
    expect_checks_match(b);
    if (n < 1000) continue;
    // NaNs keep sign and payload through the unscale, made quiet (docs/optimizers.md): quiet and
    // signalling, positive and negative, on both sides bit for bit.
    f[1] = std::bit_cast<float>(0x7fc00000u);
    f[2] = std::bit_cast<float>(0xffa00001u);
    f[3] = std::bit_cast<float>(0x7f800123u);
    h[1] = half::from_bits(0xfe00);
    h[2] = half::from_bits(0x7d01);
    h[3] = half::from_bits(0xfc3f);
    b[1] = bfloat16::from_bits(0x7fc0);
    b[2] = bfloat16::from_bits(0xffa1);
    b[3] = bfloat16::from_bits(0x7f81);
    expect_checks_match(f);
    expect_checks_match(h);
    expect_checks_match(b);
  }
}

TEST(CudaGradChecks, UnscaledNanKeepsItsPayload) {
  std::vector<half> h{half::from_bits(0x7e00), half::from_bits(0x7d01), half::from_bits(0xfc3f)};
  auto device = to_device(h);
  zero::Buffer<int, zero::cuda> flag(1);
  zero::cuda_kernels::unscale_and_flag_nonfinite(device.data(), zero::DType::float16, h.size(),
                                                 0.5f, flag.data(), nullptr);
  to_host(device.data(), h);
  EXPECT_EQ(h[0].bits, 0x7e00); // the canonical quiet NaN stays 0x7e00 (not the device's 0x7fff)
  EXPECT_EQ(h[1].bits, 0x7f01);
  EXPECT_EQ(h[2].bits, 0xfe3f);
}

} // namespace
