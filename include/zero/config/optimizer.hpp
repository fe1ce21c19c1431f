#pragma once
// The "optimizer" section of a DeepSpeed config: which of zero's optimizers runs and its
// hyper-parameters, with DeepSpeed's (FusedAdam's, FusedLamb's, torch.optim.SGD's) names and
// defaults.

#include <array>

namespace zero::config {

enum class OptimizerType { adam, adamw, sgd, lamb };

constexpr const char* to_string(OptimizerType type) noexcept {
  switch (type) {
  case OptimizerType::adam:
    return "Adam";
  case OptimizerType::adamw:
    return "AdamW";
  case OptimizerType::sgd:
    return "SGD";
  case OptimizerType::lamb:
    return "Lamb";
  }
  return "?";
}

// One flat struct rather than one per type: a field that the chosen type does not use keeps its
// default and is ignored (betas and eps for SGD, momentum for Adam, the coefficients but for Lamb).
struct OptimizerConfig {
  OptimizerType type = OptimizerType::adam;
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999}; // Adam, AdamW, Lamb
  double eps = 1e-8;                       // Adam, AdamW, Lamb
  bool bias_correction = true;             // Adam, AdamW, Lamb
  double weight_decay = 0.0;
  // DeepSpeed's "adam_w_mode", true by default: DeepSpeed's "Adam" decouples weight decay from
  // the gradient exactly like AdamW unless this is switched off. AdamW ignores it.
  bool adam_w_mode = true;
  double momentum = 0.0;   // SGD
  double dampening = 0.0;  // SGD
  bool nesterov = false;   // SGD
  double max_coeff = 10.0; // Lamb: the trust ratio's bounds
  double min_coeff = 0.01; // Lamb
  // zero's own key (DeepSpeed has none): Adam's and AdamW's moments in 32 bits (the default) or 8
  // (block-wise, EngineOptions::moments).
  int moment_bits = 32;
  // zero's own key (DeepSpeed has none): the master weights in fp32 (0, the default) or split into
  // the 16-bit compute weight and a residual of 8 or 16 bits (EngineOptions::master).
  int master_residual_bits = 0;

  // Whether weight decay is applied to the weights (AdamW, torch.optim.AdamW) rather than added
  // to the gradient (torch.optim.Adam, SGD).
  bool decoupled_weight_decay() const noexcept {
    return type == OptimizerType::adamw || (type == OptimizerType::adam && adam_w_mode);
  }
  friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

} // namespace zero::config
