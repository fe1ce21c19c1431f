#pragma once
// The optimizer an example trains with: the config's optimizer section (zero::config's defaults
// without one) under the example's flags, which were merged with the config already and win:
// --optimizer, --lr, --weight-decay, and --momentum where the example has it.

#include <zero/config/config.hpp>
#include <zero/config/optimizer.hpp>

namespace examples {

// `Flags` has the parsed config (`ds`, optional), `optimizer` (adam, adamw, sgd or lamb), `lr`,
// `weight_decay`, and may have `momentum`.
template <class Flags>
zero::config::OptimizerConfig optimizer_config(const Flags& f) {
  using zero::config::OptimizerType;
  auto o = f.ds && f.ds->optimizer ? *f.ds->optimizer : zero::config::OptimizerConfig{};
  o.type = f.optimizer == "sgd"     ? OptimizerType::sgd
           : f.optimizer == "adamw" ? OptimizerType::adamw
           : f.optimizer == "lamb"  ? OptimizerType::lamb
                                    : OptimizerType::adam;
  o.adam_w_mode = false; // "adam" here is torch.optim.Adam; "adamw" names the decoupled one
  o.lr = f.lr;
  o.weight_decay = f.weight_decay;
  if constexpr (requires { f.momentum; }) o.momentum = f.momentum;
  return o;
}

} // namespace examples
