// docs/libtorch.md's program: ZeRO-3 for a torch::nn::Module, trained next to plain libtorch on the
// same global batch; exits 1 if their weights part. Run at any rank count:
//   mpirun -np 3 zero_doc_libtorch_trainer
#include <zero/comm/mpi_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/torch/sharded_module.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

// example-begin libtorch-model
// A module whose forward runs each child through `call(layer, function, input)`: zero's
// ShardedModule::call, or, in plain libtorch, the function itself. The functions capture by value:
// at stage 3 they run again during backward.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(16, 64))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({64})))),
        fc2(register_module("fc2", torch::nn::Linear(64, 4))) {}

  template <class Call>
  torch::Tensor forward(Call&& call, const torch::Tensor& x) {
    torch::Tensor h = call(
        0, [this](const torch::Tensor& in) { return torch::relu(fc1(in)); }, x);
    h = call(
        1, [this](const torch::Tensor& in) { return norm(in); }, h);
    return call(
        2, [this](const torch::Tensor& in) { return fc2(in); }, h);
  }

  torch::nn::Linear fc1;
  torch::nn::LayerNorm norm;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);
// example-end libtorch-model

int main(int argc, char** argv) {
  zero::MpiCommunicator world(argc, argv);
  torch::set_num_threads(1); // the ranks share the machine's cores
  torch::manual_seed(0);
  Net model;
  torch::manual_seed(0);
  Net plain; // the same weights, for libtorch alone
  // example-begin libtorch-engine
  // fp32 only (ComputeTypes<float>): the engine's stores compile once, not three times.
  using Engine = zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::Adam,
                              zero::StaticLossScaler, zero::ComputeTypes<float>>;
  const auto layers = zero::torch::ModuleLayers::by_child(*model); // fc1, norm, fc2
  Engine engine(world, layers.specs(), zero::Adam({.lr = 1e-2}), zero::StaticLossScaler{});
  zero::torch::ShardedModule<Engine> sharded(engine, *model, layers);
  const auto call = [&](std::size_t l, auto function, const torch::Tensor& input) {
    return sharded.call(l, function, input);
  };
  // example-end libtorch-engine
  torch::optim::Adam adam(plain->parameters(), torch::optim::AdamOptions(1e-2));
  const auto direct = [](std::size_t, auto function, const torch::Tensor& in) {
    return function(in);
  };

  const std::int64_t rows = 4, all_rows = rows * world.size();
  for (int step = 0; step < 5; ++step) {
    torch::manual_seed(std::uint64_t(100 + step)); // every rank the same global batch
    const torch::Tensor x = torch::randn({all_rows, 16}), y = torch::randn({all_rows, 4});
    const torch::Tensor x_mine = x.narrow(0, rows * world.rank(), rows);
    const torch::Tensor y_mine = y.narrow(0, rows * world.rank(), rows);
    // example-begin libtorch-step
    const torch::Tensor loss = torch::mse_loss(model->forward(call, x_mine), y_mine);
    sharded.backward(loss); // instead of loss.backward()
    sharded.step();         // instead of optimizer.step()
    // example-end libtorch-step
    adam.zero_grad();
    torch::mse_loss(plain->forward(direct, x), y).backward();
    adam.step();
  }
  // The engine's weights against libtorch's (a collective: every rank gathers them).
  float worst = 0;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::vector<float> weights = engine.get_layer(l);
    std::size_t offset = 0;
    for (const zero::torch::ModuleParameter& p : layers.layer(l)) {
      const torch::Tensor expected = plain->named_parameters()[p.name].detach().reshape(-1);
      const torch::Tensor got = torch::tensor(
          std::vector<float>(weights.begin() + std::ptrdiff_t(offset),
                             weights.begin() + std::ptrdiff_t(offset) + expected.numel()));
      worst = std::max(worst, (got - expected).abs().max().item<float>());
      offset += std::size_t(expected.numel());
    }
  }
  if (world.rank() == 0)
    std::printf("zero stage 3 on %d ranks against plain libtorch after 5 steps: largest weight "
                "difference %.3g\n",
                world.size(), double(worst));
  return worst <= 1e-5f ? 0 : 1;
}
