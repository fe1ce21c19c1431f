// train_mlp --device cuda --offload-optimizer's engines for ZeRO stage 3 (ZeRO-Offload: the
// optimizer states in host memory, or with --nvme on NVMe; one file per stage, so they compile in
// parallel).
#include "device_training.hpp"

namespace train {
History run_stage3_cuda_offload(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                                InitialWeights& init) {
  return run_offloaded_on_gpu<zero::Stage<3>>(world, f, data, init);
}
} // namespace train
