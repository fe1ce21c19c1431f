// train_mlp's engine for ZeRO stage 3 with the optimizer states and the parameter shards on the
// NVMe tier.
#include "run.hpp"

#include <zero/engine/engine.hpp> // its engines on the NVMe tier are compiled here, not in zero::engines
#include <zero/offload/nvme_stores.hpp>

namespace train {
History run_stage3_nvme_params(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                               InitialWeights& init) {
  return run<zero::Stage<3>, NvmeEverything>(world, f, data, init);
}
} // namespace train
