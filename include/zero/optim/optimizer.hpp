#pragma once
// What the engine needs from an optimizer, as concepts.
//
// An optimizer is split in two: a small host object holding the hyper-parameters and the step
// counter (`Optimizer`), and, for each step, a trivially copyable element-wise functor
// (`ElementwiseUpdate`) that the fused loops call on every element, on the CPU and in CUDA
// kernels alike. Its optimizer state is `state_tensors` fp32 values per parameter (Adam: exp_avg
// and exp_avg_sq), which the engine allocates, shards, offloads and checkpoints as plain buffers.
//
// One step:
//   auto update = optimizer.begin_step();            // once per step, on every rank
//   zero::fused_step(update, master, {m, v}, grads, grad_multiplier, compute_copy);  // per shard
// A skipped step (overflow) calls neither, so the step counter only counts applied steps, as in
// PyTorch and DeepSpeed.

#include "zero/core/platform.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

namespace zero {

namespace detail {
template <class U, class V, std::size_t... I>
constexpr bool updates_lanes(std::index_sequence<I...>) {
  return std::is_invocable_v<const U&, V&, V, decltype((void)I, std::declval<V&>())...>;
}
} // namespace detail

// update(param, grad, state_0, ..., state_{N-1}) on float lanes: param and the state in place,
// grad already multiplied by the gradient multiplier (1 / loss scale, clipping).
template <class U>
concept ElementwiseUpdate = std::is_trivially_copyable_v<U> && requires {
  { U::state_tensors } -> std::convertible_to<std::size_t>;
} && detail::updates_lanes<U, float>(std::make_index_sequence<U::state_tensors>{});

template <class O>
concept Optimizer = requires(O& optimizer, const O& const_optimizer, double lr, std::int64_t step) {
  typename O::options_type;
  typename O::update_type;
  requires ElementwiseUpdate<typename O::update_type>;
  requires O::state_tensors == O::update_type::state_tensors;
  { O::state_names } -> std::convertible_to<std::array<std::string_view, O::state_tensors>>;
  { const_optimizer.options() } -> std::convertible_to<const typename O::options_type&>;
  { const_optimizer.lr() } -> std::same_as<double>;
  optimizer.set_lr(lr);
  { const_optimizer.step_count() } -> std::same_as<std::int64_t>;
  optimizer.set_step_count(step); // resuming from a checkpoint
  { optimizer.begin_step() } -> std::same_as<typename O::update_type>;
  { const_optimizer.update_for_step(step) } -> std::same_as<typename O::update_type>;
};

} // namespace zero
