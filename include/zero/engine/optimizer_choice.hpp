#pragma once
// Which optimizers an engine's placement runs, and an optimizer from a config for such an engine:
//
//   return zero::with_optimizer_on<Where>(config, [&](auto optimizer) { return train(optimizer);
//   });
//
// LAMB's trust ratio combines per-parameter sums over the shard group in host memory, so its step
// is built for optimizer states in host memory only (beside a device space too, offloaded): on the
// NVMe tier (whose store streams sub-groups) or in device memory it is not built, and an engine
// that would run it does not compile. A program that takes its optimizer from a config compiles
// every optimizer its placement runs; a config asking for one it does not is refused at run time,
// naming `optimizer.type` and why.

#include "zero/core/memory_space.hpp"
#include "zero/core/nvme.hpp"
#include "zero/optim/from_config.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/stage/placement.hpp"

#include <concepts>
#include <utility>

namespace zero {

namespace detail {
inline constexpr char lamb_on_nvme[] = "an optimizer with a trust ratio (LAMB) keeps its states in "
                                       "memory: its step on the NVMe tier is not built";
inline constexpr char lamb_over_a_device[] =
    "an optimizer with a trust ratio (LAMB) keeps its states in host memory: its step over states "
    "in device memory is not built (offload them: zero::optimizer_states_in<zero::pinned_host>)";

// Why Where does not run Opt (one of the texts above), or null when it does.
template <class Opt, class Where>
constexpr const char* optimizer_refusal() noexcept {
  using States = typename zero::placement_of<Where>::optimizer_states;
  if constexpr (TrustRatioUpdate<typename Opt::update_type> && std::same_as<States, nvme>)
    return lamb_on_nvme;
  else if constexpr (TrustRatioUpdate<typename Opt::update_type> && !HostAccessibleSpace<States>)
    return lamb_over_a_device;
  else
    return nullptr;
}

template <class Where>
struct RefusedOn {
  template <class O>
  static constexpr const char* refusal() noexcept {
    return optimizer_refusal<O, Where>();
  }
};
} // namespace detail

// Whether an engine with placement Where runs optimizer Opt (an engine that would not does not
// compile).
template <class Opt, class Where>
constexpr bool optimizer_runs_on() noexcept {
  return detail::optimizer_refusal<Opt, Where>() == nullptr;
}

// zero::with_optimizer for an engine placed by Where: compiles `use` with the optimizers listed
// (all of zero's by default) that Where runs; a config asking for another is refused by name.
template <class Where, class... Opts, class Use>
auto with_optimizer_on(const config::OptimizerConfig& o, Use&& use) {
  if constexpr (sizeof...(Opts) == 0)
    return detail::with_optimizer_if<detail::RefusedOn<Where>, Adam, AdamW, SGD, Lamb>(
        o, std::forward<Use>(use));
  else
    return detail::with_optimizer_if<detail::RefusedOn<Where>, Opts...>(o, std::forward<Use>(use));
}

} // namespace zero
