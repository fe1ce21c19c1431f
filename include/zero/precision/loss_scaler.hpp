#pragma once
// Loss scaling for fp16 training, with DeepSpeed's semantics.
//
// The training loop multiplies the loss by scale(), checks the gradients for NaN/Inf on every
// rank (precision/overflow.hpp), agrees on the result, skips the step when any rank overflowed,
// and calls update(overflow) once per step on every rank, so that all ranks keep the same scale.
//
// DynamicLossScaler follows deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler.update_scale:
//  - overflow: while hysteresis is left (more than one tolerated overflow), only the hysteresis
//    counter drops; otherwise the scale is divided by scale_factor, but not below min_scale, and
//    an overflow at min_scale is an error when raise_error_at_min_scale is on. The hysteresis
//    counter is not refilled by a decrease.
//  - no overflow: with consecutive_hysteresis the hysteresis counter is refilled at once;
//    the scale is multiplied by scale_factor each time the number of clean steps since the last
//    overflow (or since the start) reaches a positive multiple of scale_window, which also
//    refills the hysteresis counter.

#include "zero/core/error.hpp"

#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

namespace zero {

// Everything about a loss scaler that changes from step to step: what a checkpoint saves.
struct LossScalerState {
  bool dynamic = false;
  double scale = 1.0;
  std::int64_t iteration = 0;                // update() calls so far (DeepSpeed's cur_iter)
  std::int64_t last_overflow_iteration = -1; // DeepSpeed's last_overflow_iter
  int hysteresis_left = 0;                   // DeepSpeed's cur_hysteresis (dynamic only)
  bool last_step_skipped = false;
};

// The interface the engine needs from a loss scaler: the scale, one update per step, and its
// state for checkpoints.
template <class S>
concept LossScaler = requires(S& s, const S& cs, bool overflow, const LossScalerState& state) {
  { cs.scale() } -> std::same_as<double>;
  s.update(overflow);
  { cs.last_step_skipped() } -> std::same_as<bool>;
  { cs.state() } -> std::convertible_to<LossScalerState>;
  s.load_state(state);
};

// A fixed scale (DeepSpeed's "loss_scale": N > 0, and 1 for bf16 or fp32 training). Overflowing
// steps are still skipped; the scale never changes.
class StaticLossScaler {
 public:
  explicit StaticLossScaler(double scale = 1.0) : scale_(scale) {
    require(scale > 0.0 && std::isfinite(scale),
            "StaticLossScaler: the scale must be positive and finite, got " +
                std::to_string(scale));
  }

  double scale() const noexcept { return scale_; }
  void update(bool overflow) noexcept {
    if (overflow) last_overflow_iteration_ = iteration_;
    ++iteration_;
    last_step_skipped_ = overflow;
  }
  bool last_step_skipped() const noexcept { return last_step_skipped_; }

  LossScalerState state() const noexcept {
    return {false, scale_, iteration_, last_overflow_iteration_, 0, last_step_skipped_};
  }
  // The scale stays the one this scaler was made with (a bf16 run may resume an fp16 one); the
  // counters come from the checkpoint.
  void load_state(const LossScalerState& state) {
    require(state.iteration >= 0 && state.last_overflow_iteration >= -1 &&
                state.last_overflow_iteration < state.iteration,
            "StaticLossScaler::load_state: inconsistent state");
    iteration_ = state.iteration;
    last_overflow_iteration_ = state.last_overflow_iteration;
    last_step_skipped_ = state.last_step_skipped;
  }

 private:
  double scale_;
  std::int64_t iteration_ = 0;
  std::int64_t last_overflow_iteration_ = -1;
  bool last_step_skipped_ = false;
};

struct DynamicLossScalerOptions {
  double init_scale = 65536.0; // 2^16, DeepSpeed's initial_scale_power 16
  double scale_factor = 2.0;
  std::int64_t scale_window = 1000;
  int hysteresis = 2; // overflows tolerated before the scale drops (DeepSpeed's delayed_shift)
  double min_scale = 1.0;
  bool consecutive_hysteresis = false;
  bool raise_error_at_min_scale = true;

  // From DeepSpeed's names, as in the "fp16" section of a DeepSpeed JSON config.
  struct DeepSpeedNames {
    int initial_scale_power = 16;
    std::int64_t loss_scale_window = 1000;
    int hysteresis = 2;
    double min_loss_scale = 1.0;
    bool consecutive_hysteresis = false;
  };
  static DynamicLossScalerOptions from_deepspeed(const DeepSpeedNames& names) {
    require(names.initial_scale_power >= 0 && names.initial_scale_power < 1024,
            "fp16.initial_scale_power must be in [0, 1024), got " +
                std::to_string(names.initial_scale_power));
    DynamicLossScalerOptions options;
    options.init_scale = std::ldexp(1.0, names.initial_scale_power);
    options.scale_window = names.loss_scale_window;
    options.hysteresis = names.hysteresis;
    options.min_scale = names.min_loss_scale;
    options.consecutive_hysteresis = names.consecutive_hysteresis;
    return options;
  }

  // From a JSON object holding the "fp16" section, e.g. nlohmann::json or any type with
  // contains(key) and at(key).get<T>(). Missing keys take DeepSpeed's defaults; "enabled" and
  // other keys are ignored; a non-zero "loss_scale" selects static scaling and is rejected here.
  template <class Json>
  requires requires(const Json& json) {
    { json.contains("hysteresis") } -> std::convertible_to<bool>;
    json.at("hysteresis").template get<int>();
  }
  static DynamicLossScalerOptions from_deepspeed_json(const Json& fp16) {
    if (fp16.contains("loss_scale"))
      require(fp16.at("loss_scale").template get<double>() == 0.0,
              "fp16.loss_scale is not 0, which selects static loss scaling: use StaticLossScaler");
    DeepSpeedNames names;
    const auto read = [&fp16](const char* key, auto& field) {
      if (fp16.contains(key))
        field = fp16.at(key).template get<std::remove_cvref_t<decltype(field)>>();
    };
    read("initial_scale_power", names.initial_scale_power);
    read("loss_scale_window", names.loss_scale_window);
    read("hysteresis", names.hysteresis);
    read("min_loss_scale", names.min_loss_scale);
    read("consecutive_hysteresis", names.consecutive_hysteresis);
    return from_deepspeed(names);
  }
};

class DynamicLossScaler {
 public:
  using State = LossScalerState;

  explicit DynamicLossScaler(DynamicLossScalerOptions options = {}) : options_(options) {
    const auto& o = options_;
    require(o.init_scale > 0.0 && std::isfinite(o.init_scale),
            "DynamicLossScaler: init_scale must be positive and finite");
    require(o.scale_factor > 1.0 && std::isfinite(o.scale_factor),
            "DynamicLossScaler: scale_factor must be finite and greater than 1");
    require(o.scale_window >= 1, "DynamicLossScaler: scale_window must be at least 1");
    require(o.hysteresis >= 1, "DynamicLossScaler: hysteresis must be at least 1");
    require(o.min_scale > 0.0 && std::isfinite(o.min_scale),
            "DynamicLossScaler: min_scale must be positive and finite");
    require(o.init_scale >= o.min_scale,
            "DynamicLossScaler: init_scale must be at least min_scale");
    state_.dynamic = true;
    state_.scale = o.init_scale;
    state_.hysteresis_left = o.hysteresis;
  }

  double scale() const noexcept { return state_.scale; }
  bool last_step_skipped() const noexcept { return state_.last_step_skipped; }
  const DynamicLossScalerOptions& options() const noexcept { return options_; }
  const State& state() const noexcept { return state_; }
  void load_state(const State& state) {
    require(state.dynamic,
            "DynamicLossScaler::load_state: the state is of a static loss scale "
            "(a checkpoint saved without dynamic loss scaling)",
            ErrorKind::mismatch);
    require(state.scale > 0.0 && std::isfinite(state.scale) && state.hysteresis_left >= 1 &&
                state.iteration >= 0 && state.last_overflow_iteration >= -1 &&
                state.last_overflow_iteration < state.iteration,
            "DynamicLossScaler::load_state: inconsistent state");
    state_ = state;
  }

  // Records the outcome of one step (overflow: some gradient on some rank was NaN or infinite).
  // Throws Error(numerical) when the scale is due to drop but already is min_scale and
  // raise_error_at_min_scale is set; the scaler is then unchanged.
  void update(bool overflow) {
    State next = state_;
    if (overflow) {
      if (options_.hysteresis == 1 || next.hysteresis_left == 1) {
        if (next.scale == options_.min_scale && options_.raise_error_at_min_scale)
          fail(ErrorKind::numerical,
               "DynamicLossScaler: gradients overflowed with the loss scale already at its minimum "
               "(" +
                   std::to_string(options_.min_scale) +
                   "); it cannot decrease any further. Lower the learning rate, check the model "
                   "for NaNs, or lower min_scale.");
        const double lowered = next.scale / options_.scale_factor;
        next.scale = lowered > options_.min_scale ? lowered : options_.min_scale;
      } else {
        next.hysteresis_left -= 1;
      }
      next.last_overflow_iteration = next.iteration;
    } else {
      if (options_.consecutive_hysteresis) next.hysteresis_left = options_.hysteresis;
      const std::int64_t stable_steps = next.iteration - next.last_overflow_iteration - 1;
      if (stable_steps > 0 && stable_steps % options_.scale_window == 0) {
        if (!options_.consecutive_hysteresis) next.hysteresis_left = options_.hysteresis;
        next.scale *= options_.scale_factor;
      }
    }
    next.iteration += 1;
    next.last_step_skipped = overflow;
    state_ = next;
  }

 private:
  DynamicLossScalerOptions options_;
  State state_;
};

static_assert(LossScaler<StaticLossScaler> && LossScaler<DynamicLossScaler>);

} // namespace zero
