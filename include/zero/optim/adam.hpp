#pragma once
// Adam and AdamW, identical to torch.optim.Adam / AdamW (PyTorch 1.13, amsgrad off): bias
// correction, eps added outside the square root, L2 weight decay added to the gradient (Adam) or
// decoupled weight decay applied to the parameter (AdamW). With bias_correction off they are
// DeepSpeed's FusedAdam / DeepSpeedCPUAdam with `bias_correction: false`: the step uses the moments
// as they are, param -= lr * m / (sqrt(v) + eps). That costs nothing per element: both corrections
// become 1 in the step's constants (dividing by 1.0f is exact), so the functor is the same.
//
// AdamUpdate is the element-wise math, written once for host and device. It performs PyTorch's
// float operations in PyTorch's order with PyTorch's roundings (the fixtures in tests/optim check
// this bit for bit), so results do not depend on where the step runs.

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
#include <type_traits>

namespace zero {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0; // L2: added to the gradient
  bool amsgrad = false;      // not supported; true is rejected
  bool maximize = false;
  bool bias_correction = true; // false: DeepSpeed's bias_correction false (no 1 - beta^step)
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2; // decoupled: param *= 1 - lr * weight_decay
  bool amsgrad = false;       // not supported; true is rejected
  bool maximize = false;
  bool bias_correction = true; // false: DeepSpeed's bias_correction false (no 1 - beta^step)
};

// One Adam/AdamW step on one element; the constants of a step, precomputed in double and rounded
// to float as PyTorch does.
struct AdamUpdate {
  static constexpr std::size_t state_tensors = 2;

  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float neg_step_size;         // -lr / (1 - beta1^step); -lr without bias correction
  float bias_correction2_sqrt; // sqrt(1 - beta2^step); 1 without bias correction
  float l2_weight_decay;       // Adam: grad += l2_weight_decay * param (0: off)
  float param_decay;           // AdamW: param *= param_decay (1: off)
  bool maximize;

  // The same constants bit for bit (ZeRO-Offload's speculative update keeps its result only then).
  bool same_bits(const AdamUpdate& o) const noexcept {
    return detail::same_float_bits(
               {beta1, beta2, one_minus_beta1, one_minus_beta2, eps, neg_step_size,
                bias_correction2_sqrt, l2_weight_decay, param_decay},
               {o.beta1, o.beta2, o.one_minus_beta1, o.one_minus_beta2, o.eps, o.neg_step_size,
                o.bias_correction2_sqrt, o.l2_weight_decay, o.param_decay}) &&
           maximize == o.maximize;
  }

  template <class V>
  ZERO_HOST_DEVICE void operator()(V& param, V grad, V& exp_avg, V& exp_avg_sq) const {
    if (maximize) grad = -grad;
    if (l2_weight_decay != 0.0f) grad = simd::fma(param, V(l2_weight_decay), grad);
    if (param_decay != 1.0f) param = simd::mul_rounded(param, V(param_decay));
    exp_avg = simd::fma(grad, V(one_minus_beta1), exp_avg * V(beta1));
    exp_avg_sq = simd::fma(grad * V(one_minus_beta2), grad, exp_avg_sq * V(beta2));
    const V denom = simd::div(simd::sqrt(exp_avg_sq), V(bias_correction2_sqrt)) + V(eps);
    param = param + simd::div(V(neg_step_size) * exp_avg, denom);
  }
};
// same_bits() compares every member: nine floats and a flag (padded to a tenth float). A member
// added to the update is added there too, or a speculative update would ignore it.
static_assert(sizeof(AdamUpdate) == 10 * sizeof(float),
              "zero: AdamUpdate::same_bits lists every member");

enum class AdamWeightDecay { l2, decoupled };

template <AdamWeightDecay Mode>
class BasicAdam
    : public detail::OptimizerBase<BasicAdam<Mode>, std::conditional_t<Mode == AdamWeightDecay::l2,
                                                                       AdamOptions, AdamWOptions>> {
  using base = typename BasicAdam::OptimizerBase;

 public:
  using typename base::options_type;
  using update_type = AdamUpdate;
  static constexpr std::size_t state_tensors = 2;
  static constexpr std::array<std::string_view, 2> state_names = {"exp_avg", "exp_avg_sq"};
  static constexpr std::string_view name = Mode == AdamWeightDecay::l2 ? "Adam" : "AdamW";

  explicit BasicAdam(const options_type& options = {}) : base(options) {
    require(!options.amsgrad, base::message("amsgrad is not supported"), ErrorKind::unsupported);
    base::check_lr(options.lr);
    base::check_non_negative(options.eps, "eps");
    for (double beta : options.betas)
      require(beta >= 0.0 && beta < 1.0,
              base::message("betas must be in [0, 1), got ") + std::to_string(beta));
    base::check_non_negative(options.weight_decay, "weight_decay");
  }

  // The update of step `step` (1 for the first step) with the current hyper-parameters.
  update_type update_for_step(std::int64_t step) const {
    base::check_step(step);
    const options_type& options = this->options();
    const double beta1 = options.betas[0];
    const double beta2 = options.betas[1];
    const double bias_correction1 =
        options.bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
    const double bias_correction2 =
        options.bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
    update_type u{};
    u.beta1 = static_cast<float>(beta1);
    u.beta2 = static_cast<float>(beta2);
    u.one_minus_beta1 = static_cast<float>(1.0 - beta1);
    u.one_minus_beta2 = static_cast<float>(1.0 - beta2);
    u.eps = static_cast<float>(options.eps);
    u.neg_step_size = static_cast<float>(-(options.lr / bias_correction1));
    u.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    u.l2_weight_decay =
        Mode == AdamWeightDecay::l2 ? static_cast<float>(options.weight_decay) : 0.0f;
    u.param_decay = Mode == AdamWeightDecay::decoupled
                        ? static_cast<float>(1.0 - options.lr * options.weight_decay)
                        : 1.0f;
    u.maximize = options.maximize;
    return u;
  }
};

using Adam = BasicAdam<AdamWeightDecay::l2>;
using AdamW = BasicAdam<AdamWeightDecay::decoupled>;

static_assert(Optimizer<Adam> && Optimizer<AdamW>);

} // namespace zero
