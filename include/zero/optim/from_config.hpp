#pragma once
// An optimizer from a DeepSpeed config's "optimizer" section (config/optimizer.hpp), with
// DeepSpeed's meaning: "Adam" decouples weight decay like AdamW unless adam_w_mode is false (it is
// true by default), "AdamW" is AdamW, "SGD" is torch.optim.SGD, "Lamb" is FusedLamb (zero::Lamb).
// The engine takes the optimizer's type as a template parameter, so the optimizer is handed to
// `use`, called once with a zero::Adam, zero::AdamW, zero::SGD or zero::Lamb; its result is
// returned:
//
//   return zero::with_optimizer(config, [&](auto optimizer) { return train(optimizer); });
//   zero::with_optimizer<zero::Adam, zero::AdamW>(config, use); // only these: fewer to compile
//
// A type the program did not list is refused by name. An engine's placement may rule out some of
// them (LAMB on the NVMe tier): zero::with_optimizer_on<Placement> (engine/optimizer_choice.hpp)
// compiles only the others and refuses those by name.

#include "zero/config/optimizer.hpp"
#include "zero/core/error.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/lamb.hpp"
#include "zero/optim/sgd.hpp"

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace zero {

// Which optimizer a config asks for, and its options.
template <class Optimizer>
struct FromConfig;

namespace detail {
// Adam's and AdamW's options share their fields (only the meaning of weight decay differs).
template <class Options>
Options adam_options(const config::OptimizerConfig& o) {
  Options a;
  a.lr = o.lr;
  a.betas = o.betas;
  a.eps = o.eps;
  a.weight_decay = o.weight_decay;
  a.bias_correction = o.bias_correction;
  return a;
}
} // namespace detail

template <>
struct FromConfig<Adam> {
  static constexpr const char* name = "Adam (adam_w_mode false)";
  static bool asked(const config::OptimizerConfig& o) {
    return o.type == config::OptimizerType::adam && !o.adam_w_mode;
  }
  static Adam make(const config::OptimizerConfig& o) {
    return Adam(detail::adam_options<AdamOptions>(o));
  }
};

template <>
struct FromConfig<AdamW> {
  static constexpr const char* name = "AdamW (or Adam with adam_w_mode)";
  static bool asked(const config::OptimizerConfig& o) { return o.decoupled_weight_decay(); }
  static AdamW make(const config::OptimizerConfig& o) {
    return AdamW(detail::adam_options<AdamWOptions>(o));
  }
};

template <>
struct FromConfig<SGD> {
  static constexpr const char* name = "SGD";
  static bool asked(const config::OptimizerConfig& o) {
    return o.type == config::OptimizerType::sgd;
  }
  static SGD make(const config::OptimizerConfig& o) {
    SGDOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.dampening = o.dampening;
    s.weight_decay = o.weight_decay;
    s.nesterov = o.nesterov;
    return SGD(s);
  }
};

template <>
struct FromConfig<Lamb> {
  static constexpr const char* name = "Lamb";
  static bool asked(const config::OptimizerConfig& o) {
    return o.type == config::OptimizerType::lamb;
  }
  static Lamb make(const config::OptimizerConfig& o) {
    return Lamb({.lr = o.lr,
                 .betas = o.betas,
                 .eps = o.eps,
                 .weight_decay = o.weight_decay,
                 .bias_correction = o.bias_correction,
                 .max_coeff = o.max_coeff,
                 .min_coeff = o.min_coeff});
  }
};

namespace detail {
// Every optimizer listed runs (engine/optimizer_choice.hpp gives a placement's refusals).
struct NoRefusal {
  template <class O>
  static constexpr const char* refusal() noexcept {
    return nullptr;
  }
};

// The first of the optimizers that Refusal lets run: `use`'s result type is taken from it, and
// `use` is never instantiated with a refused one.
template <class Refusal, class... Opts>
struct first_allowed;
template <class Refusal, class First, class... Rest>
struct first_allowed<Refusal, First, Rest...> {
  using type = std::conditional_t<Refusal::template refusal<First>() == nullptr, First,
                                  typename first_allowed<Refusal, Rest...>::type>;
};
template <class Refusal>
struct first_allowed<Refusal> {
  using type = void;
};

// with_optimizer over Opts, where an optimizer the config asks for and Refusal refuses is refused
// at run time with Refusal's reason, naming the config key.
template <class Refusal, class... Opts, class Use>
auto with_optimizer_if(const config::OptimizerConfig& o, Use&& use) {
  using Allowed = typename first_allowed<Refusal, Opts...>::type;
  static_assert(!std::is_void_v<Allowed>, "zero::with_optimizer: none of the optimizers listed "
                                          "runs here");
  using Result = std::invoke_result_t<Use&, Allowed>;
  static_assert(!std::is_void_v<Result>, "zero::with_optimizer: `use` must return a value");
  const bool adam = o.type == config::OptimizerType::adam;
  const std::string asked = std::string("optimizer.type ") + config::to_string(o.type) +
                            (!adam || o.adam_w_mode ? "" : " with adam_w_mode false");
  std::optional<Result> result;
  const auto try_one = [&]<class O>(std::type_identity<O>) {
    if (result || !FromConfig<O>::asked(o)) return;
    if constexpr (Refusal::template refusal<O>() != nullptr)
      fail(ErrorKind::unsupported, asked + ": " + Refusal::template refusal<O>());
    else
      result.emplace(use(FromConfig<O>::make(o)));
  };
  (try_one(std::type_identity<Opts>{}), ...);
  if (!result) {
    std::string supported;
    ((supported += (supported.empty() ? "" : ", ") + std::string(FromConfig<Opts>::name)), ...);
    fail(ErrorKind::unsupported, asked + ": this program runs " + supported);
  }
  return std::move(*result);
}
} // namespace detail

template <class First, class... Rest, class Use>
auto with_optimizer(const config::OptimizerConfig& o, Use&& use) {
  return detail::with_optimizer_if<detail::NoRefusal, First, Rest...>(o, std::forward<Use>(use));
}

// Any of zero's optimizers.
template <class Use>
auto with_optimizer(const config::OptimizerConfig& o, Use&& use) {
  return with_optimizer<Adam, AdamW, SGD, Lamb>(o, std::forward<Use>(use));
}

} // namespace zero
