// The fused host step against the optimizer's functor applied element by element on float
// lanes (the math the CUDA kernels run): the same bits for every gradient and copy type, sizes
// around the vector width and the threading threshold, misaligned views, NaN/Inf, subnormals,
// lr 0, extreme multipliers and empty buffers; and the optimizers' options and step counter.

#include "step_reference.hpp"

#include <zero/optim/adam.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using zero::bfloat16;
using zero::half;
using zero::testing::Problem;

template <class Optimizer, class Grad, class Copy>
void expect_fused_equals_reference(Optimizer optimizer, std::size_t n, std::size_t offset,
                                   float multiplier, int steps = 2) {
  Problem<Grad, Copy> fused(n + offset, Optimizer::state_tensors, 7 + n);
  Problem<Grad, Copy> reference = fused;
  Optimizer twin = optimizer;
  for (int step = 0; step < steps; ++step) {
    zero::testing::fused_step_on(fused, optimizer.begin_step(), offset, multiplier);
    zero::testing::reference_step_on(reference, twin.begin_step(), offset, multiplier);
  }
  zero::testing::expect_same_bits(fused, reference,
                                  "n=" + std::to_string(n) + " offset=" + std::to_string(offset));
}

template <class Grad, class Copy>
void every_optimizer(std::size_t n, std::size_t offset, float multiplier) {
  expect_fused_equals_reference<zero::Adam, Grad, Copy>(zero::Adam({.weight_decay = 0.01}), n,
                                                        offset, multiplier);
  expect_fused_equals_reference<zero::AdamW, Grad, Copy>(
      zero::AdamW({.lr = 0.01, .betas = {0.8, 0.95}, .maximize = true}), n, offset, multiplier);
  expect_fused_equals_reference<zero::SGD, Grad, Copy>(
      zero::SGD({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}), n, offset,
      multiplier, 3);
  expect_fused_equals_reference<zero::SGD, Grad, Copy>(
      zero::SGD({.lr = 0.1, .momentum = 0.5, .dampening = 0.3}), n, offset, multiplier, 3);
  expect_fused_equals_reference<zero::StatelessSGD, Grad, Copy>(
      zero::StatelessSGD({.lr = 0.1, .weight_decay = 0.1}), n, offset, multiplier);
}

// Sizes around the lane counts (8, 16), and past the threading threshold with an odd tail.
constexpr std::size_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 40009};

TEST(FusedStep, MatchesTheFunctorForEveryType) {
  for (std::size_t n : sizes) {
    every_optimizer<float, half>(n, 0, 1.0f);
    every_optimizer<half, half>(n, 0, 1.0f / 1024);
    every_optimizer<bfloat16, bfloat16>(n, 0, 1.0f);
    every_optimizer<half, bfloat16>(n, 0, 0.3f / 4096);
    every_optimizer<float, float>(n, 0, 0.7f); // no compute copy
  }
}

TEST(FusedStep, MisalignedViews) {
  for (std::size_t offset = 1; offset < 17; offset += 3) {
    every_optimizer<half, half>(45, offset, 1.0f / 8);
    every_optimizer<float, bfloat16>(40001, offset, 1.0f);
  }
}

template <class Optimizer, class Grad, class Copy>
void expect_streaming_equals_reference(Optimizer optimizer) {
  const std::size_t n = zero::detail::streaming_copy_threshold + 21;
  const Problem<Grad, Copy> original(n + 16, Optimizer::state_tensors, 1);
  for (int misaligned = 0; misaligned < 2; ++misaligned) {
    Problem<Grad, Copy> fused = original;
    Problem<Grad, Copy> reference = original;
    // Past the threshold the copy is written with non-temporal stores when it is 32-byte
    // aligned, with normal stores otherwise.
    const auto address = reinterpret_cast<std::uintptr_t>(fused.copy.data());
    const std::size_t offset = (32 - address % 32) % 32 / sizeof(Copy) + misaligned;
    Optimizer twin = optimizer;
    zero::testing::fused_step_on(fused, optimizer.begin_step(), offset, 1.0f / 512);
    zero::testing::reference_step_on(reference, twin.begin_step(), offset, 1.0f / 512);
    zero::testing::expect_same_bits(fused, reference, "offset " + std::to_string(offset));
  }
}

// Only the AVX-512 lanes store the copy with non-temporal stores: elsewhere the test would repeat
// a smaller one on 2M elements (13 s under AddressSanitizer).
#if defined(ZERO_SIMD_AVX512)
TEST(FusedStep, LargeStepsWithStreamingStores) {
  expect_streaming_equals_reference<zero::Adam, half, half>(zero::Adam());
  expect_streaming_equals_reference<zero::AdamW, bfloat16, bfloat16>(zero::AdamW());
}
#endif

TEST(FusedStep, EmptyBuffersAreANoOp) {
  zero::Adam adam;
  std::vector<float> empty;
  std::vector<half> no_grad;
  zero::fused_step(adam.begin_step(), zero::view(empty), {zero::view(empty), zero::view(empty)},
                   zero::view(no_grad), 1.0f, zero::View<half>{});
  EXPECT_EQ(adam.step_count(), 1);
}

TEST(FusedStep, NonFiniteGradientsPropagateAndStayLocal) {
  const std::size_t n = 50;
  Problem<half, half> p(n, 2, 3);
  p.grad[3] = half::from_bits(0x7c00);  // +Inf
  p.grad[20] = half::from_bits(0x7e00); // NaN
  p.grad[49] = half::from_bits(0xfc00); // -Inf
  Problem<half, half> reference = p;
  zero::Adam adam;
  const auto update = adam.begin_step();
  zero::testing::fused_step_on(p, update, 0, 1.0f);
  zero::testing::reference_step_on(reference, update, 0, 1.0f);
  zero::testing::expect_same_bits(p, reference, "non-finite gradients");
  for (std::size_t i = 0; i < n; ++i) {
    const bool bad = i == 3 || i == 20 || i == 49;
    EXPECT_EQ(std::isfinite(p.master[i]), !bad) << i; // never hidden, never spread
  }
}

TEST(FusedStep, SubnormalsAreKept) {
  // SGD with lr 1 and no decay moves a zero parameter by exactly -grad * multiplier.
  const std::vector<half> grads = {half::from_bits(0x0001), half::from_bits(0x03ff),
                                   half::from_bits(0x8001)};
  std::vector<float> master(grads.size(), 0.0f);
  std::vector<float> buffer(grads.size(), 0.0f);
  std::vector<half> copy(grads.size());
  zero::SGD sgd({.lr = 1.0, .momentum = 0.5});
  zero::fused_step(sgd.begin_step(), zero::view(master), {zero::view(buffer)}, zero::view(grads),
                   1.0f, zero::view(copy));
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(master[i], -static_cast<float>(grads[i])) << i;
    EXPECT_EQ(copy[i].bits, (grads[i].bits ^ 0x8000u)) << i; // back to the same subnormal half
  }
  // fp32 subnormals through the multiplier.
  std::vector<float> tiny = {std::numeric_limits<float>::denorm_min(), 1e-39f};
  std::vector<float> params(2, 0.0f);
  zero::StatelessSGD plain({.lr = 1.0});
  zero::fused_step(plain.begin_step(), zero::view(params), {}, zero::view(tiny), 1.0f);
  EXPECT_EQ(params[0], -std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(params[1], -1e-39f);
}

TEST(FusedStep, ZeroLearningRateKeepsTheWeights) {
  Problem<half, half> p(70, 2, 11);
  const auto before = p.master;
  zero::Adam adam({.lr = 0.0});
  zero::testing::fused_step_on(p, adam.begin_step(), 0, 1.0f / 64);
  for (std::size_t i = 0; i < p.master.size(); ++i) {
    EXPECT_EQ(p.master[i], before[i]) << i;
    EXPECT_EQ(p.copy[i].bits, half(before[i]).bits) << i;
    EXPECT_NE(p.state[1][i], 0.0f) << i; // the moments still advance
  }
}

TEST(FusedStep, ExtremeMultipliers) {
  for (float multiplier : {0.0f, 0x1p-24f, 0x1p-40f, 0x1p20f}) {
    every_optimizer<half, half>(37, 0, multiplier);
    every_optimizer<float, half>(37, 0, multiplier);
  }
}

TEST(FusedStep, RejectsMismatchedBuffers) {
  std::vector<float> master(10), m(10), v(9);
  std::vector<half> grad(10), copy(11);
  zero::Adam adam;
  const auto update = adam.begin_step();
  const auto expect_invalid = [](auto&& call) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const zero::Error& e) {
      EXPECT_EQ(e.kind(), zero::ErrorKind::invalid_argument) << e.what();
    }
  };
  expect_invalid([&] {
    zero::fused_step(update, zero::view(master), {zero::view(m), zero::view(v)}, zero::view(grad));
  });
  expect_invalid([&] {
    zero::fused_step(update, zero::view(master), {zero::view(m), zero::view(m)}, zero::view(grad),
                     1.0f, zero::view(copy));
  });
  expect_invalid([&] {
    zero::fused_step(update, zero::view(master), {zero::view(m), zero::view(m)}, zero::view(grad),
                     std::numeric_limits<float>::infinity());
  });
}

// ---- the optimizers' options, learning rate and step counter
// -------------------------------------

static_assert(zero::Optimizer<zero::Adam> && zero::Optimizer<zero::AdamW> &&
              zero::Optimizer<zero::SGD> && zero::Optimizer<zero::StatelessSGD>);
static_assert(zero::Adam::state_tensors == 2 && zero::SGD::state_tensors == 1 &&
              zero::StatelessSGD::state_tensors == 0);

TEST(Optimizers, DefaultsArePyTorchs) {
  const zero::AdamOptions adam;
  EXPECT_EQ(adam.lr, 1e-3);
  EXPECT_EQ(adam.betas[0], 0.9);
  EXPECT_EQ(adam.betas[1], 0.999);
  EXPECT_EQ(adam.eps, 1e-8);
  EXPECT_EQ(adam.weight_decay, 0.0);
  EXPECT_EQ(zero::AdamWOptions{}.weight_decay, 1e-2);
  const zero::SGDOptions sgd;
  EXPECT_EQ(sgd.momentum, 0.0);
  EXPECT_EQ(sgd.dampening, 0.0);
  EXPECT_FALSE(sgd.nesterov);
}

TEST(Optimizers, RejectBadOptions) {
  const auto expect_error = [](auto&& make, zero::ErrorKind kind) {
    try {
      make();
      ADD_FAILURE() << "no error";
    } catch (const zero::Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
    }
  };
  using K = zero::ErrorKind;
  expect_error([] { zero::Adam({.amsgrad = true}); }, K::unsupported);
  expect_error([] { zero::AdamW({.amsgrad = true}); }, K::unsupported);
  expect_error([] { zero::Adam({.lr = -1.0}); }, K::invalid_argument);
  expect_error([] { zero::Adam({.betas = {1.0, 0.9}}); }, K::invalid_argument);
  expect_error([] { zero::AdamW({.eps = -1e-8}); }, K::invalid_argument);
  expect_error([] { zero::SGD({.momentum = 0.0, .nesterov = true}); }, K::invalid_argument);
  expect_error([] { zero::SGD({.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               K::invalid_argument);
  expect_error([] { zero::StatelessSGD({.momentum = 0.9}); }, K::invalid_argument);
  zero::Adam adam;
  expect_error([&] { adam.set_lr(std::nan("")); }, K::invalid_argument);
  expect_error([&] { adam.set_step_count(-1); }, K::invalid_argument);
}

TEST(Optimizers, LearningRateAndStepCounter) {
  zero::Adam adam({.lr = 0.1});
  const auto first = adam.begin_step();
  EXPECT_EQ(adam.step_count(), 1);
  EXPECT_EQ(first.neg_step_size, static_cast<float>(-0.1 / (1 - 0.9)));
  adam.set_lr(0.05); // a schedule changes the rate between steps
  EXPECT_EQ(adam.lr(), 0.05);
  const auto second = adam.begin_step();
  EXPECT_EQ(second.neg_step_size, static_cast<float>(-0.05 / (1 - 0.9 * 0.9)));
  // A resumed optimizer continues the bias correction where it stopped.
  zero::Adam resumed({.lr = 0.05});
  resumed.set_step_count(1);
  const auto again = resumed.begin_step();
  EXPECT_EQ(again.neg_step_size, second.neg_step_size);
  EXPECT_EQ(again.bias_correction2_sqrt, second.bias_correction2_sqrt);
  EXPECT_EQ(resumed.update_for_step(2).bias_correction2_sqrt, second.bias_correction2_sqrt);

  zero::SGD sgd({.lr = 0.1, .momentum = 0.9});
  EXPECT_TRUE(sgd.begin_step().first_step);
  EXPECT_FALSE(sgd.begin_step().first_step);
  EXPECT_EQ(sgd.update_for_step(1).neg_lr, -0.1f);
}

} // namespace
