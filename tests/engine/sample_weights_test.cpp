// Uneven shares of a batch, at 1, 2 and 3 ranks: a global batch of 25 samples is 13 + 12 samples
// at 2 ranks and 9 + 8 + 8 at 3. Promises:
// - with EngineOptions::weigh_by_samples, every sample weighs the same wherever it was: one SGD
//   step gives the weights of the mean gradient over all 25 samples, at every stage, with and
//   without gradient accumulation (micro-steps of different sizes);
// - without it, each rank's mean gradient weighs the same (as documented, and as PyTorch's DDP
//   does), which is not that mean at 2 and 3 ranks;
// - a rank that does not say how many samples it had is an error on every rank, and counts given
//   to an engine that weighs ranks alike are refused.
// The engines are the prebuilt ones (zero::PrebuiltEngine<S, SGD>, linked from zero::engines where
// it is built): the loss scaling a static 1 picked at run time, every compute type, fp32 used.

#include "comm_test.hpp"

#include <zero/engines.hpp>
#include <zero/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace {

using zero::testing::world;

constexpr std::size_t batch = 25;
const std::vector<std::size_t> layer_sizes{5, 7};

// Sample i's gradient of parameter j of layer l: multiples of 1/8, so that sums are exact.
float sample_gradient(std::size_t i, std::size_t l, std::size_t j) {
  return static_cast<float>(static_cast<int>((i * 7 + j * 3 + l * 5) % 11) - 5) * 0.125f;
}
float initial_weight(std::size_t l, std::size_t j) {
  return 0.5f + 0.01f * static_cast<float>(10 * l + j);
}

// This rank's samples: consecutive shares, the first ranks one more when the batch does not divide.
std::pair<std::size_t, std::size_t> my_samples(int rank, int ranks) {
  const std::size_t r = static_cast<std::size_t>(rank), n = static_cast<std::size_t>(ranks);
  const std::size_t base = batch / n, extra = batch % n;
  const std::size_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

struct Run {
  bool weigh = true;
  int accumulation = 1;
  bool forget_samples_on_last_rank = false;
};

// The loss scaling of an fp32 run: none (a static scale of 1).
zero::AnyLossScaler no_scaling() {
  return zero::AnyLossScaler(zero::StaticLossScaler{});
}

template <int S>
std::vector<std::vector<float>> train_one_step(const Run& run) {
  auto& comm = world();
  std::vector<zero::ParameterSpec> specs;
  for (std::size_t l = 0; l < layer_sizes.size(); ++l)
    specs.push_back(
        {"layer" + std::to_string(l), layer_sizes[l], zero::DType::float32, static_cast<int>(l)});
  zero::EngineOptions options;
  options.weigh_by_samples = run.weigh;
  options.gradient_accumulation_steps = run.accumulation;
  options.reduce_bucket_elements = 4; // several buckets, some across layers
  zero::PrebuiltEngine<S, zero::SGD> engine(comm, specs, zero::SGD({.lr = 1.0}), no_scaling(),
                                            options);
  for (std::size_t l = 0; l < layer_sizes.size(); ++l) {
    std::vector<float> w(layer_sizes[l]);
    for (std::size_t j = 0; j < w.size(); ++j)
      w[j] = initial_weight(l, j);
    engine.set_layer(l, w);
  }
  const auto [first, last] = my_samples(comm.rank(), comm.size());
  const bool forget = run.forget_samples_on_last_rank && comm.rank() + 1 == comm.size();
  for (int m = 0; m < run.accumulation; ++m) {
    // Micro-step m takes its part of this rank's share (parts of different sizes).
    const std::size_t share = last - first;
    const std::size_t begin =
        first + share * static_cast<std::size_t>(m) / static_cast<std::size_t>(run.accumulation);
    const std::size_t end = first + share * static_cast<std::size_t>(m + 1) /
                                        static_cast<std::size_t>(run.accumulation);
    for (std::size_t l = 0; l < layer_sizes.size(); ++l)
      (void)engine.acquire(l);
    for (std::size_t l = layer_sizes.size(); l-- > 0;) {
      auto held = engine.acquire(l);
      auto grads = engine.template gradients<float>(l);
      for (std::size_t j = 0; j < grads.size(); ++j) {
        // Weighed: the sum over this micro-step's samples; otherwise their mean.
        float sum = 0.0f;
        for (std::size_t i = begin; i < end; ++i)
          sum += sample_gradient(i, l, j);
        grads[j] = run.weigh ? sum : sum / static_cast<float>(end - begin);
      }
      engine.grads_ready(l);
    }
    if (run.weigh && !forget) engine.add_samples(end - begin);
  }
  engine.step();
  std::vector<std::vector<float>> weights;
  for (std::size_t l = 0; l < layer_sizes.size(); ++l)
    weights.push_back(engine.get_layer(l));
  return weights;
}

// After one step of SGD with lr 1 from the mean over all samples: w - mean gradient.
float weight_of_global_mean(std::size_t l, std::size_t j) {
  double sum = 0.0;
  for (std::size_t i = 0; i < batch; ++i)
    sum += sample_gradient(i, l, j);
  return static_cast<float>(initial_weight(l, j) - sum / static_cast<double>(batch));
}

// The largest difference from the weights of the global mean.
double gap_from_global_mean(const std::vector<std::vector<float>>& weights) {
  double gap = 0.0;
  for (std::size_t l = 0; l < weights.size(); ++l)
    for (std::size_t j = 0; j < weights[l].size(); ++j)
      gap = std::max(gap, std::abs(static_cast<double>(weights[l][j]) -
                                   static_cast<double>(weight_of_global_mean(l, j))));
  return gap;
}

template <int S>
void expect_global_mean(int accumulation, const std::string& what) {
  const auto weights = train_one_step<S>({.weigh = true, .accumulation = accumulation});
  // A few float roundings (the average over ranks, the factor); a rank weighted wrongly moves the
  // weights by about 1e-2 here.
  EXPECT_LT(gap_from_global_mean(weights), 1e-6) << what << " at " << world().size() << " ranks";
}

TEST(SampleWeights, EverySampleWeighsTheSameAtEveryStage) {
  for (const int accumulation : {1, 2}) {
    const std::string what = "accumulation " + std::to_string(accumulation);
    expect_global_mean<0>(accumulation, "stage 0, " + what);
    expect_global_mean<1>(accumulation, "stage 1, " + what);
    expect_global_mean<2>(accumulation, "stage 2, " + what);
    expect_global_mean<3>(accumulation, "stage 3, " + what);
  }
}

// Without weighing, each rank's mean weighs the same: the mean of the means, which is the global
// mean only when the shares are equal (one rank).
TEST(SampleWeights, WithoutWeighingEachRankWeighsTheSame) {
  const auto weights = train_one_step<2>({.weigh = false});
  const double gap = gap_from_global_mean(weights);
  if (world().size() == 1)
    EXPECT_LT(gap, 1e-6);
  else
    EXPECT_GT(gap, 5e-4) << "uneven shares weighed alike should differ from the global mean";
}

TEST(SampleWeights, ARankWithoutCountsIsAnErrorOnEveryRank) {
  try {
    train_one_step<1>({.forget_samples_on_last_rank = true});
    ADD_FAILURE() << "a step without every rank's sample count was taken";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 rank(s) did not"), std::string::npos) << e.what();
  }
}

TEST(SampleWeights, CountsNeedTheOption) {
  std::vector<zero::ParameterSpec> specs{{"w", 3, zero::DType::float32, 0}};
  zero::PrebuiltEngine<0, zero::SGD> engine(world(), specs, zero::SGD({.lr = 1.0}), no_scaling(),
                                            {});
  try {
    engine.add_samples(4);
    ADD_FAILURE() << "add_samples was accepted by an engine that weighs ranks alike";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("set EngineOptions::weigh_by_samples"), std::string::npos)
        << e.what();
  }
}

} // namespace
