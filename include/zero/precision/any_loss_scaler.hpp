#pragma once
// AnyLossScaler: the loss scaling chosen at run time, for trainers whose precision is a flag or a
// config key: dynamic for fp16 (or the static scale a DeepSpeed config asks for), none (a static
// scale of 1) for fp32 and bf16. One type for all, so that an engine is instantiated once per plan
// and optimizer rather than once per scaler too.

#include "zero/config/config.hpp"
#include "zero/core/dtype.hpp"
#include "zero/precision/loss_scaler.hpp"

#include <utility>
#include <variant>

namespace zero {

class AnyLossScaler {
 public:
  explicit AnyLossScaler(StaticLossScaler s) : scaler_(s) {}
  explicit AnyLossScaler(DynamicLossScaler s) : scaler_(std::move(s)) {}

  // What a run in `compute` with DeepSpeed config `config` (may be null) scales by.
  static AnyLossScaler for_run(DType compute, const config::Config* config) {
    if (compute != DType::float16) return AnyLossScaler(StaticLossScaler(1.0));
    if (!config) return AnyLossScaler(DynamicLossScaler());
    const auto& fp16 = config->fp16;
    if (!fp16.dynamic_loss_scale()) return AnyLossScaler(StaticLossScaler(fp16.loss_scale));
    DynamicLossScalerOptions o;
    o.init_scale = fp16.initial_dynamic_scale();
    o.scale_window = fp16.loss_scale_window;
    o.hysteresis = fp16.hysteresis;
    o.min_scale = fp16.min_loss_scale;
    o.consecutive_hysteresis = fp16.consecutive_hysteresis;
    o.raise_error_at_min_scale = fp16.raise_error_at_min_scale;
    return AnyLossScaler(DynamicLossScaler(o));
  }

  double scale() const {
    return std::visit([](const auto& s) { return s.scale(); }, scaler_);
  }
  void update(bool overflow) {
    std::visit([&](auto& s) { s.update(overflow); }, scaler_);
  }
  bool last_step_skipped() const {
    return std::visit([](const auto& s) { return s.last_step_skipped(); }, scaler_);
  }
  LossScalerState state() const {
    return std::visit([](const auto& s) { return s.state(); }, scaler_);
  }
  void load_state(const LossScalerState& state) {
    std::visit([&](auto& s) { s.load_state(state); }, scaler_);
  }

 private:
  std::variant<StaticLossScaler, DynamicLossScaler> scaler_;
};
static_assert(LossScaler<AnyLossScaler>);

} // namespace zero
