// train_gpt's engine for ZeRO stage 0 (one file per stage, so that they compile in parallel).
#include "run.hpp"

namespace train_gpt {
History run_stage0(Ranks& ranks, const Flags& f, const Tokens& data) {
  return run<zero::Stage<0>>(ranks, f, data);
}
} // namespace train_gpt
