// zero::torch with uneven shares of a batch, at 1, 2 and 3 ranks: a global batch of 25 samples is
// 13 + 12 at 2 ranks and 9 + 8 + 8 at 3. With EngineOptions::weigh_by_samples and
// backward(loss, samples), two SGD steps give plain libtorch's weights on the whole batch (within
// float rounding); backward(loss) without it gives each rank's mean the same weight, off by more
// than a hundred times that at 2 and 3 ranks.
#include "zero/torch/sharded_module.hpp"

#include "zero/engine/engine.hpp"
#include "zero/optim/sgd.hpp"

#include "comm_test.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace uneven_batch_test {

using SgdEngine = zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::SGD,
                               zero::StaticLossScaler, zero::ComputeTypes<float>>;
constexpr std::int64_t batch_size = 25;
constexpr double lr = 0.5;

struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl()
      : hidden(register_module("hidden", torch::nn::Linear(4, 6))),
        out(register_module("out", torch::nn::Linear(6, 2))) {}
  torch::nn::Linear hidden, out;
};
TORCH_MODULE(TwoLayers);

TwoLayers make_model() {
  torch::manual_seed(11);
  return TwoLayers();
}
// The whole batch of step `step`, the same on every rank.
std::pair<torch::Tensor, torch::Tensor> global_batch(int step) {
  torch::manual_seed(std::uint64_t(500 + step));
  return {torch::randn({batch_size, 4}), torch::randn({batch_size, 2})};
}
// This rank's rows: consecutive shares, the first ranks one more.
std::pair<std::int64_t, std::int64_t> my_rows(int rank, int ranks) {
  const std::int64_t base = batch_size / ranks, extra = batch_size % ranks;
  const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

// All parameters after two steps, flattened in named_parameters() order.
std::vector<float> flat(TwoLayers& m) {
  std::vector<float> all;
  for (const auto& p : m->parameters()) {
    const torch::Tensor c = p.detach().contiguous();
    all.insert(all.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return all;
}

std::vector<float> plain_libtorch() {
  TwoLayers m = make_model();
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(lr));
  for (int step = 0; step < 2; ++step) {
    const auto [x, y] = global_batch(step);
    sgd.zero_grad();
    torch::mse_loss(m->out(torch::tanh(m->hidden(x))), y).backward();
    sgd.step();
  }
  return flat(m);
}

std::vector<float> zero_torch(bool weigh) {
  auto& world = zero::testing::world();
  TwoLayers m = make_model();
  const auto layers = zero::torch::ModuleLayers::by_child(*m);
  zero::EngineOptions options;
  options.weigh_by_samples = weigh;
  SgdEngine engine(world, layers.specs(), zero::SGD({.lr = lr}), zero::StaticLossScaler{}, options);
  zero::torch::ShardedModule<SgdEngine> sharded(engine, *m, layers);
  const auto [first, last] = my_rows(world.rank(), world.size());
  for (int step = 0; step < 2; ++step) {
    const auto [x, y] = global_batch(step);
    const torch::Tensor h = sharded.call(
        0, [m](const torch::Tensor& in) mutable { return torch::tanh(m->hidden(in)); },
        x.slice(0, first, last));
    const torch::Tensor out = sharded.call(
        1, [m](const torch::Tensor& in) mutable { return m->out(in); }, h);
    const torch::Tensor loss = torch::mse_loss(out, y.slice(0, first, last)); // this rank's mean
    if (weigh)
      sharded.backward(loss, static_cast<std::size_t>(last - first));
    else
      sharded.backward(loss);
    EXPECT_TRUE(sharded.step().applied);
  }
  sharded.copy_to_module();
  return flat(m);
}

double largest_gap(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double gap = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    gap = std::max(gap, double(std::abs(a[i] - b[i])));
  return gap;
}

class TorchUnevenBatch : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); } // ranks share the cores
};

TEST_F(TorchUnevenBatch, WeighedBySamplesGivesTheWholeBatchsSteps) {
  const double gap = largest_gap(zero_torch(true), plain_libtorch());
  EXPECT_LT(gap, 1e-6) << "at " << zero::testing::world().size() << " ranks";
  if (zero::testing::world().rank() == 0)
    std::printf("weighed by samples: %.3g from libtorch\n", gap);
}

TEST_F(TorchUnevenBatch, WithoutWeighingEachRankWeighsTheSame) {
  const double gap = largest_gap(zero_torch(false), plain_libtorch());
  if (zero::testing::world().rank() == 0)
    std::printf("ranks weighed alike: %.3g from libtorch\n", gap);
  if (zero::testing::world().size() == 1)
    EXPECT_LT(gap, 1e-6);
  else
    EXPECT_GT(gap, 1e-4) << "uneven shares weighed alike should differ from the whole batch";
}

TEST_F(TorchUnevenBatch, SampleCountsNeedTheEnginesOption) {
  TwoLayers m = make_model();
  const auto layers = zero::torch::ModuleLayers::by_child(*m);
  SgdEngine engine(zero::testing::world(), layers.specs(), zero::SGD({.lr = lr}),
                   zero::StaticLossScaler{}, {});
  zero::torch::ShardedModule<SgdEngine> sharded(engine, *m, layers);
  const torch::Tensor loss =
      sharded
          .call(
              0, [m](const torch::Tensor& in) mutable { return m->hidden(in); },
              torch::ones({2, 4}))
          .sum();
  try {
    sharded.backward(loss, 2);
    ADD_FAILURE() << "backward(loss, samples) was accepted by an engine that weighs ranks alike";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("EngineOptions::weigh_by_samples"), std::string::npos)
        << e.what();
  }
}

} // namespace uneven_batch_test
