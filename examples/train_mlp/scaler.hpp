#pragma once
// The demo picks its loss scaling at run time: dynamic for fp16 (or the static scale a DeepSpeed
// config asks for), none (a static scale of 1) for fp32 and bf16. One type for all, so the engine
// is instantiated once per plan and optimizer.

#include "flags.hpp"

#include <zero/precision/loss_scaler.hpp>

#include <variant>

namespace train {

class AnyLossScaler {
 public:
  explicit AnyLossScaler(zero::StaticLossScaler s) : scaler_(s) {}
  explicit AnyLossScaler(zero::DynamicLossScaler s) : scaler_(std::move(s)) {}

  double scale() const {
    return std::visit([](const auto& s) { return s.scale(); }, scaler_);
  }
  void update(bool overflow) {
    std::visit([&](auto& s) { s.update(overflow); }, scaler_);
  }
  bool last_step_skipped() const {
    return std::visit([](const auto& s) { return s.last_step_skipped(); }, scaler_);
  }
  zero::LossScalerState state() const {
    return std::visit([](const auto& s) { return s.state(); }, scaler_);
  }
  void load_state(const zero::LossScalerState& state) {
    std::visit([&](auto& s) { s.load_state(state); }, scaler_);
  }

 private:
  std::variant<zero::StaticLossScaler, zero::DynamicLossScaler> scaler_;
};
static_assert(zero::LossScaler<AnyLossScaler>);

inline AnyLossScaler make_scaler(const Flags& f) {
  if (f.dtype != zero::DType::float16) return AnyLossScaler(zero::StaticLossScaler(1.0));
  if (!f.ds) return AnyLossScaler(zero::DynamicLossScaler());
  const auto& fp16 = f.ds->fp16;
  if (!fp16.dynamic_loss_scale()) return AnyLossScaler(zero::StaticLossScaler(fp16.loss_scale));
  zero::DynamicLossScalerOptions o;
  o.init_scale = fp16.initial_dynamic_scale();
  o.scale_window = fp16.loss_scale_window;
  o.hysteresis = fp16.hysteresis;
  o.min_scale = fp16.min_loss_scale;
  o.consecutive_hysteresis = fp16.consecutive_hysteresis;
  o.raise_error_at_min_scale = fp16.raise_error_at_min_scale;
  return AnyLossScaler(zero::DynamicLossScaler(o));
}

} // namespace train
