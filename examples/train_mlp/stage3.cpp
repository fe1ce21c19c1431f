// train_mlp's engine for ZeRO stage 3 (one file per stage, so they compile in parallel).
#include "run.hpp"

namespace train {
History run_stage3(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                   InitialWeights& init) {
  return run<zero::Stage<3>>(world, f, data, init);
}
} // namespace train
