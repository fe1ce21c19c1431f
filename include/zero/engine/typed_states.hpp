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
  // f(T{}) with the type T of the list that `dtype` names (the first when it names none: callers
  // pass a dtype that was checked against the list).
  template <class F>
  static decltype(auto) visit(DType dtype, F&& f) {
    return visit_from<Types...>(dtype, f);
  }
  static std::string names() {
    std::string text;
    ((text += (text.empty() ? "" : ", ") + std::string(to_string(dtype_of<Types>))), ...);
    return text;
  }

 private:
  template <class First, class... Rest, class F>
  static decltype(auto) visit_from(DType dtype, F& f) {
    if constexpr (sizeof...(Rest) == 0) {
      return f(First{});
    } else {
      if (dtype == dtype_of<First>) return f(First{});
      return visit_from<Rest...>(dtype, f);
    }
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
