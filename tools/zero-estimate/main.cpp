// zero-estimate: "will my model fit?" Model-state memory per rank and communication per step for
// each ZeRO stage, after the ZeRO paper; see docs/estimator.md.

#include "arguments.hpp"
#include "report.hpp"

#include "zero/config/json.hpp"
#include "zero/estimate/from_config.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace zero_estimate {

namespace {

const char* precision_name(const zero::config::Config& config) {
  return config.fp16.enabled ? "fp16" : config.bf16.enabled ? "bf16" : "fp32";
}

// The optimizer section's type as written: the config keeps no optimizer it has not built (1-bit
// ones, say), yet the file names one, and the estimate must not claim it has none.
std::optional<std::string> written_optimizer_type(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  const nlohmann::json document = zero::config::detail::parse_config_text(text.str(), path);
  const auto section = document.find("optimizer");
  if (section == document.end() || !section->is_object()) return std::nullopt;
  const auto type = section->find("type");
  if (type == section->end() || !type->is_string()) return std::nullopt;
  return type->get<std::string>();
}

std::string optimizer_name(const zero::config::Config& config,
                           const std::optional<std::string>& written) {
  if (!config.optimizer && written)
    return *written + " (not built here; its states counted as Adam's)";
  if (!config.optimizer) return "no optimizer section, Adam assumed";
  std::string name = zero::config::to_string(config.optimizer->type);
  if (config.optimizer->type == zero::config::OptimizerType::sgd)
    name += config.optimizer->momentum > 0 ? " with momentum" : " without momentum";
  if (config.optimizer->moment_bits == 8) name += " with 8-bit moments";
  if (const int bits = config.optimizer->master_residual_bits; bits != 0)
    name += ", master split with a " + std::to_string(bits) + "-bit residual";
  return name;
}

// The world size a config's three batch sizes imply, if they do.
std::optional<std::int64_t> implied_world_size(const zero::config::Config& config) {
  if (!config.train_batch_size || !config.train_micro_batch_size_per_gpu ||
      !config.gradient_accumulation_steps)
    return std::nullopt;
  const std::int64_t per_rank =
      *config.train_micro_batch_size_per_gpu * *config.gradient_accumulation_steps;
  if (*config.train_batch_size % per_rank != 0) return std::nullopt;
  return *config.train_batch_size / per_rank;
}

Plan make_plan(const Arguments& args) {
  Plan plan;
  plan.parameters = args.parameters;
  plan.tensor_parallel = args.tensor_parallel;
  plan.shape = args.shape;
  plan.recomputed_layers = args.recomputed_layers;
  if (args.shape) plan.parameters = zero::estimate::transformer_parameters(*args.shape);
  plan.device_memory = args.device_memory;
  plan.host_memory = args.host_memory;
  plan.nvme_memory = args.nvme_memory;
  plan.bytes_origin = "mixed-precision Adam, as in the paper";
  plan.data_parallel_origin = "default";
  std::optional<int> stage = args.stage;
  if (args.config_path) {
    // Only looking: offload and the other unbuilt features are exactly what is worth estimating.
    const zero::config::Config config = zero::config::from_json_file(
        *args.config_path, {.unbuilt = zero::config::UnbuiltFeatures::accept});
    const zero::estimate::ModelStateQuery from_config =
        zero::estimate::query_from_config(config, 0, 1);
    if (!stage) stage = from_config.stage;
    plan.bytes = from_config.bytes;
    plan.bytes_origin = *args.config_path + ": " + precision_name(config) + ", " +
                        optimizer_name(config, written_optimizer_type(*args.config_path));
    plan.optimizer_offload = from_config.optimizer_offload;
    plan.optimizer_offload_ratio = from_config.optimizer_offload_ratio;
    plan.parameter_offload = from_config.parameter_offload;
    if (const auto world = implied_world_size(config)) {
      plan.data_parallel = *world;
      plan.data_parallel_origin = "implied by the batch sizes in " + *args.config_path;
    }
  }
  if (args.data_parallel) {
    plan.data_parallel = *args.data_parallel;
    plan.data_parallel_origin = "--dp";
  }
  if (args.optimizer_bytes || args.param_bytes || args.grad_bytes) plan.bytes_origin += "; flags";
  plan.bytes.optimizer_states = args.optimizer_bytes.value_or(plan.bytes.optimizer_states);
  plan.bytes.parameters = args.param_bytes.value_or(plan.bytes.parameters);
  plan.bytes.gradients = args.grad_bytes.value_or(plan.bytes.gradients);
  plan.optimizer_offload = args.offload_optimizer.value_or(plan.optimizer_offload);
  plan.optimizer_offload_ratio = args.offload_ratio.value_or(plan.optimizer_offload_ratio);
  if (plan.optimizer_offload_ratio < 1 && plan.optimizer_offload == zero::estimate::Tier::device)
    throw UsageError("--offload-ratio below 1 splits offloaded optimizer states: give "
                     "--offload-optimizer cpu or nvme");
  plan.parameter_offload = args.offload_param.value_or(plan.parameter_offload);
  // Activations are in the parameters' dtype unless --activation-bytes says otherwise.
  plan.activation_bytes = args.activation_bytes.value_or(plan.bytes.parameters);
  plan.activation_bytes_given = args.activation_bytes.has_value();
  if (args.shape) {
    plan.checkpoints = args.checkpoints.value_or(args.shape->layers);
    if (args.checkpoints) plan.checkpoints_asked = args.checkpoints_asked;
    plan.recomputed_from_checkpoints = args.checkpoints.has_value();
  }
  if (stage) {
    plan.stages = {*stage};
    if (*stage < 1 && plan.optimizer_offload != zero::estimate::Tier::device)
      throw UsageError("--offload-optimizer needs stage 1, 2 or 3");
    if (*stage != 3 && plan.parameter_offload != zero::estimate::Tier::device)
      throw UsageError("--offload-param needs stage 3");
  } else {
    plan.stages = {0, 1, 2, 3};
  }
  return plan;
}

// zero::Error's text starts with "zero: "; the tool names itself instead.
std::string without_prefix(const char* what) {
  std::string text = what;
  return text.rfind("zero: ", 0) == 0 ? text.substr(6) : text;
}

} // namespace
} // namespace zero_estimate

int main(int argc, char** argv) {
  using namespace zero_estimate;
  try {
    const Arguments args = parse_arguments(argc, argv);
    if (args.help) {
      std::fputs(help_text().c_str(), stdout);
      return 0;
    }
    const Plan plan = make_plan(args);
    if (args.json)
      print_json(plan);
    else
      print_table(plan);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "zero-estimate: error: %s\nRun 'zero-estimate --help' for usage.\n",
                 e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-estimate: error: %s\n", without_prefix(e.what()).c_str());
    return 1;
  }
}
