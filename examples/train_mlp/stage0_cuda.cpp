// train_mlp --device cuda's engines for ZeRO stage 0 (one file per stage, so they compile in
// parallel).
#include "device_training.hpp"

namespace train {
History run_stage0_cuda(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                        InitialWeights& init) {
  return run_on_gpu<zero::Stage<0>>(world, f, data, init);
}
} // namespace train
