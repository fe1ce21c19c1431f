#pragma once
// SGD, identical to torch.optim.SGD (PyTorch 1.13): weight decay added to the gradient, momentum
// with dampening, Nesterov momentum. The momentum buffer starts as the first step's gradient
// (PyTorch's clone on the first step), which the step counter tells.
//
// Two optimizers share the element-wise math, because the number of state tensors is a
// compile-time property the engine allocates by: SGD keeps a momentum buffer (one fp32 state
// tensor), StatelessSGD keeps none and accepts momentum 0 only.

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

struct SGDOptions {
  double lr = 1e-3; // PyTorch 1.13 has no default; later versions use 1e-3
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

template <std::size_t StateTensors>
struct SgdUpdate {
  static_assert(StateTensors <= 1, "SGD keeps at most a momentum buffer");
  static constexpr std::size_t state_tensors = StateTensors;

  float neg_lr;
  float weight_decay; // grad += weight_decay * param (0: off)
  float momentum;     // 0: plain SGD
  float one_minus_dampening;
  bool nesterov;
  bool first_step; // the momentum buffer is (re)started from the gradient
  bool maximize;

  // The same constants bit for bit (ZeRO-Offload's speculative update keeps its result only then).
  bool same_bits(const SgdUpdate& o) const noexcept {
    return detail::same_float_bits({neg_lr, weight_decay, momentum, one_minus_dampening},
                                   {o.neg_lr, o.weight_decay, o.momentum, o.one_minus_dampening}) &&
           nesterov == o.nesterov && first_step == o.first_step && maximize == o.maximize;
  }

  template <class V>
  requires(StateTensors == 1) ZERO_HOST_DEVICE void operator()(V& param, V grad,
                                                               V& momentum_buffer) const {
    grad = decayed(param, grad);
    if (momentum != 0.0f) {
      momentum_buffer =
          first_step ? grad
                     : simd::fma(grad, V(one_minus_dampening), momentum_buffer * V(momentum));
      grad = nesterov ? simd::fma(momentum_buffer, V(momentum), grad) : momentum_buffer;
    }
    param = simd::fma(grad, V(neg_lr), param);
  }

  template <class V>
  requires(StateTensors == 0) ZERO_HOST_DEVICE void operator()(V& param, V grad) const {
    param = simd::fma(decayed(param, grad), V(neg_lr), param);
  }

 private:
  template <class V>
  ZERO_HOST_DEVICE V decayed(V param, V grad) const {
    if (maximize) grad = -grad;
    if (weight_decay != 0.0f) grad = simd::fma(param, V(weight_decay), grad);
    return grad;
  }
};
// same_bits() compares every member: four floats and three flags (padded to a fifth float). A
// member added to the update is added there too, or a speculative update would ignore it.
static_assert(sizeof(SgdUpdate<0>) == 5 * sizeof(float) &&
                  sizeof(SgdUpdate<1>) == 5 * sizeof(float),
              "zero: SgdUpdate::same_bits lists every member");

template <std::size_t StateTensors>
class BasicSGD : public detail::OptimizerBase<BasicSGD<StateTensors>, SGDOptions> {
  using base = typename BasicSGD::OptimizerBase;

 public:
  using update_type = SgdUpdate<StateTensors>;
  static constexpr std::size_t state_tensors = StateTensors;
  static constexpr auto state_names = [] {
    if constexpr (StateTensors == 1)
      return std::array<std::string_view, 1>{"momentum_buffer"};
    else
      return std::array<std::string_view, 0>{};
  }();
  static constexpr std::string_view name = "SGD";

  explicit BasicSGD(const SGDOptions& options = {}) : base(options) {
    base::check_lr(options.lr);
    base::check_non_negative(options.momentum, "momentum");
    require(std::isfinite(options.dampening), base::message("dampening must be finite"));
    base::check_non_negative(options.weight_decay, "weight_decay");
    require(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
            base::message("Nesterov momentum requires a momentum and zero dampening"));
    if constexpr (StateTensors == 0)
      require(options.momentum == 0.0,
              "StatelessSGD keeps no momentum buffer: use zero::SGD for momentum " +
                  std::to_string(options.momentum));
  }

  update_type update_for_step(std::int64_t step) const {
    base::check_step(step);
    const SGDOptions& options = this->options();
    update_type u{};
    u.neg_lr = static_cast<float>(-options.lr);
    u.weight_decay = static_cast<float>(options.weight_decay);
    u.momentum = static_cast<float>(options.momentum);
    u.one_minus_dampening = static_cast<float>(1.0 - options.dampening);
    u.nesterov = options.nesterov;
    u.first_step = step == 1;
    u.maximize = options.maximize;
    return u;
  }
};

using SGD = BasicSGD<1>;
using StatelessSGD = BasicSGD<0>;

static_assert(Optimizer<SGD> && Optimizer<StatelessSGD>);

} // namespace zero
