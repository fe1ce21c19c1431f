#pragma once
// Builds the engine for a plan and the chosen optimizer, loads the initial weights and trains.
// Instantiated once per stage (stage0.cpp ... stage3.cpp), so that they compile in parallel.

#include "../common/optimizer_config.hpp"
#include "training.hpp"
#include "weights.hpp"

#include <zero/engines.hpp> // the engines, prebuilt where zero::engines is linked
#include <zero/optim/from_config.hpp>
#include <zero/precision/any_loss_scaler.hpp>

namespace train_gpt {

template <class Plan, class Optimizer>
History run_with(Ranks& ranks, const Flags& f, const Tokens& data, Optimizer optimizer) {
  using Engine =
      zero::Engine<Plan, zero::MpiCommunicator, zero::host, Optimizer, zero::AnyLossScaler>;
  zero::EngineOptions options =
      f.ds ? zero::EngineOptions::from_config(*f.ds) : zero::EngineOptions{};
  options.compute_dtype = f.dtype;
  options.deterministic = f.deterministic;
  if (!f.ds) options.persistence_threshold = 0; // every layer sharded under stage 3
  options.moments = moment_storage(f);          // the flag over the config's moment_bits
  options.master = master_storage(f);           // and over its master_residual_bits
  // The model states of this rank's slices, sharded over the ranks holding the same slices.
  Engine engine(ranks.groups, gpt::specs(f.model), std::move(optimizer),
                zero::AnyLossScaler::for_run(f.dtype, f.ds ? &*f.ds : nullptr), options);
  const WholeTensors init = f.init_npy.empty() ? InitialWeights::random(f.model, f.seed)
                                               : InitialWeights::from_npy(f.model, f.init_npy);
  const std::vector<std::vector<float>> layers =
      layers_of(f.model, init, ranks.groups.tensor_rank());
  for (std::size_t l = 0; l < engine.layers(); ++l)
    engine.set_layer(l, layers[l]);
  return train(ranks, f, engine, data);
}

template <class Plan>
History run(Ranks& ranks, const Flags& f, const Tokens& data) {
  return zero::with_optimizer<zero::Adam, zero::AdamW>(
      examples::optimizer_config(f),
      [&](auto optimizer) { return run_with<Plan>(ranks, f, data, std::move(optimizer)); });
}

History run_stage0(Ranks&, const Flags&, const Tokens&);
History run_stage1(Ranks&, const Flags&, const Tokens&);
History run_stage2(Ranks&, const Flags&, const Tokens&);
History run_stage3(Ranks&, const Flags&, const Tokens&);

#if ZERO_TRAIN_GPT_CUDA
// --device cuda's runs (run_device.hpp), one per stage.
History run_stage0_cuda(zero::MpiCommunicator&, const Flags&, const Tokens&);
History run_stage1_cuda(zero::MpiCommunicator&, const Flags&, const Tokens&);
History run_stage2_cuda(zero::MpiCommunicator&, const Flags&, const Tokens&);
History run_stage3_cuda(zero::MpiCommunicator&, const Flags&, const Tokens&);
#endif

} // namespace train_gpt
