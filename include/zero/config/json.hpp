#pragma once
// Reads a DeepSpeed ds_config.json into a zero::config::Config.
//
//   auto config = zero::config::from_json_file("ds_config.json");
//
// Errors (zero::Error) name the file and the JSON path: "ds_config.json: zero_optimization.stage:
// expected 0..3, got 4"; malformed text gives line and column. Keys zero does not read produce
// one warning listing them all. Options for features that are not built yet fail with
// ErrorKind::unsupported naming each key, unless the caller accepts them (the estimator does).
// "auto" values take the program's values (ParseOptions::auto_values, config/auto_values.hpp).
// Needs nlohmann-json (target nlohmann_json::nlohmann_json).

#include "zero/config/auto_values.hpp"
#include "zero/config/config.hpp"
#include "zero/config/detail/json_reader.hpp"
#include "zero/config/detail/parse_text.hpp"
#include "zero/config/detail/read_aio.hpp"
#include "zero/config/detail/read_training.hpp"
#include "zero/config/detail/read_zero.hpp"
#include "zero/config/unbuilt.hpp"
#include "zero/core/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace zero::config {

enum class UnbuiltFeatures {
  reject, // Error(unsupported) naming each key: what a training run needs
  accept  // keep them in the Config and warn: for tools that only look (the estimator)
};

using WarningSink = std::function<void(std::string_view message)>;

inline void warn_to_stderr(std::string_view message) {
  std::fprintf(stderr, "zero: warning: %.*s\n", static_cast<int>(message.size()), message.data());
}

struct ParseOptions {
  UnbuiltFeatures unbuilt = UnbuiltFeatures::reject;
  WarningSink warn = warn_to_stderr;
  std::string source = "config"; // names the text in messages; from_json_file puts the path here
  // What each "auto" becomes, by JSON path; an "auto" without a value here is an error.
  AutoValues auto_values{};
};

namespace detail {
inline Config read_config(ObjectReader& top) {
  ParseContext& context = top.context();
  Config config;
  config.train_batch_size = top.optional_integer("train_batch_size", positive);
  config.train_micro_batch_size_per_gpu =
      top.optional_integer("train_micro_batch_size_per_gpu", positive);
  config.gradient_accumulation_steps =
      top.optional_integer("gradient_accumulation_steps", positive);
  config.gradient_clipping = top.number("gradient_clipping", 0.0, non_negative_number);
  config.steps_per_print = top.optional_integer("steps_per_print", positive);
  config.wall_clock_breakdown = top.boolean("wall_clock_breakdown", false);
  config.zero_allow_untested_optimizer = top.boolean("zero_allow_untested_optimizer", false);
  // Fixed here: where DeepSpeed divides by the ranks (before the sum, after it, or by a factor
  // before and the rest after) changes the rounding, and how close an fp16 sum comes to overflow;
  // zero's communicators average as one sum and one division (host reductions sum half and
  // bfloat16 in float). Both accepted; neither changes anything.
  top.boolean("prescale_gradients", false);
  top.number("gradient_predivide_factor", 1.0, positive_number);

  if (const nlohmann::json* zero_opt = top.take("zero_optimization");
      zero_opt && zero_opt->is_boolean()) {
    // DeepSpeed's oldest form: a switch for stage 1.
    config.zero_optimization.stage = zero_opt->get<bool>() ? 1 : 0;
    context.notes.push_back("zero_optimization: true/false is deprecated; read as stage " +
                            std::to_string(config.zero_optimization.stage));
  } else if (zero_opt) {
    ObjectReader reader(*zero_opt, "zero_optimization", context);
    config.zero_optimization = read_zero_optimization(reader);
    reader.finish();
  }
  top.object("activation_checkpointing", [&](ObjectReader& r) {
    config.activation_checkpointing = read_activation_checkpointing(r);
  });
  top.object("fp16",
             [&](ObjectReader& r) { config.fp16 = read_fp16(r, config.zero_optimization.stage); });
  if (top.has("bf16") && top.has("bfloat16"))
    context.fail_at("bf16", "given twice, also under its old name bfloat16; keep one");
  for (const char* key : {"bf16", "bfloat16"})
    top.object(key, [&](ObjectReader& r) {
      config.bf16.enabled = r.boolean("enabled", false);
      detail::refuse_16bit_master(r, "bf16_master_weights_and_grads");
      detail::refuse_16bit_master(r, "bf16_optimizer_states");
    });
  if (config.fp16.enabled && config.bf16.enabled)
    context.fail_at("fp16.enabled", "fp16 and bf16 cannot both be enabled");
  top.object("optimizer", [&](ObjectReader& r) { config.optimizer = read_optimizer(r); });
  top.object("scheduler",
             [&](ObjectReader& r) { config.scheduler = read_scheduler(r, config.optimizer); });
  top.object("aio", [&](ObjectReader& r) { config.aio = read_aio(r); });
  read_model_parallelism(top);
  return config;
}

inline std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text;
}
} // namespace detail

// Reads an already parsed document.
inline Config from_json(const nlohmann::json& document, const ParseOptions& options = {}) {
  detail::ParseContext context{options.source, {}, {}, {}};
  nlohmann::json filled = document;
  std::vector<std::string> autos_left; // read as absent keys, refused below
  detail::fill_auto(filled, "", options.auto_values, autos_left);
  detail::ObjectReader top(filled, "", context);
  Config config;
  try {
    config = detail::read_config(top);
    top.finish();
  } catch (const Error&) {
    // A key left "auto" may be what the reader tripped on (a required one now absent): name the
    // placeholders, the cause.
    if (!autos_left.empty()) detail::refuse_auto(autos_left, options.source);
    throw;
  }

  auto warn = [&](const std::string& message) {
    if (options.warn) options.warn(options.source + ": " + message);
  };
  for (const std::string& note : context.notes)
    warn(note);
  if (!context.unknown_keys.empty()) {
    std::sort(context.unknown_keys.begin(), context.unknown_keys.end());
    warn("ignoring keys zero does not read: " + detail::join(context.unknown_keys));
  }

  std::erase_if(autos_left, [&](const std::string& path) {
    return std::any_of(context.unknown_keys.begin(), context.unknown_keys.end(),
                       [&](const std::string& key) { return detail::within(path, key); });
  });
  if (!autos_left.empty()) detail::refuse_auto(autos_left, options.source);

  std::vector<UnbuiltFeature> unbuilt = unbuilt_features(config);
  unbuilt.insert(unbuilt.end(), context.unbuilt.begin(), context.unbuilt.end());
  if (!unbuilt.empty()) {
    if (options.unbuilt == UnbuiltFeatures::reject)
      fail(ErrorKind::unsupported, options.source + ": not supported yet:" + describe(unbuilt));
    warn("accepted, but not supported yet by the training engine:" + describe(unbuilt));
  }
  return config;
}

inline Config from_json_string(std::string_view text, const ParseOptions& options = {}) {
  return from_json(detail::parse_config_text(text, options.source), options);
}

inline Config from_json_file(const std::filesystem::path& path, ParseOptions options = {}) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    fail(ErrorKind::io,
         "cannot read config " + path.string() + ": " + ::zero::detail::system_text(errno));
  std::ostringstream text;
  text << file.rdbuf();
  options.source = path.string();
  return from_json_string(text.str(), options);
}

} // namespace zero::config
