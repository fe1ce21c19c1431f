#pragma once
// What zero-estimate prints: the resolved inputs, one row per ZeRO stage, and the largest model
// per stage and per placement, as an aligned table or as JSON.

#include "plan.hpp"

#include "zero/estimate/activation_memory.hpp"
#include "zero/estimate/communication.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zero_estimate {

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
  if (std::isinf(count)) return "no limit (no model state on a sized tier)";
  constexpr const char* units[] = {"", " K", " M", " B", " T", " P"};
  int unit = 0;
  while (count >= 1000 && unit < 5)
    count /= 1000, ++unit;
  return format("%.3g%s", count, units[unit]);
}

inline const char* tier_name(est::Tier tier) {
  return tier == est::Tier::device ? "device" : tier == est::Tier::cpu ? "host memory" : "NVMe";
}

inline std::string bound_text(const est::LargestModel& largest) {
  return largest.bound_by ? tier_name(*largest.bound_by) : "none";
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

// Each placement's largest model, and what it puts on each tier per rank at that size.
inline void print_placements(const Plan& plan) {
  const int stage = placement_stage(plan);
  std::printf("\nlargest model per placement at stage %d (%s), model states only (N_d = %lld):\n",
              stage, est::stage_name(stage), static_cast<long long>(plan.data_parallel));
  std::vector<std::vector<std::string>> rows{
      {"placement", "parameters", "bound by", "device", "host", "NVMe"}};
  for (const Placement& p : placements(plan, stage)) {
    est::ModelStateQuery query = placement_query(plan, stage, p);
    const est::LargestModel largest = largest_model(plan, query);
    std::vector<std::string> row{p.name, human_count(largest.parameters), bound_text(largest)};
    if (std::isinf(largest.parameters)) {
      row.insert(row.end(), {"-", "-", "-"});
    } else {
      query.parameters = largest.parameters / static_cast<double>(plan.tensor_parallel);
      const est::ModelStateMemory memory = est::model_state_memory(query);
      for (const est::Tier tier : {est::Tier::device, est::Tier::cpu, est::Tier::nvme})
        row.push_back(human_bytes(memory.on(tier)));
    }
    rows.push_back(row);
  }
  print_aligned(rows, 1);
}

// Activation memory per rank of each scheme, and Pa's all-gathers beside the tensor-parallel
// all-reduces.
inline void print_activations(const Plan& plan) {
  const est::TransformerShape& shape = *plan.shape;
  const est::BlockActivations block = est::block_activations(shape, plan.tensor_parallel);
  const auto whole = [](std::int64_t n) { return static_cast<long long>(n); };
  std::printf("\nactivation memory per rank of the transformer's blocks (from the shapes "
              "examples/train_gpt/gpt.hpp keeps;\n"
              "R = B S = %.10g rows, T = %lld, %g bytes per element%s)\n",
              block.input / static_cast<double>(shape.hidden), whole(plan.tensor_parallel),
              plan.activation_bytes,
              plan.activation_bytes_given ? ", --activation-bytes" : ", as the parameters");
  std::printf("  per layer         input R H = %.10g (replicated); saved %.10g = 3 R H + 4 R = "
              "%.10g replicated\n"
              "                    + (12 R H + B A S^2) / T = %.10g split\n",
              block.input, block.saved(), block.replicated, block.split);
  const std::int64_t k = plan.checkpoints;
  const std::int64_t longest = (shape.layers + k - 1) / k;
  std::string origin = "K = " + std::to_string(k);
  if (!plan.checkpoints_asked)
    origin =
        "K = L = " + std::to_string(k) + ", every layer checkpointed (--checkpoints K for fewer)";
  else if (*plan.checkpoints_asked != k)
    origin += " (--checkpoints " + std::to_string(*plan.checkpoints_asked) +
              " capped at L, as zero::CheckpointPlan caps it)";
  else
    origin += " (--checkpoints)";
  std::printf("  checkpoints       %s;\n"
              "                    segments of at most ceil(L / K) = %lld layer%s, %lld layer%s "
              "recomputed\n",
              origin.c_str(), whole(longest), longest == 1 ? "" : "s",
              whole(plan.checkpointed_recomputation()),
              plan.checkpointed_recomputation() == 1 ? "" : "s");
  if (plan.tensor_parallel > 1)
    std::printf("  Pa                each kept input as this rank's ceil(R H / T) = %.10g, "
                "all-gathered before recomputation;\n"
                "                    another tier: NVMe (host engine) or pinned host memory "
                "(a GPU's cpu_checkpointing)\n",
                std::ceil(block.input / static_cast<double>(plan.tensor_parallel)));
  else
    std::printf("  Pa                nothing to partition at T = 1 (--tp)\n");
  std::printf("\n");
  std::vector<std::vector<std::string>> rows{{"activations", "kept inputs", "segment",
                                              "gather buffers", "per device", "other tier",
                                              "device elements"}};
  for (const est::ActivationScheme scheme : plan.activation_schemes()) {
    const est::ActivationMemoryPerRank m = plan.activations(scheme);
    const double b = m.bytes_per_element;
    rows.push_back({est::to_string(scheme), human_bytes(m.kept * b), human_bytes(m.segment * b),
                    human_bytes(m.gather_buffers * b), human_bytes(m.device_bytes()),
                    human_bytes(m.off_device_bytes()), format("%.10g", m.device_elements())});
  }
  print_aligned(rows, 1);
  if (!plan.shows_partition_communication()) return;
  const est::PartitionedActivationCommunication pa = plan.partition_communication();
  const est::TensorParallelCommunication tp = plan.checkpointed_tensor_communication();
  std::printf(
      "\nPa communication per rank and step (the ZeRO paper, sections 6.1 and 8; K = %lld)\n"
      "  all-gathers       %lld = K - 1 of ceil(R H / T) T = %.10g elements (the whole buffer, as "
      "nccl-tests counts it)\n"
      "  bytes             %s; %s per rank on the wire = (T - 1) / T x bytes\n"
      "  tensor parallel   %s per rank on the wire: the all-reduces of a step that recomputes "
      "%lld layers\n"
      "  ratio             %.4g = 1 / %.4g (Pa's wire bytes / tensor parallelism's)\n",
      whole(k), whole(pa.all_gathers),
      std::ceil(block.input / static_cast<double>(plan.tensor_parallel)) *
          static_cast<double>(plan.tensor_parallel),
      human_bytes(pa.bytes).c_str(), human_bytes(pa.ring_bytes).c_str(),
      human_bytes(tp.ring_bytes).c_str(), whole(plan.checkpointed_recomputation()),
      pa.ring_bytes / tp.ring_bytes, tp.ring_bytes / pa.ring_bytes);
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
  if (plan.offloads()) {
    std::printf("  offload           optimizer states -> %s (stages 1-3)",
                est::to_string(plan.optimizer_offload));
    if (plan.optimizer_offload_ratio < 1)
      std::printf(", a share of %g of them and of their gradients (the rest on the device)",
                  plan.optimizer_offload_ratio);
    std::printf(", parameters -> %s (stage 3)\n", est::to_string(plan.parameter_offload));
  }
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
                                   human_bytes(memory.gradients.all()),
                                   human_bytes(memory.optimizer_states.all()),
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
        "section 3; B = %lld, R = %lld%s)\n"
        "  all-reduces       %lld = (4 L + 2 R + 2) of B S H = %.10g elements (two per layer "
        "forward, two backward,\n"
        "                    two per recomputed layer, the embedding's lookup, the head's input "
        "gradient)\n"
        "                    + 3 of B S = %.10g (the cross-entropy's maximum, sum of "
        "exponentials, target logit)\n"
        "  elements          %.10g\n"
        "  bytes             %s (%g bytes per activation, %s)\n"
        "  ring all-reduce   %s per rank on the wire = 2 (T - 1) / T x bytes (nccl-tests' bus "
        "bandwidth)\n",
        static_cast<long long>(plan.shape->micro_batch),
        static_cast<long long>(plan.recomputed_layers),
        plan.recomputed_from_checkpoints ? ", from --checkpoints" : "",
        static_cast<long long>(tp.all_reduces), tokens * static_cast<double>(plan.shape->hidden),
        tokens, tp.elements, human_bytes(tp.bytes).c_str(), plan.activation_bytes,
        plan.activation_bytes_given ? "--activation-bytes" : "as the parameters",
        human_bytes(tp.ring_bytes).c_str());
  }
  if (plan.shape) print_activations(plan);
  if (plan.device_memory) {
    const std::string split_note = plan.tensor_parallel > 1
                                       ? ", T = " + std::to_string(plan.tensor_parallel) +
                                             ", assuming every parameter is split"
                                       : "";
    std::string tiers = human_bytes(*plan.device_memory) + " per device";
    if (plan.host_memory) tiers += ", " + human_bytes(*plan.host_memory) + " of host memory";
    if (plan.nvme_memory) tiers += ", " + human_bytes(*plan.nvme_memory) + " of NVMe";
    std::printf("\nlargest model whose model states fit in %s%s (N_d = %lld%s):\n", tiers.c_str(),
                plan.sizes_tiers_below_the_device() ? " per rank" : "",
                static_cast<long long>(plan.data_parallel), split_note.c_str());
    const bool bounds = plan.sizes_tiers_below_the_device();
    std::vector<std::vector<std::string>> rows{{"stage", "ZeRO", "parameters"}};
    if (bounds) rows.front().push_back("bound by");
    for (int stage : plan.stages) {
      const est::LargestModel fits = largest_model(plan, plan.query(stage));
      rows.push_back({std::to_string(stage), est::stage_name(stage), human_count(fits.parameters)});
      if (bounds) rows.back().push_back(bound_text(fits));
    }
    print_aligned(rows, 2);
    if (bounds) print_placements(plan);
  }
}

inline nlohmann::ordered_json finite_or_null(double value) {
  return std::isinf(value) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value);
}

inline nlohmann::ordered_json bound_json(const est::LargestModel& largest) {
  return largest.bound_by ? nlohmann::ordered_json(est::to_string(*largest.bound_by))
                          : nlohmann::ordered_json(nullptr);
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
                                            {"activation_bytes", plan.activation_bytes},
                                            {"bytes", tp.bytes},
                                            {"ring_bytes_per_rank", tp.ring_bytes}};
  }
  if (plan.shape) {
    const est::BlockActivations block = est::block_activations(*plan.shape, plan.tensor_parallel);
    nlohmann::ordered_json activations{
        {"activation_bytes", plan.activation_bytes},
        {"checkpoints", plan.checkpoints},
        {"checkpoints_asked", plan.checkpoints_asked
                                  ? nlohmann::ordered_json(*plan.checkpoints_asked)
                                  : nlohmann::ordered_json(nullptr)},
        {"recomputed_layers", plan.checkpointed_recomputation()},
        {"per_layer_elements",
         {{"input", block.input},
          {"saved_replicated", block.replicated},
          {"saved_split", block.split},
          {"saved", block.saved()}}},
        {"schemes", nlohmann::ordered_json::array()}};
    for (const est::ActivationScheme scheme : plan.activation_schemes()) {
      const est::ActivationMemoryPerRank m = plan.activations(scheme);
      const double b = m.bytes_per_element;
      activations["schemes"].push_back({{"scheme", est::to_string(scheme)},
                                        {"segments", m.segments},
                                        {"segment_layers", m.segment_layers},
                                        {"kept_input_bytes", m.kept * b},
                                        {"segment_bytes", m.segment * b},
                                        {"gather_buffer_bytes", m.gather_buffers * b},
                                        {"device_bytes", m.device_bytes()},
                                        {"other_tier_bytes", m.off_device_bytes()},
                                        {"device_elements", m.device_elements()}});
    }
    out["activation_memory"] = activations;
  }
  if (plan.shows_partition_communication()) {
    const est::PartitionedActivationCommunication pa = plan.partition_communication();
    const est::TensorParallelCommunication tp = plan.checkpointed_tensor_communication();
    out["partitioned_activation_communication"] = {
        {"all_gathers", pa.all_gathers},
        {"elements", pa.elements},
        {"bytes", pa.bytes},
        {"ring_bytes_per_rank", pa.ring_bytes},
        {"tensor_parallel_ring_bytes_per_rank", tp.ring_bytes},
        {"ratio", pa.ring_bytes / tp.ring_bytes}};
  }
  out["bytes_per_parameter"] = {{"parameters", plan.bytes.parameters},
                                {"gradients", plan.bytes.gradients},
                                {"optimizer_states", plan.bytes.optimizer_states}};
  out["offload"] = {{"optimizer_states", est::to_string(plan.optimizer_offload)},
                    {"optimizer_states_ratio", plan.optimizer_offload_ratio},
                    {"parameters", est::to_string(plan.parameter_offload)}};
  out["stages"] = nlohmann::ordered_json::array();
  for (int stage : plan.stages) {
    nlohmann::ordered_json row{{"stage", stage}, {"name", est::stage_name(stage)}};
    if (plan.parameters) {
      const est::ModelStateMemory memory = est::model_state_memory(plan.query(stage));
      row["parameters_bytes"] = memory.parameters.bytes;
      row["gradients_bytes"] = memory.gradients.all();
      row["optimizer_states_bytes"] = memory.optimizer_states.all();
      row["device_bytes"] = memory.on(est::Tier::device);
      row["cpu_bytes"] = memory.on(est::Tier::cpu);
      row["nvme_bytes"] = memory.on(est::Tier::nvme);
      row["communication_factor"] = est::communication_factor(stage);
      row["communication_elements"] = est::communication_elements(stage, split.per_rank());
    }
    if (plan.device_memory) {
      // JSON has no infinity: null means no model state is left on a sized tier.
      const est::LargestModel largest = largest_model(plan, plan.query(stage));
      row["largest_model_parameters"] = finite_or_null(largest.parameters);
      if (plan.sizes_tiers_below_the_device()) row["largest_model_bound_by"] = bound_json(largest);
    }
    out["stages"].push_back(row);
  }
  if (plan.device_memory) out["device_memory_bytes"] = *plan.device_memory;
  if (plan.host_memory) out["host_memory_bytes"] = *plan.host_memory;
  if (plan.nvme_memory) out["nvme_memory_bytes"] = *plan.nvme_memory;
  if (plan.device_memory && plan.sizes_tiers_below_the_device()) {
    const int stage = placement_stage(plan);
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const Placement& p : placements(plan, stage)) {
      est::ModelStateQuery query = placement_query(plan, stage, p);
      const est::LargestModel largest = largest_model(plan, query);
      nlohmann::ordered_json row{{"placement", p.name},
                                 {"optimizer_states", est::to_string(p.optimizer_states)},
                                 {"parameters", est::to_string(p.parameters)},
                                 {"largest_model_parameters", finite_or_null(largest.parameters)},
                                 {"bound_by", bound_json(largest)}};
      if (!std::isinf(largest.parameters)) {
        query.parameters = largest.parameters / static_cast<double>(plan.tensor_parallel);
        const est::ModelStateMemory memory = est::model_state_memory(query);
        row["device_bytes"] = memory.on(est::Tier::device);
        row["cpu_bytes"] = memory.on(est::Tier::cpu);
        row["nvme_bytes"] = memory.on(est::Tier::nvme);
      }
      rows.push_back(row);
    }
    out["placements"] = {{"stage", stage}, {"rows", rows}};
  }
  std::printf("%s\n", out.dump(2).c_str());
}

} // namespace zero_estimate
