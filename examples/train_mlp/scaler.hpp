#pragma once
// The demo picks its loss scaling at run time (zero::AnyLossScaler): dynamic for fp16 (or the
// static scale a DeepSpeed config asks for), none for fp32 and bf16.

#include "settings.hpp"

#include <zero/precision/any_loss_scaler.hpp>

namespace train {

using zero::AnyLossScaler;

inline AnyLossScaler make_scaler(const Flags& f) {
  return AnyLossScaler::for_run(f.dtype, f.ds ? &*f.ds : nullptr);
}

} // namespace train
