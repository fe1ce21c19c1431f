#pragma once
// The element types gradients come in: fp32, or the half-precision types of mixed-precision
// training.

#include "zero/core/dtype.hpp"

#include <concepts>

namespace zero {

template <class G>
concept GradientElement =
    std::same_as<G, float> || std::same_as<G, half> || std::same_as<G, bfloat16>;

} // namespace zero
