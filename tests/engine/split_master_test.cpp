// Split master weights (EngineOptions::master): every stage gets the bits of stage 0 (with fp32
// and with 8-bit moments), a 16-bit residual trains as an fp32 master does and an 8-bit one
// close to it, the report counts the residuals, and what cannot keep them refuses by name.

#include "training_scenario.hpp"

#include <zero/engine/engine.hpp>
#include <zero/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace split_master_test {

using namespace zero::testing;

constexpr std::size_t wide = 3 * 2048 + 500;

zero::EngineOptions split(zero::MasterStorage master,
                          zero::MomentStorage moments = zero::MomentStorage::fp32) {
  zero::EngineOptions options;
  options.master = master;
  options.moments = moments;
  options.eight_bit_min_elements = 1000;
  return options;
}

template <class Plan, class Opt = zero::Adam>
Outcome run(const Scenario& scenario, zero::EngineOptions options) {
  return train<Plan, zero::host, Opt>(scenario, zero::StaticLossScaler{}, options);
}

template <class Opt = zero::Adam>
void expect_every_stage_alike(const Scenario& scenario, const zero::EngineOptions& options,
                              const std::string& what) {
  const Outcome zero_stage = run<zero::Stage<0>, Opt>(scenario, options);
  expect_same_weights(zero_stage, run<zero::Stage<1>, Opt>(scenario, options), true,
                      what + ", stage 1");
  expect_same_weights(zero_stage, run<zero::Stage<2>, Opt>(scenario, options), true,
                      what + ", stage 2");
  expect_same_weights(zero_stage, run<zero::Stage<3>, Opt>(scenario, options), true,
                      what + ", stage 3");
}

TEST(SplitMaster, EveryStageGetsTheBitsOfStageZero) {
  const Scenario bf16{
      .dtype = zero::DType::bfloat16, .bucket = 997, .steps = 3, .wide_layer = wide};
  const Scenario fp16{.dtype = zero::DType::float16,
                      .accumulation = 2,
                      .clipping = 0.5,
                      .bucket = 300,
                      .steps = 3,
                      .wide_layer = wide};
  expect_every_stage_alike(bf16, split(zero::MasterStorage::split_16bit), "bf16, 16 bits");
  expect_every_stage_alike(fp16, split(zero::MasterStorage::split_8bit), "fp16, 8 bits, clipped");
  expect_every_stage_alike(
      bf16, split(zero::MasterStorage::split_8bit, zero::MomentStorage::blockwise_8bit),
      "bf16, 8 bits, 8-bit moments");
  // SGD with momentum (stage 3's engine is built for other tests of this binary too).
  expect_same_weights(run<zero::Stage<0>, zero::SGD>(bf16, split(zero::MasterStorage::split_16bit)),
                      run<zero::Stage<3>, zero::SGD>(bf16, split(zero::MasterStorage::split_16bit)),
                      true, "SGD, stage 3");
}

// The largest difference between two runs' weights, relative to the weights' scale.
float largest_difference(const Outcome& a, const Outcome& b) {
  float largest = 0;
  for (std::size_t l = 0; l < a.weights.size(); ++l)
    for (std::size_t i = 0; i < a.weights[l].size(); ++i)
      largest = std::max(largest, std::fabs(a.weights[l][i] - b.weights[l][i]) /
                                      std::max(1.0f, std::fabs(a.weights[l][i])));
  return largest;
}

// With bfloat16 and 16 bits the residual's unit is an fp32 ulp of the weight: the run follows the
// fp32-master run to within a few ulps (the half ulp below a power of two aside). With 8 bits
// each step may lose half of 2^-8 of a bfloat16 ulp (2^-16 relative): within a few of those.
// Without a master (bfloat16 weights updated in place) steps of lr = 0.01 on weights of about 1
// lose up to 2^-9 each.
TEST(SplitMaster, SixteenBitsTrainAsAnFp32MasterAndEightBitsCloseToIt) {
  const Scenario scenario{.dtype = zero::DType::bfloat16, .steps = 6, .wide_layer = wide};
  const Outcome fp32 = run<zero::Stage<2>>(scenario, {});
  const float sixteen = largest_difference(
      fp32, run<zero::Stage<2>>(scenario, split(zero::MasterStorage::split_16bit)));
  const float eight = largest_difference(
      fp32, run<zero::Stage<2>>(scenario, split(zero::MasterStorage::split_8bit)));
  EXPECT_LE(sixteen, 6 * 0x1p-23f) << "16-bit residuals";
  EXPECT_LE(eight, 6 * 0x1p-15f) << "8-bit residuals";
  EXPECT_GT(eight, 0.0f) << "8-bit residuals round";
}

// The report: 1 or 2 bytes an element of this rank's blocks for the masters, the moments as
// before; the paper's bytes with the residual in place of the fp32 master.
TEST(SplitMaster, TheReportCountsTheResiduals) {
  const std::size_t ranks = std::size_t(world().size());
  const Scenario scenario{.dtype = zero::DType::bfloat16, .steps = 1, .wide_layer = wide};
  for (const auto& [master, bytes] : {std::pair{zero::MasterStorage::split_8bit, 1u},
                                      std::pair{zero::MasterStorage::split_16bit, 2u}}) {
    const Outcome sharded = run<zero::Stage<1>>(scenario, split(master));
    EXPECT_EQ(sharded.memory.master_weights.memory, bytes * sharded.padded / ranks);
    EXPECT_EQ(sharded.memory.optimizer_states.memory, 2 * sizeof(float) * sharded.padded / ranks);
    const Outcome whole = run<zero::Stage<0>>(scenario, split(master));
    EXPECT_EQ(whole.memory.master_weights.memory, bytes * whole.padded);
    const Outcome fp32 = run<zero::Stage<0>>(scenario, {});
    EXPECT_DOUBLE_EQ(fp32.paper_bytes - whole.paper_bytes, (4.0 - bytes) * double(whole.psi));
  }
}

TEST(SplitMaster, AFloat32ComputeCopyRefusesThemByName) {
  expect_error_contains(
      [&] { run<zero::Stage<1>>(Scenario{.steps = 1}, split(zero::MasterStorage::split_16bit)); },
      "with compute_dtype float32 the compute weight is the master already");
}

} // namespace split_master_test
