#pragma once
// Builds the engine for a plan and the chosen optimizer, loads the initial weights and trains.
// Instantiated once per stage (stage0.cpp ... stage3.cpp), so that they compile in parallel.

#include "training.hpp"
#include "weights.hpp"

#include <zero/optim/from_config.hpp>
#include <zero/precision/any_loss_scaler.hpp>

namespace train_gpt {

template <class Plan, class Optimizer>
History run_with(zero::MpiCommunicator& world, const Flags& f, const Tokens& data,
                 Optimizer optimizer) {
  using Engine =
      zero::Engine<Plan, zero::MpiCommunicator, zero::host, Optimizer, zero::AnyLossScaler>;
  zero::EngineOptions options =
      f.ds ? zero::EngineOptions::from_config(*f.ds) : zero::EngineOptions{};
  options.compute_dtype = f.dtype;
  options.deterministic = f.deterministic;
  if (!f.ds) options.persistence_threshold = 0; // every layer sharded under stage 3
  Engine engine(world, gpt::specs(f.model), std::move(optimizer),
                zero::AnyLossScaler::for_run(f.dtype, f.ds ? &*f.ds : nullptr), options);
  const InitialWeights init = f.init_npy.empty() ? InitialWeights::random(f.model, f.seed)
                                                 : InitialWeights::from_npy(f.model, f.init_npy);
  for (std::size_t l = 0; l < engine.layers(); ++l)
    engine.set_layer(l, init.layers[l]);
  return train(world, f, engine, data);
}

// The optimizer the flags and the config ask for: the config's section, with the flags' type,
// lr and weight decay (the flags were merged with the config already; they win).
inline zero::config::OptimizerConfig optimizer_config(const Flags& f) {
  using zero::config::OptimizerType;
  auto o = f.ds && f.ds->optimizer ? *f.ds->optimizer : zero::config::OptimizerConfig{};
  o.type = f.optimizer == "adamw" ? OptimizerType::adamw : OptimizerType::adam;
  o.adam_w_mode = false; // "adam" here is torch.optim.Adam; "adamw" names the decoupled one
  o.lr = f.lr;
  o.weight_decay = f.weight_decay;
  return o;
}

template <class Plan>
History run(zero::MpiCommunicator& world, const Flags& f, const Tokens& data) {
  return zero::with_optimizer<zero::Adam, zero::AdamW>(optimizer_config(f), [&](auto optimizer) {
    return run_with<Plan>(world, f, data, std::move(optimizer));
  });
}

History run_stage0(zero::MpiCommunicator&, const Flags&, const Tokens&);
History run_stage1(zero::MpiCommunicator&, const Flags&, const Tokens&);
History run_stage2(zero::MpiCommunicator&, const Flags&, const Tokens&);
History run_stage3(zero::MpiCommunicator&, const Flags&, const Tokens&);

} // namespace train_gpt
