#pragma once
// The three trainers of train_torch over the same model, data and steps. Rank r of N takes the r-th
// share of each step's sequences (train_gpt's data rule); the loss reported is the global batch's.

#include "../train_gpt/data.hpp"
#include "flags.hpp"
#include "gpt.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/torch/sharded_module.hpp>

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace train_torch {

struct History {
  std::vector<double> loss, step_seconds;
  double final_loss = 0; // the final weights on the batch of step `steps`
  // This rank's model states in memory (zero: the engine's report, the fp32 compute copy beside
  // the master weights included; libtorch: weights, gradients, Adam's two moments) and zero's
  // buffers besides (gradient buckets, stage 3's gather buffers).
  std::size_t model_state_bytes = 0, buffer_bytes = 0;
};

// Sequences [first, first + count) of step `step`'s global batch, as int64 [count, seq] tensors.
inline std::pair<torch::Tensor, torch::Tensor> batch(const train_gpt::Tokens& data, const Flags& f,
                                                     int step, std::int64_t first,
                                                     std::int64_t count) {
  const std::size_t seq = std::size_t(f.model.seq);
  std::vector<std::uint8_t> inputs(std::size_t(count) * seq), targets(inputs.size());
  data.batch(step, std::size_t(f.batch), seq, std::size_t(first), std::size_t(count), inputs.data(),
             targets.data());
  const auto as_tensor = [&](std::vector<std::uint8_t>& bytes) {
    return torch::from_blob(bytes.data(), {count, f.model.seq}, torch::kUInt8).to(torch::kLong);
  };
  return {as_tensor(inputs), as_tensor(targets)};
}

inline double mean_over_ranks(zero::MpiCommunicator& world, double value) {
  double sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, world.native_handle());
  return sum / world.size();
}

inline Gpt make_model(const Flags& f) {
  torch::manual_seed(f.seed); // every rank the same weights (zero broadcasts rank 0's anyway)
  return Gpt(f.model);
}

// zero's engine at stage S with `optimizer` (zero::Adam or zero::StatelessSGD), through
// zero::torch.
template <int S, class Optimizer>
History train_zero(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data,
                   const Optimizer& optimizer) {
  using Engine = zero::Engine<zero::Stage<S>, zero::MpiCommunicator, zero::host, Optimizer,
                              zero::StaticLossScaler, zero::ComputeTypes<float>>;
  // example-begin train-torch
  Gpt model = make_model(f);
  const auto layers = zero::torch::ModuleLayers::grouped(*model, model->layer_groups());
  zero::EngineOptions options;
  options.deterministic = f.deterministic;
  Engine engine(world, layers.specs(), optimizer, zero::StaticLossScaler{}, options);
  zero::torch::ShardedModule<Engine> sharded(engine, *model, layers);
  const auto run = [&](std::int64_t layer, auto function, const torch::Tensor& input) {
    return sharded.call(std::size_t(layer), function, input);
  };
  // example-end train-torch
  const std::int64_t share = f.batch / world.size();
  History h;
  for (int step = 0; step < f.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    // example-begin train-torch-step
    const auto [tokens, targets] = batch(data, f, step, world.rank() * share, share);
    const torch::Tensor loss = model->loss(run, tokens, targets);
    sharded.backward(loss); // each layer's gradient goes to the engine as autograd reaches it
    sharded.step();         // instead of optimizer.step()
    // example-end train-torch-step
    h.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    h.loss.push_back(mean_over_ranks(world, loss.item<double>()));
  }
  {
    const torch::NoGradGuard no_grad; // a forward only: every rank, since stage 3 gathers
    const auto [tokens, targets] = batch(data, f, f.steps, world.rank() * share, share);
    const torch::Tensor final_loss = model->loss(run, tokens, targets);
    h.final_loss = mean_over_ranks(world, final_loss.item<double>());
  }
  const zero::MemoryReport memory = engine.memory();
  h.model_state_bytes = memory.in_memory() - memory.buffers;
  h.buffer_bytes = memory.buffers;
  if (!f.save_state_dict.empty()) sharded.save_state_dict(f.save_state_dict);
  return h;
}

// zero's engine at stage S with the optimizer the flags name; instantiated in stage0.cpp ...
// stage3.cpp, one file per stage so that they compile in parallel.
template <int S>
History train_zero(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data) {
  if (f.optimizer == "sgd") return train_zero<S>(world, f, data, zero::StatelessSGD({.lr = f.lr}));
  return train_zero<S>(world, f, data, zero::Adam({.lr = f.lr}));
}
extern template History train_zero<0>(zero::MpiCommunicator&, const Flags&,
                                      const train_gpt::Tokens&);
extern template History train_zero<1>(zero::MpiCommunicator&, const Flags&,
                                      const train_gpt::Tokens&);
extern template History train_zero<2>(zero::MpiCommunicator&, const Flags&,
                                      const train_gpt::Tokens&);
extern template History train_zero<3>(zero::MpiCommunicator&, const Flags&,
                                      const train_gpt::Tokens&);

History train_plain(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data);
History train_ddp(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data);

// What plain libtorch keeps per parameter: the weights, the gradients and Adam's two moments (SGD
// without momentum: none).
inline std::size_t libtorch_state_bytes(Gpt& model, const Flags& f) {
  std::size_t n = 0;
  for (const torch::Tensor& p : model->parameters())
    n += std::size_t(p.numel());
  return (f.optimizer == "adam" ? 4 : 2) * n * sizeof(float);
}

} // namespace train_torch
