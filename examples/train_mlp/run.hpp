#pragma once
// Builds the engine for a plan, a placement and the chosen optimizer, loads the initial weights
// and trains. Instantiated once per stage and placement (stage0.cpp ... stage3_nvme.cpp), so they
// compile in parallel.

#include "../common/optimizer_config.hpp"
#include "training.hpp"

#include <zero/engine/optimizer_choice.hpp>
#include <zero/engines.hpp> // the in-memory engines, prebuilt where zero::engines is linked

namespace train {

// Where the model states live: all in memory, the optimizer's on NVMe, or (stage 3) the
// parameters' too. In memory, the engines are zero::engines' (zero::host, not the Placement<> it
// stands for, names the same type as the library's).
using InMemory = zero::host;
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

template <class Plan, class Where = InMemory>
History run(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
            InitialWeights& init) {
  // The optimizers this placement runs (LAMB's step is not built on the NVMe tier): a config
  // asking for another is refused naming optimizer.type.
  return zero::with_optimizer_on<Where>(examples::optimizer_config(f), [&](auto optimizer) {
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
