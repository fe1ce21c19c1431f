#pragma once
// "auto": configs written for Hugging Face's Trainer leave values to the program (batch sizes,
// learning rate, clipping, the optimizer's betas, ...) by writing the string "auto", which the
// Trainer replaces with its own arguments before DeepSpeed reads the config. Here the program
// does the same through ParseOptions::auto_values:
//
//   zero::config::TrainerValues mine{.micro_batch_per_rank = 8, .lr = 3e-4, .max_grad_norm = 1.0};
//   options.auto_values = mine.auto_values(world_size);
//   const auto config = zero::config::from_json_file("ds_config.json", options);
//
// Every "auto" whose path has a value takes it; those left are refused in one error that lists
// them all, so a user fixes a config in one round, not one key per run. An "auto" inside a key
// zero does not read goes with that key (into the warning that lists them).

#include "zero/core/error.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zero::config {

// Values by JSON path ("optimizer.params.lr"), for the "auto" strings at those paths.
using AutoValues = std::map<std::string, nlohmann::json>;

// What a trainer usually knows, put where Hugging Face's Trainer puts it. Unset fields fill
// nothing.
struct TrainerValues {
  std::optional<std::int64_t> micro_batch_per_rank = std::nullopt;
  std::optional<std::int64_t> gradient_accumulation_steps = std::nullopt;
  std::optional<double> lr = std::nullopt;
  std::optional<std::array<double, 2>> betas = std::nullopt;
  std::optional<double> eps = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
  std::optional<double> max_grad_norm = std::nullopt; // gradient_clipping
  std::optional<std::string> dtype =
      std::nullopt; // "fp32", "fp16" or "bf16": fp16.enabled, bf16.enabled
  std::optional<std::int64_t> warmup_steps = std::nullopt;
  std::optional<std::int64_t> total_steps = std::nullopt;
  // The model's hidden size: the Trainer's bucket sizes are h^2 (reduce), 0.9 h^2 (stage 3
  // prefetch) and 10 h (stage 3 persistence threshold).
  std::optional<std::int64_t> hidden_size = std::nullopt;

  AutoValues auto_values(std::int64_t world_size) const {
    AutoValues v;
    if (micro_batch_per_rank) v["train_micro_batch_size_per_gpu"] = *micro_batch_per_rank;
    if (gradient_accumulation_steps)
      v["gradient_accumulation_steps"] = *gradient_accumulation_steps;
    if (micro_batch_per_rank && gradient_accumulation_steps)
      v["train_batch_size"] = saturated(double(*micro_batch_per_rank) *
                                        double(*gradient_accumulation_steps) * double(world_size));
    if (lr) {
      v["optimizer.params.lr"] = *lr;
      v["scheduler.params.warmup_max_lr"] = *lr;
    }
    v["scheduler.params.warmup_min_lr"] = 0.0; // the Trainer's warm-up starts from 0
    if (betas) v["optimizer.params.betas"] = {(*betas)[0], (*betas)[1]};
    if (eps) v["optimizer.params.eps"] = *eps;
    if (weight_decay) v["optimizer.params.weight_decay"] = *weight_decay;
    if (max_grad_norm) v["gradient_clipping"] = *max_grad_norm;
    if (dtype) {
      v["fp16.enabled"] = *dtype == "fp16";
      v["bf16.enabled"] = *dtype == "bf16";
    }
    if (warmup_steps) v["scheduler.params.warmup_num_steps"] = *warmup_steps;
    if (total_steps) v["scheduler.params.total_num_steps"] = *total_steps;
    if (hidden_size) {
      const double h = double(*hidden_size);
      v["zero_optimization.reduce_bucket_size"] = saturated(h * h);
      v["zero_optimization.stage3_prefetch_bucket_size"] = saturated(0.9 * h * h);
      v["zero_optimization.stage3_param_persistence_threshold"] = saturated(10 * h);
    }
    return v;
  }

 private:
  // Products of a program's sizes, rounded, and held at 2^62 rather than overflowing (a width
  // of 3e9 squares past any int64); the config reader then judges the value like any other.
  static std::int64_t saturated(double value) {
    constexpr double limit = 0x1p62;
    return value >= limit ? std::int64_t(limit) : static_cast<std::int64_t>(std::llround(value));
  }
};

namespace detail {
inline bool is_auto(const nlohmann::json& value) {
  return value.is_string() && value.get_ref<const std::string&>() == "auto";
}

// Replaces every "auto" in `node` (at `path`) that `values` has; the others become null (an
// absent key, so that reading goes on) and their paths are recorded in `left`.
inline void fill_auto(nlohmann::json& node, const std::string& path, const AutoValues& values,
                      std::vector<std::string>& left) {
  if (is_auto(node)) {
    if (const auto found = values.find(path); found != values.end()) {
      node = found->second;
    } else {
      left.push_back(path);
      node = nullptr;
    }
  } else if (node.is_object()) {
    for (auto& [key, child] : node.items()) {
      std::string child_path = path;
      if (!child_path.empty()) child_path += '.';
      child_path += key;
      fill_auto(child, child_path, values, left);
    }
  } else if (node.is_array()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      fill_auto(node[i], path + "[" + std::to_string(i) + "]", values, left);
  }
}

// Error(invalid_argument) naming every "auto" in `left`.
[[noreturn]] inline void refuse_auto(const std::vector<std::string>& left,
                                     const std::string& source) {
  std::string list;
  for (const std::string& path : left)
    list += "\n  " + path;
  fail(ErrorKind::invalid_argument,
       source +
           ": \"auto\" needs a value from the program (Hugging Face's Trainer fills these; "
           "give them through ParseOptions::auto_values, or write numbers) for " +
           std::to_string(left.size()) + (left.size() == 1 ? " key:" : " keys:") + list);
}

// Whether `path` is `key` or lies inside it.
inline bool within(const std::string& path, const std::string& key) {
  return path.starts_with(key) &&
         (path.size() == key.size() || path[key.size()] == '.' || path[key.size()] == '[');
}
} // namespace detail

} // namespace zero::config
