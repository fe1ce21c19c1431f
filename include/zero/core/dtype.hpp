#pragma once
// Element types that zero moves and reduces, as a runtime tag (DType) and a compile-time concept
// (Element). Half precision types accumulate in float.

#include "zero/core/bfloat16.hpp"
#include "zero/core/error.hpp"
#include "zero/core/half.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace zero {

enum class DType : std::uint8_t { float32, float64, int32, int64, uint8, float16, bfloat16 };

namespace detail {
template <class T>
struct dtype_traits; // no definition: T is not an element type
template <>
struct dtype_traits<float> : std::integral_constant<DType, DType::float32> {};
template <>
struct dtype_traits<double> : std::integral_constant<DType, DType::float64> {};
template <>
struct dtype_traits<std::int32_t> : std::integral_constant<DType, DType::int32> {};
template <>
struct dtype_traits<std::int64_t> : std::integral_constant<DType, DType::int64> {};
template <>
struct dtype_traits<std::uint8_t> : std::integral_constant<DType, DType::uint8> {};
template <>
struct dtype_traits<half> : std::integral_constant<DType, DType::float16> {};
template <>
struct dtype_traits<bfloat16> : std::integral_constant<DType, DType::bfloat16> {};
} // namespace detail

template <class T>
concept Element = requires {
  detail::dtype_traits<std::remove_cv_t<T>>::value;
};

template <Element T>
inline constexpr DType dtype_of = detail::dtype_traits<std::remove_cv_t<T>>::value;

template <class T>
concept LowPrecision =
    std::same_as<std::remove_cv_t<T>, half> || std::same_as<std::remove_cv_t<T>, bfloat16>;

template <class T>
concept FloatingElement = LowPrecision<T> || std::floating_point<std::remove_cv_t<T>>;

// The type arithmetic on T is done in: float for half and bfloat16, T otherwise.
template <Element T>
using accumulate_t = std::conditional_t<LowPrecision<T>, float, std::remove_cv_t<T>>;

// Converts between element types through their accumulation type (half <-> float, etc.).
template <class To, class From>
ZERO_HOST_DEVICE constexpr To convert(From value) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (LowPrecision<From>) {
    return convert<To>(static_cast<float>(value));
  } else if constexpr (LowPrecision<To>) {
    return To(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

constexpr std::size_t size_of(DType type) noexcept {
  switch (type) {
  case DType::float64:
  case DType::int64:
    return 8;
  case DType::float32:
  case DType::int32:
    return 4;
  case DType::float16:
  case DType::bfloat16:
    return 2;
  case DType::uint8:
    return 1;
  }
  return 0;
}

constexpr bool is_low_precision(DType type) noexcept {
  return type == DType::float16 || type == DType::bfloat16;
}

constexpr const char* to_string(DType type) noexcept {
  switch (type) {
  case DType::float32:
    return "float";
  case DType::float64:
    return "double";
  case DType::int32:
    return "int32";
  case DType::int64:
    return "int64";
  case DType::uint8:
    return "uint8";
  case DType::float16:
    return "half";
  case DType::bfloat16:
    return "bfloat16";
  }
  return "?";
}

// Accepts nccl-tests' names (float, half, bfloat16, int32, ...) and the usual short ones.
inline DType parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType type;
  };
  constexpr Alias aliases[] = {
      {"float", DType::float32},  {"float32", DType::float32},   {"fp32", DType::float32},
      {"double", DType::float64}, {"float64", DType::float64},   {"fp64", DType::float64},
      {"int32", DType::int32},    {"int", DType::int32},         {"int64", DType::int64},
      {"uint8", DType::uint8},    {"half", DType::float16},      {"float16", DType::float16},
      {"fp16", DType::float16},   {"bfloat16", DType::bfloat16}, {"bf16", DType::bfloat16}};
  for (const Alias& alias : aliases)
    if (alias.name == name) return alias.type;
  fail(ErrorKind::invalid_argument,
       "unknown element type '" + std::string(name) +
           "' (expected float, double, int32, int64, uint8, half or bfloat16)");
}

// Calls f(T{}) with the C++ type behind a runtime DType: the bridge from type-erased backends to
// templated kernels.
template <class F>
decltype(auto) visit_dtype(DType type, F&& f) {
  switch (type) {
  case DType::float32:
    return f(float{});
  case DType::float64:
    return f(double{});
  case DType::int32:
    return f(std::int32_t{});
  case DType::int64:
    return f(std::int64_t{});
  case DType::uint8:
    return f(std::uint8_t{});
  case DType::float16:
    return f(half{});
  case DType::bfloat16:
    return f(bfloat16{});
  }
  fail(ErrorKind::invalid_argument, "invalid DType value");
}

} // namespace zero
