#pragma once
// LAMB as DeepSpeed's FusedLamb computes it (deepspeed/ops/lamb/fused_lamb.py,
// csrc/lamb/fused_lamb_cuda_kernel.cu), for each parameter tensor, eps outside the square root
// (FusedLamb's default eps_inside_sqrt false):
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   u = m / (sqrt(v) + eps) + weight_decay w             (the moments as they are, not corrected)
//   ratio = ||w|| / ||u|| clamped to [min_coeff, max_coeff]; 1 when ||w|| or ||u|| is 0
//   w -= step_size * ratio * u,  step_size = lr sqrt(1 - beta2^t) / (1 - beta1^t) (bias_correction)
//                                            lr                                    (without)
// DeepSpeed folds the bias correction into the step size rather than into u (unlike the LAMB
// paper, whose u uses the corrected moments): the ratio is taken on the uncorrected u, and the
// step is that ratio times the corrected step size. We follow DeepSpeed, so that its configs
// train the same.
//
// The ratio needs ||w|| and ||u|| over the whole parameter, which ZeRO cuts across ranks: the
// update is a TrustRatioUpdate (optim/optimizer.hpp), and the engine combines every rank's partial
// sums before applying it. DeepSpeed sums the squares in fp32 in a block tree; zero sums them in
// fp64 in a fixed order (optim/trust_ratio_step.hpp), so results do not depend on the stage.

#include "zero/core/error.hpp"
#include "zero/core/platform.hpp"
#include "zero/core/simd.hpp"
#include "zero/optim/detail/optimizer_base.hpp"
#include "zero/optim/optimizer.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zero {

// FusedLamb's parameters and defaults (DeepSpeed drops max_grad_norm in favour of the config's
// gradient_clipping, which the engine applies through the gradient multiplier).
struct LambOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0; // added to the update direction u, not to the gradient
  bool bias_correction = true;
  double max_coeff = 10.0; // bounds of the trust ratio
  double min_coeff = 0.01;
};

// One LAMB step's constants. prepare() and direction() run per element, on the host's lanes and
// in CUDA threads; neg_step() once per parameter, on the host.
struct LambUpdate {
  static constexpr std::size_t state_tensors = 2;

  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float weight_decay; // 0: off
  double step_size;   // lr, times sqrt(1 - beta2^t) / (1 - beta1^t) with bias correction
  double max_coeff;
  double min_coeff;

  // The moments of this step (in place) and the element's update direction u.
  template <class V>
  ZERO_HOST_DEVICE V prepare(V param, V grad, V& exp_avg, V& exp_avg_sq) const {
    exp_avg = simd::fma(grad, V(one_minus_beta1), exp_avg * V(beta1));
    exp_avg_sq = simd::fma(grad * V(one_minus_beta2), grad, exp_avg_sq * V(beta2));
    return direction(param, exp_avg, exp_avg_sq);
  }

  // u from this step's moments: the same operations as prepare's, so the same bits.
  template <class V>
  ZERO_HOST_DEVICE V direction(V param, V exp_avg, V exp_avg_sq) const {
    V u = simd::div(exp_avg, simd::sqrt(exp_avg_sq) + V(eps));
    if (weight_decay != 0.0f) u = simd::fma(param, V(weight_decay), u);
    return u;
  }

  // FusedLamb's coefficient from the sums of squares of the parameter and of u: 1 when either
  // norm is 0 (a zero parameter still moves; a zero direction has nothing to scale). A NaN passes
  // through as in DeepSpeed (comparisons with NaN are false), so a broken step is not hidden.
  double trust_ratio(double param_sum_of_squares, double direction_sum_of_squares) const {
    const double w = std::sqrt(param_sum_of_squares);
    const double u = std::sqrt(direction_sum_of_squares);
    if (w == 0.0 || u == 0.0) return 1.0;
    double ratio = w / u;
    if (ratio > max_coeff) ratio = max_coeff;
    if (ratio < min_coeff) ratio = min_coeff;
    return ratio;
  }

  // The parameter's step as a factor of u: param += neg_step * u.
  float neg_step(double param_sum_of_squares, double direction_sum_of_squares) const {
    return static_cast<float>(
        -(step_size * trust_ratio(param_sum_of_squares, direction_sum_of_squares)));
  }
};

class Lamb : public detail::OptimizerBase<Lamb, LambOptions> {
  using base = detail::OptimizerBase<Lamb, LambOptions>;

 public:
  using update_type = LambUpdate;
  static constexpr std::size_t state_tensors = 2;
  static constexpr std::array<std::string_view, 2> state_names = {"exp_avg", "exp_avg_sq"};
  static constexpr std::string_view name = "Lamb";

  explicit Lamb(const LambOptions& options = {}) : base(options) {
    check_lr(options.lr);
    check_non_negative(options.eps, "eps");
    for (double beta : options.betas)
      require(beta >= 0.0 && beta < 1.0,
              message("betas must be in [0, 1), got ") + std::to_string(beta));
    check_non_negative(options.weight_decay, "weight_decay");
    check_non_negative(options.min_coeff, "min_coeff");
    require(std::isfinite(options.max_coeff) && options.max_coeff >= options.min_coeff,
            message("max_coeff must be finite and at least min_coeff, got ") +
                std::to_string(options.max_coeff) + " and " + std::to_string(options.min_coeff));
  }

  // The update of step `step` (1 for the first step) with the current hyper-parameters.
  update_type update_for_step(std::int64_t step) const {
    check_step(step);
    const LambOptions& o = options();
    const double beta1 = o.betas[0];
    const double beta2 = o.betas[1];
    update_type u{};
    u.beta1 = static_cast<float>(beta1);
    u.beta2 = static_cast<float>(beta2);
    u.one_minus_beta1 = static_cast<float>(1.0 - beta1);
    u.one_minus_beta2 = static_cast<float>(1.0 - beta2);
    u.eps = static_cast<float>(o.eps);
    u.weight_decay = static_cast<float>(o.weight_decay);
    u.step_size = o.lr;
    if (o.bias_correction) {
      const auto t = static_cast<double>(step);
      u.step_size = o.lr * std::sqrt(1.0 - std::pow(beta2, t)) / (1.0 - std::pow(beta1, t));
    }
    u.max_coeff = o.max_coeff;
    u.min_coeff = o.min_coeff;
    return u;
  }
};

static_assert(Optimizer<Lamb> && TrustRatioUpdate<LambUpdate>);

} // namespace zero
