#pragma once
// Builds the engine for a plan, a placement and the chosen optimizer, loads the initial weights
// and trains. Instantiated once per stage and placement (stage0.cpp ... stage3_nvme.cpp), so they
// compile in parallel.

#include "training.hpp"

#include <zero/optim/from_config.hpp>

namespace train {

// Where the model states live: all in memory, the optimizer's on NVMe, or (stage 3) the
// parameters' too.
using InMemory = zero::Placement<>;
using NvmeOptimizer = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
using NvmeEverything =
    zero::Placement<zero::optimizer_states_in<zero::nvme>, zero::parameters_in<zero::nvme>>;

template <class Plan, class Where, class Optimizer>
History run_with(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                 InitialWeights& init, Optimizer optimizer) {
  using Engine = zero::Engine<Plan, zero::MpiCommunicator, Where, Optimizer, AnyLossScaler>;
  Engine engine = make_engine<Engine>(world, f, std::move(optimizer));
  for (std::size_t l = 0; l < engine.layers(); ++l)
    engine.set_layer(l, init.layer(l));
  return train(world, f, engine, data);
}

// The optimizer the flags and the config ask for: the config's section, with the flags' type,
// lr, weight decay and momentum (the flags were merged with the config already; they win).
inline zero::config::OptimizerConfig optimizer_config(const Flags& f) {
  using zero::config::OptimizerType;
  auto o = f.ds && f.ds->optimizer ? *f.ds->optimizer : zero::config::OptimizerConfig{};
  o.type = f.optimizer == "sgd"     ? OptimizerType::sgd
           : f.optimizer == "adamw" ? OptimizerType::adamw
           : f.optimizer == "lamb"  ? OptimizerType::lamb
                                    : OptimizerType::adam;
  o.adam_w_mode = false; // "adam" here is torch.optim.Adam; "adamw" names the decoupled one
  o.lr = f.lr;
  o.weight_decay = f.weight_decay;
  o.momentum = f.momentum;
  return o;
}

template <class Plan, class Where = InMemory>
History run(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
            InitialWeights& init) {
  return zero::with_optimizer(optimizer_config(f), [&](auto optimizer) {
    return run_with<Plan, Where>(world, f, data, init, std::move(optimizer));
  });
}

History run_stage0(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage1(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage2(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage3(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
// With the NVMe tier (built with zero::nvme; see CMakeLists.txt).
History run_stage1_nvme(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage2_nvme(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage3_nvme(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage3_nvme_params(zero::MpiCommunicator&, const Flags&, const Dataset&,
                               InitialWeights&);
// Every model state on a CUDA device (--device cuda; built with zero::cuda, device_training.hpp).
History run_stage0_cuda(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage1_cuda(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage2_cuda(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
History run_stage3_cuda(zero::MpiCommunicator&, const Flags&, const Dataset&, InitialWeights&);
// ZeRO-Offload: --device cuda with the optimizer states on the host (stages 1-3, as DeepSpeed).
History run_stage1_cuda_offload(zero::MpiCommunicator&, const Flags&, const Dataset&,
                                InitialWeights&);
History run_stage2_cuda_offload(zero::MpiCommunicator&, const Flags&, const Dataset&,
                                InitialWeights&);
History run_stage3_cuda_offload(zero::MpiCommunicator&, const Flags&, const Dataset&,
                                InitialWeights&);

} // namespace train
