// train_torch's engine at ZeRO stage 0 (one file per stage, so that they compile in parallel).
#include "training.hpp"

namespace train_torch {
template History train_zero<0>(zero::MpiCommunicator&, const Flags&, const train_gpt::Tokens&);
} // namespace train_torch
