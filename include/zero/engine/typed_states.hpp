#pragma once
// TypedStates: the engine's model states for the compute type, which is chosen at run time
// (EngineOptions::compute_dtype) while the stores are typed at compile time. It holds one of the
// three instantiations, built once, and hands every call to it: the bridge from the run-time
// option to typed code, in one place.

#include "zero/core/bfloat16.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/half.hpp"

#include <utility>
#include <variant>

namespace zero {

template <template <class> class States>
class TypedStates {
 public:
  // Builds the states of `compute` from `args` (float for any type other than half and bfloat16).
  template <class... Args>
  void emplace(DType compute, Args&&... args) {
    compute_ = compute;
    switch (compute) {
    case DType::float16:
      states_.template emplace<States<half>>(std::forward<Args>(args)...);
      break;
    case DType::bfloat16:
      states_.template emplace<States<bfloat16>>(std::forward<Args>(args)...);
      break;
    default:
      states_.template emplace<States<float>>(std::forward<Args>(args)...);
    }
  }

  // f(states) with the states of the compute type.
  template <class F>
  decltype(auto) visit(F&& f) {
    return dispatch(*this, std::forward<F>(f));
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return dispatch(*this, std::forward<F>(f));
  }

 private:
  template <class Self, class F>
  static decltype(auto) dispatch(Self& self, F&& f) {
    switch (self.compute_) {
    case DType::float16:
      return f(std::get<States<half>>(self.states_));
    case DType::bfloat16:
      return f(std::get<States<bfloat16>>(self.states_));
    default:
      return f(std::get<States<float>>(self.states_));
    }
  }

  DType compute_ = DType::float32;
  std::variant<std::monostate, States<float>, States<half>, States<bfloat16>> states_;
};

} // namespace zero
