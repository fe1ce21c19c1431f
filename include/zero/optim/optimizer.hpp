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
//
// Some optimizers scale each parameter's update by a ratio of norms over the WHOLE parameter
// (LAMB's trust ratio ||w|| / ||u||), which a rank holding a shard cannot know alone. Their update
// is a TrustRatioUpdate instead, run in two passes: prepare() on every element (it updates the
// state and gives the element's update direction u, whose squares and the weights' squares are
// summed per parameter), then, once every rank's partial sums are combined (engine:
// optimizer_store.hpp), apply the parameter's step, param += neg_step(sum w^2, sum u^2) * u.
// The engine tells the two kinds apart at compile time: element-wise optimizers pay nothing.

#include "zero/core/platform.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <utility>

namespace zero {

namespace detail {
// Whether two lists of floats of the same length hold the same bits (an update's constants: -0
// and +0 differ, a NaN equals only its own bits).
inline bool same_float_bits(std::initializer_list<float> a,
                            std::initializer_list<float> b) noexcept {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](float x, float y) {
    return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
  });
}

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

// prepare(param, grad, state...) updates the state in place and returns the update direction u;
// direction(param, state...) gives the same u again from the updated state (the second pass);
// neg_step(sum of param^2, sum of u^2) is the parameter's step, as a factor of u.
template <class U>
concept TrustRatioUpdate = std::is_trivially_copyable_v<U> && requires(const U& u, double sum) {
  { U::state_tensors } -> std::convertible_to<std::size_t>;
  requires U::state_tensors == 2;
  {
    u.prepare(std::declval<float>(), std::declval<float>(), std::declval<float&>(),
              std::declval<float&>())
    } -> std::same_as<float>;
  {
    u.direction(std::declval<float>(), std::declval<float>(), std::declval<float>())
    } -> std::same_as<float>;
  { u.neg_step(sum, sum) } -> std::same_as<float>;
};

template <class O>
concept Optimizer = requires(O& optimizer, const O& const_optimizer, double lr, std::int64_t step) {
  typename O::options_type;
  typename O::update_type;
  requires ElementwiseUpdate<typename O::update_type> || TrustRatioUpdate<typename O::update_type>;
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
