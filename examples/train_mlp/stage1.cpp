// train_mlp's engine for ZeRO stage 1 (one file per stage, so they compile in parallel).
#include "run.hpp"

namespace train {
History run_stage1(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                   InitialWeights& init) {
  return run<zero::Stage<1>>(world, f, data, init);
}
} // namespace train
