// train_torch's libtorch trainers: plain (one process, the whole batch, torch::optim::Adam or SGD),
// the reference zero's runs are compared with, and ddp: each rank its share, then the gradients
// averaged by c10d's Gloo all-reduce, flattened into one bucket after backward (what
// DistributedDataParallel does for a model that fits its first 25 MB bucket; libtorch 1.13's C++
// API has no DDP module), then the optimizer's step on every rank.
#include "training.hpp"

#include <zero/checkpoint/safetensors.hpp>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace train_torch {
namespace {

// The module's weights as a safetensors state_dict, as zero::torch writes them.
void save_state_dict(Gpt& model, const std::string& file) {
  std::vector<zero::NamedTensor> tensors;
  for (const auto& p : model->named_parameters()) {
    std::vector<std::size_t> shape(p.value().sizes().begin(), p.value().sizes().end());
    tensors.push_back(
        {p.key(), shape,
         zero::View<const float>(p.value().data_ptr<float>(), std::size_t(p.value().numel()))});
  }
  zero::write_safetensors(file, tensors, {{"zero.source", "train_torch --trainer plain/ddp"}});
}

template <class AverageGradients>
History train_libtorch(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data,
                       std::int64_t first, std::int64_t share, AverageGradients average) {
  Gpt model = make_model(f);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (f.optimizer == "sgd")
    optimizer =
        std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(f.lr));
  else
    optimizer =
        std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(f.lr));
  History h;
  for (int step = 0; step < f.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const auto [tokens, targets] = batch(data, f, step, first, share);
    optimizer->zero_grad();
    const torch::Tensor loss = model->loss(CallDirectly{}, tokens, targets);
    loss.backward();
    average(model);
    optimizer->step();
    h.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    h.loss.push_back(mean_over_ranks(world, loss.item<double>()));
  }
  {
    const torch::NoGradGuard no_grad;
    const auto [tokens, targets] = batch(data, f, f.steps, first, share);
    h.final_loss =
        mean_over_ranks(world, model->loss(CallDirectly{}, tokens, targets).item<double>());
  }
  h.model_state_bytes = libtorch_state_bytes(model, f);
  if (!f.save_state_dict.empty() && world.rank() == 0) save_state_dict(model, f.save_state_dict);
  return h;
}

} // namespace

History train_plain(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data) {
  zero::require(world.size() == 1, "--trainer plain runs on one rank (it is the reference for "
                                   "zero's runs at any rank count); use --trainer ddp for " +
                                       std::to_string(world.size()));
  return train_libtorch(world, f, data, 0, f.batch, [](Gpt&) {});
}

History train_ddp(zero::MpiCommunicator& world, const Flags& f, const train_gpt::Tokens& data) {
  std::string store_file = f.store;
  if (store_file.empty()) { // one per mpirun job: Open MPI names it in the environment
    const char* job = std::getenv("PMIX_NAMESPACE");
    std::string name = job ? job : "local";
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    store_file = "/tmp/train_torch_store_" + name;
  }
  const auto store = c10::make_intrusive<c10d::FileStore>(store_file, world.size());
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(store, world.rank(), world.size(), options);
  const std::int64_t share = f.batch / world.size();
  History h = train_libtorch(world, f, data, world.rank() * share, share, [&](Gpt& model) {
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : model->parameters())
      grads.push_back(p.grad().view(-1));
    std::vector<torch::Tensor> bucket = {torch::cat(grads)};
    group.allreduce(bucket)->wait();
    bucket[0].div_(double(world.size()));
    std::int64_t offset = 0;
    for (torch::Tensor& g : grads) {
      g.copy_(bucket[0].narrow(0, offset, g.numel()));
      offset += g.numel();
    }
  });
  world.barrier();
  if (world.rank() == 0) std::remove(store_file.c_str());
  return h;
}

} // namespace train_torch
