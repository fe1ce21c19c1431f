#pragma once
// TypedStates: the engine's model states for the compute type, which is chosen at run time
// (EngineOptions::compute_dtype) while the stores are typed at compile time. It holds one of the
// instantiations, built once, and hands every call to it: the bridge from the run-time option to
// typed code, in one place.
//
// Which instantiations exist is the engine's ComputeTypes: all three by default, or fewer for a
// program that trains in one precision only. Each compute type is a whole set of stores and their
// loops compiled again (docs/compile-time.md measures what one type saves).

#include "zero/core/bfloat16.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/half.hpp"

#include <concepts>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

namespace zero {

// The compute types an engine is compiled for: float, half and bfloat16, each at most once.
template <class... Types>
struct ComputeTypes {
  static_assert(sizeof...(Types) >= 1, "zero: ComputeTypes needs at least one type");
  static_assert(((std::same_as<Types, float> || std::same_as<Types, half> ||
                  std::same_as<Types, bfloat16>)&&...),
                "zero: the compute types are float, zero::half and zero::bfloat16");

  static constexpr bool contains(DType dtype) noexcept {
    return ((dtype_of<Types> == dtype) || ...);
  }
  static std::string names() {
    std::string text;
    ((text += (text.empty() ? "" : ", ") + std::string(to_string(dtype_of<Types>))), ...);
    return text;
  }
};

using AllComputeTypes = ComputeTypes<float, half, bfloat16>;

template <template <class> class States, class Types = AllComputeTypes>
class TypedStates;

template <template <class> class States, class... Types>
class TypedStates<States, ComputeTypes<Types...>> {
 public:
  // Builds the states of `compute` from `args`; a type the engine was not compiled for is an
  // error that names the ones it was.
  template <class... Args>
  void emplace(DType compute, Args&&... args) {
    // The compute type is an agreed option: every rank refuses alike.
    require_on_every_rank(ComputeTypes<Types...>::contains(compute),
                          std::string("engine: compute_dtype ") + to_string(compute) +
                              ": this engine was compiled for " + ComputeTypes<Types...>::names() +
                              " only (its zero::ComputeTypes<...> template argument)",
                          ErrorKind::unsupported);
    compute_ = compute;
    (void)((dtype_of<Types> == compute &&
            (states_.template emplace<States<Types>>(std::forward<Args>(args)...), true)) ||
           ...);
  }

  // f(states) with the states of the compute type.
  template <class F>
  decltype(auto) visit(F&& f) {
    return dispatch<Types...>(*this, f);
  }
  // f(T{}) with the compute type T: the bridge from the run-time option to typed code of the
  // caller's (forward and backward).
  template <class F>
  decltype(auto) visit_type(F&& f) {
    return visit([&](auto& s) -> decltype(auto) {
      return f(typename std::decay_t<decltype(s)>::value_type{});
    });
  }
  // f(states) returning an R, for a caller whose code is typed by T: an error naming both types
  // unless T is the compute type (`what` names the call).
  template <class T, class R, class F>
  R visit_as(const char* what, F&& f) {
    require(compute_ == dtype_of<T>, std::string(what) + ": the compute type is " +
                                         to_string(compute_) + ", not " + to_string(dtype_of<T>));
    if constexpr ((std::same_as<T, Types> || ...))
      return f(std::get<States<T>>(states_));
    else
      return R{}; // not reached: T is not among the compute types
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return dispatch<Types...>(*this, f);
  }

 private:
  template <class First, class... Rest, class Self, class F>
  static decltype(auto) dispatch(Self& self, F& f) {
    if constexpr (sizeof...(Rest) == 0) {
      return f(std::get<States<First>>(self.states_));
    } else {
      if (self.compute_ == dtype_of<First>) return f(std::get<States<First>>(self.states_));
      return dispatch<Rest...>(self, f);
    }
  }

  DType compute_ = dtype_of<typename std::tuple_element<0, std::tuple<Types...>>::type>;
  std::variant<std::monostate, States<Types>...> states_;
};

} // namespace zero
