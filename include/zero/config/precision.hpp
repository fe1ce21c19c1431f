#pragma once
// The "fp16" and "bf16" sections of a DeepSpeed config: which 16-bit format the working copy of
// the parameters and the gradients use, and for fp16 how the loss is scaled.

#include <cmath>
#include <cstdint>

namespace zero::config {

// Fields map one to one onto a dynamic loss scaler: init_scale = initial_dynamic_scale(),
// scale_factor 2, scale_window = loss_scale_window, hysteresis, min_scale = min_loss_scale,
// consecutive_hysteresis, raise_error_at_min_scale.
//
// The defaults below are DeepSpeed's documented JSON defaults. DeepSpeed applies them only when
// at least one of initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis or
// min_loss_scale is written in the "fp16" section; otherwise its ZeRO optimizers build the loss
// scaler with the scaler's own defaults (2^32, hysteresis 1) and its stage-0 optimizer starts at
// 2^16 without hysteresis. The JSON reader reproduces that (see docs/configuration.md); a struct
// built in code gets exactly what its fields say.
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0; // 0: dynamic loss scaling; > 0: this static scale, never changed
  int initial_scale_power = 16;
  std::int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  // Not a DeepSpeed key: DeepSpeed's scaler always raises when an overflow finds the scale at
  // its minimum, and so does the default here.
  bool raise_error_at_min_scale = true;

  bool dynamic_loss_scale() const noexcept { return loss_scale == 0.0; }
  double initial_dynamic_scale() const noexcept { return std::ldexp(1.0, initial_scale_power); }
  friend bool operator==(const Fp16Config&, const Fp16Config&) = default;
};

// bfloat16 has float's exponent range, so DeepSpeed runs it without loss scaling.
struct Bf16Config {
  bool enabled = false;
  friend bool operator==(const Bf16Config&, const Bf16Config&) = default;
};

} // namespace zero::config
