#pragma once
// Reading zero's settings from environment variables, with errors that name the variable.

#include "zero/core/error.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace zero::detail {

inline std::optional<std::string_view> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string_view(value);
}

inline std::optional<bool> env_flag(const char* name) {
  const auto value = env_value(name);
  if (!value) return std::nullopt;
  if (*value == "1" || *value == "true" || *value == "on" || *value == "yes") return true;
  if (*value == "0" || *value == "false" || *value == "off" || *value == "no") return false;
  fail(ErrorKind::invalid_argument,
       std::string(name) + "=" + std::string(*value) + ": expected 0/1, true/false, on/off");
}

inline std::optional<double> env_number(const char* name) {
  const auto value = env_value(name);
  if (!value) return std::nullopt;
  double result = 0;
  const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), result);
  if (ec != std::errc() || end != value->data() + value->size() || !(result >= 0))
    fail(ErrorKind::invalid_argument,
         std::string(name) + "=" + std::string(*value) + ": expected a non-negative number");
  return result;
}

} // namespace zero::detail
