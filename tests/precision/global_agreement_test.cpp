// Agreement across ranks: an overflow on any one rank makes every rank skip the step, the
// global gradient norm over all shards is the norm of the whole gradient (NaN/Inf reported on
// every rank), and a training loop built from these pieces keeps every rank's loss scale and
// weights identical. Runs under SelfCommunicator and MPI at 1, 2 and 3 ranks.

#include "comm_test.hpp"

#include <zero/optim/adam.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/precision/grad_norm.hpp>
#include <zero/precision/loss_scaler.hpp>
#include <zero/precision/overflow.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

template <class C>
class GlobalAgreement : public ::testing::Test {
 protected:
  C& communicator = zero::testing::communicator<C>();
};
TYPED_TEST_SUITE(GlobalAgreement, zero::testing::HostCommunicators,
                 zero::testing::CommunicatorName);

TYPED_TEST(GlobalAgreement, AnyRanksOverflowSkipsEverywhere) {
  auto& comm = this->communicator;
  EXPECT_FALSE(zero::global_overflow(comm, false));
  for (int culprit = 0; culprit < comm.size(); ++culprit)
    EXPECT_TRUE(zero::global_overflow(comm, comm.rank() == culprit)) << "culprit " << culprit;
  EXPECT_TRUE(zero::global_overflow(comm, true));
}

// Element i of the whole gradient; each rank holds a contiguous shard of it.
float element(std::size_t i) {
  return std::sin(0.37f * static_cast<float>(i)) * 512.0f;
}

template <class C>
std::vector<zero::half> shard_of(C& comm, std::size_t total) {
  const std::size_t ranks = static_cast<std::size_t>(comm.size());
  const std::size_t rank = static_cast<std::size_t>(comm.rank());
  const std::size_t begin = total * rank / ranks, end = total * (rank + 1) / ranks;
  std::vector<zero::half> shard;
  for (std::size_t i = begin; i < end; ++i)
    shard.emplace_back(element(i));
  return shard;
}

TYPED_TEST(GlobalAgreement, NormOverAllShards) {
  auto& comm = this->communicator;
  const std::size_t total = 10007;
  double expected = 0;
  for (std::size_t i = 0; i < total; ++i) {
    const double x = static_cast<float>(zero::half(element(i)));
    expected += x * x;
  }
  const double scale = 256.0;
  const auto shard = shard_of(comm, total);
  const auto norm =
      zero::global_grad_norm(comm, zero::sum_of_squares(zero::view(shard)), 1.0 / scale);
  EXPECT_TRUE(norm.finite);
  EXPECT_NEAR(norm.norm, std::sqrt(expected) / scale, 1e-12 * std::sqrt(expected) / scale);

  // A NaN on the last rank shows on every rank.
  auto broken = shard;
  if (comm.rank() == comm.size() - 1 && !broken.empty())
    broken.back() = zero::half::from_bits(0x7e00);
  const auto bad = zero::global_grad_norm(comm, zero::sum_of_squares(zero::view(broken)));
  EXPECT_FALSE(bad.finite);
  EXPECT_TRUE(std::isnan(bad.norm));
}

// Fills this rank's gradients for a step, with an Inf on one rank every fifth step.
template <class C>
void backward(C& comm, int step, double scale, std::vector<zero::half>& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i)
    grads[i] =
        zero::half(std::cos(0.1f * static_cast<float>(i + step)) * static_cast<float>(scale) / 64);
  if (step % 5 == 4 && comm.rank() == (step / 5) % comm.size())
    grads[static_cast<std::size_t>(step) % grads.size()] = zero::half::from_bits(0x7c00);
}

// Every rank must end with the same scale, step count and weights.
template <class C>
void expect_same_on_every_rank(C& comm, std::vector<float> values) {
  auto lowest = values, highest = values;
  comm.all_reduce(lowest, zero::ReduceOp::min).wait();
  comm.all_reduce(highest, zero::ReduceOp::max).wait();
  EXPECT_EQ(lowest, highest);
}

// The engine's step, in miniature: check, agree, skip or step, update the scaler.
TYPED_TEST(GlobalAgreement, MixedPrecisionLoopStaysInStep) {
  auto& comm = this->communicator;
  const std::size_t n = 333;
  std::vector<float> master(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
  std::vector<zero::half> grads(n), weights(n);
  zero::Adam adam({.lr = 1e-2});
  zero::DynamicLossScaler scaler({.init_scale = 1024.0, .scale_window = 4, .hysteresis = 1});
  for (int step = 0; step < 24; ++step) {
    backward(comm, step, scaler.scale(), grads);
    const auto before = master;
    // example-begin mixed-precision-step
    // Every rank checks its gradients; all skip the step if any rank found a NaN or an Inf.
    const bool overflow = zero::global_overflow(comm, zero::has_overflow(zero::view(grads)));
    if (!overflow) {
      // One pass: unscale on the fly, Adam on the fp32 master weights, half copy for compute.
      const auto update = adam.begin_step();
      zero::fused_step(update, zero::view(master), {zero::view(m), zero::view(v)},
                       zero::view(grads), static_cast<float>(1.0 / scaler.scale()),
                       zero::view(weights));
    }
    scaler.update(overflow); // the same outcome on every rank: the same scale everywhere
    // example-end mixed-precision-step
    EXPECT_EQ(overflow, step % 5 == 4) << step;
    if (overflow) {
      EXPECT_EQ(master, before);
    }
    EXPECT_EQ(scaler.last_step_skipped(), overflow);
  }
  expect_same_on_every_rank(comm,
                            {static_cast<float>(scaler.scale()),
                             static_cast<float>(adam.step_count()), master[0], master[n - 1]});
  EXPECT_EQ(adam.step_count(), 24 - 4);
}

// With clipping, the sum of squares is the overflow check too: one read of the gradients and
// one all-reduce give both.
TYPED_TEST(GlobalAgreement, ClippedLoopStaysInStep) {
  auto& comm = this->communicator;
  const std::size_t n = 333;
  const double max_norm = 0.1;
  std::vector<float> master(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
  std::vector<zero::half> grads(n), weights(n);
  zero::AdamW adamw({.lr = 1e-2});
  zero::DynamicLossScaler scaler({.init_scale = 1024.0, .scale_window = 4, .hysteresis = 1});
  for (int step = 0; step < 24; ++step) {
    backward(comm, step, scaler.scale(), grads);
    // example-begin clipped-step
    const double inverse_scale = 1.0 / scaler.scale();
    const zero::GradNorm norm =
        zero::global_grad_norm(comm, zero::sum_of_squares(zero::view(grads)), inverse_scale);
    if (norm.finite) {
      const double multiplier = zero::clip_coefficient(norm, max_norm) * inverse_scale;
      zero::fused_step(adamw.begin_step(), zero::view(master), {zero::view(m), zero::view(v)},
                       zero::view(grads), static_cast<float>(multiplier), zero::view(weights));
    }
    scaler.update(!norm.finite);
    // example-end clipped-step
    EXPECT_EQ(norm.finite, step % 5 != 4) << step;
    if (norm.finite) {
      EXPECT_GT(norm.norm, max_norm) << "these gradients are clipped";
    }
  }
  expect_same_on_every_rank(comm,
                            {static_cast<float>(scaler.scale()),
                             static_cast<float>(adamw.step_count()), master[0], master[n - 1]});
}

} // namespace
