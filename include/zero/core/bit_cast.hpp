#pragma once
// std::bit_cast usable in CUDA device code too (nvcc does not treat std::bit_cast as __device__).

#include "zero/core/platform.hpp"

namespace zero::detail {
template <class To, class From>
requires(sizeof(To) == sizeof(From)) ZERO_HOST_DEVICE constexpr To
    bit_cast(const From& from) noexcept {
  return __builtin_bit_cast(To, from);
}
} // namespace zero::detail
