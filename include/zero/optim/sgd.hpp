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
#include "zero/optim/optimizer.hpp"
#include "zero/precision/detail/simd.hpp"

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

template <std::size_t StateTensors>
class BasicSGD {
 public:
  using options_type = SGDOptions;
  using update_type = SgdUpdate<StateTensors>;
  static constexpr std::size_t state_tensors = StateTensors;
  static constexpr auto state_names = [] {
    if constexpr (StateTensors == 1)
      return std::array<std::string_view, 1>{"momentum_buffer"};
    else
      return std::array<std::string_view, 0>{};
  }();

  explicit BasicSGD(const SGDOptions& options = {}) : options_(options) {
    check_lr(options.lr);
    require(options.momentum >= 0.0 && std::isfinite(options.momentum),
            "SGD: momentum must be non-negative, got " + std::to_string(options.momentum));
    require(std::isfinite(options.dampening), "SGD: dampening must be finite");
    require(options.weight_decay >= 0.0 && std::isfinite(options.weight_decay),
            "SGD: weight_decay must be non-negative, got " + std::to_string(options.weight_decay));
    require(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
            "SGD: Nesterov momentum requires a momentum and zero dampening");
    if constexpr (StateTensors == 0)
      require(options.momentum == 0.0,
              "StatelessSGD keeps no momentum buffer: use zero::SGD for momentum " +
                  std::to_string(options.momentum));
  }

  const SGDOptions& options() const noexcept { return options_; }
  double lr() const noexcept { return options_.lr; }
  void set_lr(double lr) {
    check_lr(lr);
    options_.lr = lr;
  }
  std::int64_t step_count() const noexcept { return step_count_; }
  void set_step_count(std::int64_t steps) {
    require(steps >= 0, "SGD: the step count cannot be negative");
    step_count_ = steps;
  }

  update_type begin_step() {
    update_type update = update_for_step(step_count_ + 1);
    ++step_count_;
    return update;
  }

  update_type update_for_step(std::int64_t step) const {
    require(step >= 1, "SGD: steps are numbered from 1");
    update_type u{};
    u.neg_lr = static_cast<float>(-options_.lr);
    u.weight_decay = static_cast<float>(options_.weight_decay);
    u.momentum = static_cast<float>(options_.momentum);
    u.one_minus_dampening = static_cast<float>(1.0 - options_.dampening);
    u.nesterov = options_.nesterov;
    u.first_step = step == 1;
    u.maximize = options_.maximize;
    return u;
  }

 private:
  static void check_lr(double lr) {
    require(lr >= 0.0 && std::isfinite(lr),
            "SGD: the learning rate must be non-negative and finite, got " + std::to_string(lr));
  }

  SGDOptions options_;
  std::int64_t step_count_ = 0;
};

using SGD = BasicSGD<1>;
using StatelessSGD = BasicSGD<0>;

static_assert(Optimizer<SGD> && Optimizer<StatelessSGD>);

} // namespace zero
