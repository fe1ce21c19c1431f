// train_mlp's engine for ZeRO stage 3 with the optimizer states on the NVMe tier.
#include "run.hpp"

#include <zero/engine/engine.hpp> // its engines on the NVMe tier are compiled here, not in zero::engines
#include <zero/offload/nvme_stores.hpp>

namespace train {
History run_stage3_nvme(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                        InitialWeights& init) {
  return run<zero::Stage<3>, NvmeOptimizer>(world, f, data, init);
}
} // namespace train
