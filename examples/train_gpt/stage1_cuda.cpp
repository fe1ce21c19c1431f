// train_gpt --device cuda's engines for ZeRO stage 1 (one file per stage, so they compile in
// parallel).
#include "run_device.hpp"

namespace train_gpt {
History run_stage1_cuda(zero::MpiCommunicator& world, const Flags& f, const Tokens& data) {
  return run_on_gpu<zero::Stage<1>>(world, f, data);
}
} // namespace train_gpt
