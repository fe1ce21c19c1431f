// train_torch's engine at ZeRO stage 3 (one file per stage, so that they compile in parallel).
#include "training.hpp"

namespace train_torch {
template History train_zero<3>(zero::MpiCommunicator&, const Flags&, const train_gpt::Tokens&);
} // namespace train_torch
