#pragma once
// Reads a parsed JSON document into config structs: typed getters whose errors name the JSON path
// and the value found, DeepSpeed's number rules, and a record of the keys nobody read.

#include "zero/config/unbuilt.hpp"
#include "zero/core/error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero::config::detail {

// What reading learns besides the values: keys nobody read, notes for the user, and requests for
// unbuilt features that a Config cannot even hold (an optimizer type zero lacks).
struct ParseContext {
  std::string source;
  std::vector<std::string> unknown_keys;
  std::vector<std::string> notes;
  std::vector<UnbuiltFeature> unbuilt;

  [[noreturn]] void fail_at(std::string_view path, std::string_view problem) const {
    fail(ErrorKind::invalid_argument,
         source + ": " + std::string(path) + ": " + std::string(problem));
  }
};

inline std::string join_path(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
}

// The value as written, shortened, for the "got ..." of a message.
inline std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text.replace(57, std::string::npos, "...");
  if (value.is_string() && value.get_ref<const std::string&>() == "auto")
    text += " (\"auto\" is filled in by the Hugging Face Trainer, not by DeepSpeed; write a value)";
  return text;
}

// DeepSpeed's integer options are pydantic ints, which take 5e8 or 16.0 as long as the value is
// whole; a few are checked with isinstance(int) and take only an integer literal.
enum class IntegerSyntax { whole_number, literal };

struct IntegerRange {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t max = std::numeric_limits<std::int64_t>::max();

  std::string expected() const {
    if (max != std::numeric_limits<std::int64_t>::max())
      return std::to_string(min) + ".." + std::to_string(max);
    if (min == 0) return "a non-negative integer";
    if (min == 1) return "a positive integer";
    if (min != std::numeric_limits<std::int64_t>::min())
      return "an integer >= " + std::to_string(min);
    return "an integer";
  }
};
inline constexpr IntegerRange non_negative{0};
inline constexpr IntegerRange positive{1};

struct NumberRange {
  double min = -std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  double max = std::numeric_limits<double>::infinity();

  bool contains(double v) const { return (min_exclusive ? v > min : v >= min) && v <= max; }
  std::string expected() const {
    auto text = [](double v) { return nlohmann::json(v).dump(); };
    if (std::isfinite(min) && std::isfinite(max))
      return "a number in [" + text(min) + ", " + text(max) + "]";
    if (std::isfinite(min))
      return std::string("a number ") + (min_exclusive ? "> " : ">= ") + text(min);
    return "a number";
  }
};
inline constexpr NumberRange non_negative_number{0.0};
inline constexpr NumberRange positive_number{0.0, true};

inline std::int64_t as_integer(const nlohmann::json& value, const std::string& path,
                               const ParseContext& context, IntegerRange range = {},
                               IntegerSyntax syntax = IntegerSyntax::whole_number) {
  std::int64_t result = 0;
  constexpr double two_to_63 = 9223372036854775808.0;
  if (value.is_number_unsigned()) {
    if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(range.max))
      context.fail_at(path, "expected " + range.expected() + ", got " + describe(value));
    result = static_cast<std::int64_t>(value.get<std::uint64_t>());
  } else if (value.is_number_integer()) {
    result = value.get<std::int64_t>();
  } else if (value.is_number_float() && syntax == IntegerSyntax::whole_number) {
    const double number = value.get<double>();
    if (!std::isfinite(number) || std::floor(number) != number)
      context.fail_at(path, "expected " + range.expected() + ", got " + describe(value) +
                                ", which is not a whole number");
    if (number < -two_to_63 || number >= two_to_63)
      context.fail_at(path, "expected " + range.expected() + ", got " + describe(value));
    result = static_cast<std::int64_t>(number);
  } else if (value.is_number_float()) {
    context.fail_at(path, "expected " + range.expected() + " written as an integer literal, got " +
                              describe(value) + " (DeepSpeed checks that it is an int)");
  } else {
    context.fail_at(path, "expected " + range.expected() + ", got " + describe(value));
  }
  if (result < range.min || result > range.max)
    context.fail_at(path, "expected " + range.expected() + ", got " + describe(value));
  return result;
}

inline double as_number(const nlohmann::json& value, const std::string& path,
                        const ParseContext& context, NumberRange range = {}) {
  if (!value.is_number() || !range.contains(value.get<double>()))
    context.fail_at(path, "expected " + range.expected() + ", got " + describe(value));
  return value.get<double>();
}

inline bool as_bool(const nlohmann::json& value, const std::string& path,
                    const ParseContext& context) {
  if (!value.is_boolean()) context.fail_at(path, "expected true or false, got " + describe(value));
  return value.get<bool>();
}

inline std::string as_string(const nlohmann::json& value, const std::string& path,
                             const ParseContext& context) {
  if (!value.is_string()) context.fail_at(path, "expected a string, got " + describe(value));
  return value.get<std::string>();
}

// One JSON object at a known path. Every getter marks its key as read; finish() reports the
// rest as unknown. A key set to null reads as absent, as DeepSpeed's optional fields do.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& object, std::string path, ParseContext& context)
      : object_(object), path_(std::move(path)), context_(context) {
    if (!object_.is_object())
      context_.fail_at(path_.empty() ? "(top level)" : path_,
                       "expected an object, got " + describe(object_));
  }

  ParseContext& context() const noexcept { return context_; }
  std::string path_of(std::string_view key) const { return join_path(path_, key); }
  bool has(std::string_view key) const {
    const auto it = object_.find(std::string(key));
    return it != object_.end() && !it->is_null();
  }

  const nlohmann::json* take(std::string_view key) {
    read_.emplace(key);
    const auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  const nlohmann::json& take_required(std::string_view key, std::string_view needed_by) {
    const nlohmann::json* value = take(key);
    if (!value) context_.fail_at(path_of(key), "missing; " + std::string(needed_by) + " needs it");
    return *value;
  }

  bool boolean(std::string_view key, bool fallback) {
    const nlohmann::json* value = take(key);
    return value ? as_bool(*value, path_of(key), context_) : fallback;
  }
  std::optional<std::int64_t> optional_integer(std::string_view key, IntegerRange range = {},
                                               IntegerSyntax syntax = IntegerSyntax::whole_number) {
    const nlohmann::json* value = take(key);
    if (!value) return std::nullopt;
    return as_integer(*value, path_of(key), context_, range, syntax);
  }
  std::int64_t integer(std::string_view key, std::int64_t fallback, IntegerRange range = {},
                       IntegerSyntax syntax = IntegerSyntax::whole_number) {
    return optional_integer(key, range, syntax).value_or(fallback);
  }
  std::optional<double> optional_number(std::string_view key, NumberRange range = {}) {
    const nlohmann::json* value = take(key);
    if (!value) return std::nullopt;
    return as_number(*value, path_of(key), context_, range);
  }
  double number(std::string_view key, double fallback, NumberRange range = {}) {
    return optional_number(key, range).value_or(fallback);
  }
  std::optional<std::string> optional_string(std::string_view key) {
    const nlohmann::json* value = take(key);
    if (!value) return std::nullopt;
    return as_string(*value, path_of(key), context_);
  }

  // Reads the object under `key`, if present, with read(ObjectReader&).
  template <class Read>
  void object(std::string_view key, Read&& read) {
    const nlohmann::json* value = take(key);
    if (!value) return;
    ObjectReader child(*value, path_of(key), context_);
    read(child);
    child.finish();
  }

  void finish() {
    for (const auto& item : object_.items())
      if (!read_.contains(item.key())) context_.unknown_keys.push_back(path_of(item.key()));
  }

 private:
  const nlohmann::json& object_;
  std::string path_;
  ParseContext& context_;
  std::set<std::string, std::less<>> read_;
};

} // namespace zero::config::detail
