#pragma once
// What zero-estimate prints: the resolved inputs, one row per ZeRO stage, and the largest model
// per stage, as an aligned table or as JSON.

#include "zero/estimate/communication.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace zero_estimate {

namespace est = zero::estimate;

struct Plan {
  std::optional<double> parameters; // Ψ of the whole model
  std::int64_t data_parallel = 1;
  std::int64_t tensor_parallel = 1;
  std::optional<est::TransformerShape> shape;
  std::int64_t recomputed_layers = 0;
  std::string data_parallel_origin;
  est::BytesPerParameter bytes;
  std::string bytes_origin;
  est::Tier optimizer_offload = est::Tier::device;
  est::Tier parameter_offload = est::Tier::device;
  std::optional<double> device_memory;
  std::vector<int> stages;

  // How a tensor-parallel group holds Ψ: by the transformer's layout, else all of it split.
  est::ParameterSplit split() const {
    return shape ? est::transformer_parameters(*shape, tensor_parallel)
                 : est::all_split(parameters.value_or(0), tensor_parallel);
  }
  // The tensor-parallel all-reduces; activations are in the parameters' dtype.
  est::TensorParallelCommunication tensor_communication() const {
    return est::tensor_parallel_communication(*shape, tensor_parallel, recomputed_layers,
                                              bytes.parameters);
  }
  bool shows_tensor_communication() const { return shape && tensor_parallel > 1; }

  // The rank's parameters over N_d. Offload applies to the stages that have it: optimizer
  // states from stage 1, parameters at 3.
  est::ModelStateQuery query(int stage) const {
    return {split().per_rank(),
            data_parallel,
            stage,
            bytes,
            stage >= 1 ? optimizer_offload : est::Tier::device,
            stage == 3 ? parameter_offload : est::Tier::device};
  }
  bool offloads() const {
    return optimizer_offload != est::Tier::device || parameter_offload != est::Tier::device;
  }
};

inline std::string format(const char* pattern, double value, const char* unit = "") {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value, unit);
  return text;
}

// Decimal units, as the paper: 1 GB = 1e9 bytes.
inline std::string human_bytes(double bytes) {
  constexpr const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 6)
    bytes /= 1000, ++unit;
  return format("%.1f %s", bytes, units[unit]);
}

inline std::string human_count(double count) {
  if (std::isinf(count)) return "no limit (no model state left on the device)";
  constexpr const char* units[] = {"", " K", " M", " B", " T", " P"};
  int unit = 0;
  while (count >= 1000 && unit < 5)
    count /= 1000, ++unit;
  return format("%.3g%s", count, units[unit]);
}

// The largest Ψ per stage: a rank's share times T, every parameter taken as split.
inline double largest_model(const Plan& plan, int stage) {
  return est::largest_model(*plan.device_memory, plan.query(stage)) *
         static_cast<double>(plan.tensor_parallel);
}

inline void print_aligned(const std::vector<std::vector<std::string>>& rows, int left_columns) {
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += (c ? "  " : "") + (static_cast<int>(c) < left_columns ? row[c] + pad : pad + row[c]);
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    std::printf("%s\n", line.c_str());
  }
}

inline void print_table(const Plan& plan) {
  std::printf("ZeRO model states per data-parallel rank (the ZeRO paper's model, section 5)\n");
  if (plan.parameters && plan.shape)
    std::printf(
        "  parameters        %s (%.10g = L (12 H^2 + 13 H) + V H + S H + 2 H; L = %lld, "
        "H = %lld, A = %lld, S = %lld, V = %lld)\n",
        human_count(*plan.parameters).c_str(), *plan.parameters,
        static_cast<long long>(plan.shape->layers), static_cast<long long>(plan.shape->hidden),
        static_cast<long long>(plan.shape->heads), static_cast<long long>(plan.shape->sequence),
        static_cast<long long>(plan.shape->vocabulary));
  else if (plan.parameters)
    std::printf("  parameters        %s (%.4g)\n", human_count(*plan.parameters).c_str(),
                *plan.parameters);
  const est::ParameterSplit split = plan.split();
  if (plan.parameters && plan.tensor_parallel > 1 && plan.shape)
    std::printf("  tensor parallel   T = %lld; per rank Psi = %.10g split / T + %.10g replicated = "
                "%.10g (vocabulary padded to %lld)\n",
                static_cast<long long>(plan.tensor_parallel), split.split, split.replicated,
                split.per_rank(), static_cast<long long>(split.padded_vocabulary));
  else if (plan.parameters && plan.tensor_parallel > 1)
    std::printf("  tensor parallel   T = %lld; per rank Psi = %.4g / T = %.4g, assuming every "
                "parameter is split\n",
                static_cast<long long>(plan.tensor_parallel), split.split, split.per_rank());
  std::printf("  data parallel     %lld ranks (%s)", static_cast<long long>(plan.data_parallel),
              plan.data_parallel_origin.c_str());
  if (plan.tensor_parallel > 1)
    std::printf("; world N_d x T = %lld ranks",
                static_cast<long long>(plan.data_parallel * plan.tensor_parallel));
  std::printf("\n");
  std::printf("  bytes/parameter   parameters %g, gradients %g, optimizer states K = %g (%s)\n",
              plan.bytes.parameters, plan.bytes.gradients, plan.bytes.optimizer_states,
              plan.bytes_origin.c_str());
  if (plan.offloads())
    std::printf(
        "  offload           optimizer states -> %s (stages 1-3), parameters -> %s (stage 3)\n",
        est::to_string(plan.optimizer_offload), est::to_string(plan.parameter_offload));
  std::printf("  1 GB = 1e9 bytes; communication in elements per rank per step\n");

  if (plan.parameters) {
    std::vector<std::vector<std::string>> rows{
        {"stage", "ZeRO", "parameters", "gradients", "optimizer", "per device"}};
    if (plan.offloads()) rows[0].insert(rows[0].end(), {"host", "NVMe"});
    rows[0].push_back("communication");
    for (int stage : plan.stages) {
      const est::ModelStateMemory memory = est::model_state_memory(plan.query(stage));
      std::vector<std::string> row{std::to_string(stage),
                                   est::stage_name(stage),
                                   human_bytes(memory.parameters.bytes),
                                   human_bytes(memory.gradients.bytes),
                                   human_bytes(memory.optimizer_states.bytes),
                                   human_bytes(memory.on(est::Tier::device))};
      if (plan.offloads())
        row.insert(row.end(), {human_bytes(memory.on(est::Tier::cpu)),
                               human_bytes(memory.on(est::Tier::nvme))});
      row.push_back(std::to_string(est::communication_factor(stage)) + " Psi = " +
                    format("%.3g", est::communication_elements(stage, split.per_rank())));
      rows.push_back(row);
    }
    std::printf("\n");
    print_aligned(rows, 2);
  }
  if (plan.shows_tensor_communication()) {
    const est::TensorParallelCommunication tp = plan.tensor_communication();
    const double tokens =
        static_cast<double>(plan.shape->micro_batch) * static_cast<double>(plan.shape->sequence);
    std::printf(
        "\ntensor-parallel communication per rank and step (Megatron-LM, Shoeybi et al. 2019, "
        "section 3; B = %lld, R = %lld)\n"
        "  all-reduces       %lld = (4 L + 2 R + 2) of B S H = %.10g elements (two per layer "
        "forward, two backward,\n"
        "                    two per recomputed layer, the embedding's lookup, the head's input "
        "gradient)\n"
        "                    + 3 of B S = %.10g (the cross-entropy's maximum, sum of "
        "exponentials, target logit)\n"
        "  elements          %.10g\n"
        "  bytes             %s (%g bytes per activation, as the parameters)\n"
        "  ring all-reduce   %s per rank on the wire = 2 (T - 1) / T x bytes (nccl-tests' bus "
        "bandwidth)\n",
        static_cast<long long>(plan.shape->micro_batch),
        static_cast<long long>(plan.recomputed_layers), static_cast<long long>(tp.all_reduces),
        tokens * static_cast<double>(plan.shape->hidden), tokens, tp.elements,
        human_bytes(tp.bytes).c_str(), plan.bytes.parameters, human_bytes(tp.ring_bytes).c_str());
  }
  if (plan.device_memory) {
    const std::string split_note = plan.tensor_parallel > 1
                                       ? ", T = " + std::to_string(plan.tensor_parallel) +
                                             ", assuming every parameter is split"
                                       : "";
    std::printf("\nlargest model whose model states fit in %s per device (N_d = %lld%s):\n",
                human_bytes(*plan.device_memory).c_str(),
                static_cast<long long>(plan.data_parallel), split_note.c_str());
    std::vector<std::vector<std::string>> rows{{"stage", "ZeRO", "parameters"}};
    for (int stage : plan.stages)
      rows.push_back(
          {std::to_string(stage), est::stage_name(stage), human_count(largest_model(plan, stage))});
    print_aligned(rows, 2);
  }
}

inline void print_json(const Plan& plan) {
  nlohmann::ordered_json out;
  out["parameters"] = plan.parameters ? nlohmann::ordered_json(*plan.parameters) : nullptr;
  out["data_parallel"] = plan.data_parallel;
  out["tensor_parallel"] = plan.tensor_parallel;
  out["world_size"] = plan.data_parallel * plan.tensor_parallel;
  const est::ParameterSplit split = plan.split();
  if (plan.parameters) {
    out["parameters_per_rank"] = split.per_rank();
    out["split_parameters"] = split.split;
    out["replicated_parameters"] = split.replicated;
  }
  if (plan.shape)
    out["transformer"] = {{"layers", plan.shape->layers},
                          {"hidden", plan.shape->hidden},
                          {"heads", plan.shape->heads},
                          {"sequence", plan.shape->sequence},
                          {"vocabulary", plan.shape->vocabulary},
                          {"padded_vocabulary", split.padded_vocabulary},
                          {"micro_batch", plan.shape->micro_batch},
                          {"recomputed_layers", plan.recomputed_layers}};
  if (plan.shows_tensor_communication()) {
    const est::TensorParallelCommunication tp = plan.tensor_communication();
    out["tensor_parallel_communication"] = {{"all_reduces", tp.all_reduces},
                                            {"elements", tp.elements},
                                            {"activation_bytes", plan.bytes.parameters},
                                            {"bytes", tp.bytes},
                                            {"ring_bytes_per_rank", tp.ring_bytes}};
  }
  out["bytes_per_parameter"] = {{"parameters", plan.bytes.parameters},
                                {"gradients", plan.bytes.gradients},
                                {"optimizer_states", plan.bytes.optimizer_states}};
  out["offload"] = {{"optimizer_states", est::to_string(plan.optimizer_offload)},
                    {"parameters", est::to_string(plan.parameter_offload)}};
  out["stages"] = nlohmann::ordered_json::array();
  for (int stage : plan.stages) {
    nlohmann::ordered_json row{{"stage", stage}, {"name", est::stage_name(stage)}};
    if (plan.parameters) {
      const est::ModelStateMemory memory = est::model_state_memory(plan.query(stage));
      row["parameters_bytes"] = memory.parameters.bytes;
      row["gradients_bytes"] = memory.gradients.bytes;
      row["optimizer_states_bytes"] = memory.optimizer_states.bytes;
      row["device_bytes"] = memory.on(est::Tier::device);
      row["cpu_bytes"] = memory.on(est::Tier::cpu);
      row["nvme_bytes"] = memory.on(est::Tier::nvme);
      row["communication_factor"] = est::communication_factor(stage);
      row["communication_elements"] = est::communication_elements(stage, split.per_rank());
    }
    if (plan.device_memory) {
      // JSON has no infinity: null means no model state is left on the device.
      const double largest = largest_model(plan, stage);
      row["largest_model_parameters"] =
          std::isinf(largest) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(largest);
    }
    out["stages"].push_back(row);
  }
  if (plan.device_memory) out["device_memory_bytes"] = *plan.device_memory;
  std::printf("%s\n", out.dump(2).c_str());
}

} // namespace zero_estimate
