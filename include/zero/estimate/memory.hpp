#pragma once
// The ZeRO paper's model of the memory that model states take on each data-parallel rank
// (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
// SC'20, section 5.3), and the largest model whose states fit a given device, or a device, host
// memory and NVMe together.
//
// For Ψ parameters on N_d ranks with P, G and K bytes per parameter of parameters, gradients and
// optimizer states (the paper's mixed-precision Adam: 2, 2, 12):
//   stage 0 (plain data parallelism)  (P + G + K) Ψ
//   stage 1 (P_os)                     (P + G) Ψ + K Ψ / N_d
//   stage 2 (P_os+g)                   P Ψ + (G + K) Ψ / N_d
//   stage 3 (P_os+g+p)                 (P + G + K) Ψ / N_d
// Offload moves a state from the device to host memory or NVMe without changing its size:
// optimizer offload moves the optimizer states and, from stage 2 on, the gradient shard the
// host-side optimizer consumes; parameter offload (stage 3) moves the parameter shard. An offload
// ratio below 1 (ZeRO-Offload++'s offload_optimizer.ratio) moves only that share of the optimizer
// states and of those gradients; the rest stays on the device. Buffers and activations (residual
// states) are not model states and are not counted.

#include "zero/core/error.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace zero::estimate {

// Adam's two moments in 8 bits (EngineOptions::moments): a byte a value each and one fp32 scale
// per block of 2048 values (optim/quantized_moments.hpp, whose block size the engine checks
// against this).
inline constexpr double eight_bit_adam_moment_bytes = 2.0 * (1.0 + 4.0 / 2048.0);

struct BytesPerParameter {
  double parameters = 2;        // 16-bit working copy
  double gradients = 2;         // 16-bit gradients
  double optimizer_states = 12; // the paper's K: fp32 master copy, momentum and variance
};

enum class Tier { device, cpu, nvme };

constexpr const char* to_string(Tier tier) noexcept {
  switch (tier) {
  case Tier::device:
    return "device";
  case Tier::cpu:
    return "cpu";
  case Tier::nvme:
    return "nvme";
  }
  return "?";
}

// The paper's names of the stages.
constexpr const char* stage_name(int stage) noexcept {
  constexpr const char* names[] = {"baseline DP", "P_os", "P_os+g", "P_os+g+p"};
  return stage >= 0 && stage <= 3 ? names[stage] : "?";
}

struct ModelStateQuery {
  double parameters = 0;          // Ψ
  std::int64_t data_parallel = 1; // N_d
  int stage = 0;
  BytesPerParameter bytes{};
  Tier optimizer_offload = Tier::device; // where optimizer states go (stages 1-3)
  Tier parameter_offload = Tier::device; // where the parameter shard goes (stage 3)
  double optimizer_offload_ratio = 1;    // the share of them optimizer offload moves

  void validate() const {
    require(parameters >= 0, "estimate: the parameter count must not be negative");
    require(data_parallel >= 1, "estimate: data-parallel ranks must be at least 1, got " +
                                    std::to_string(data_parallel));
    require(stage >= 0 && stage <= 3, "estimate: stage must be 0..3, got " + std::to_string(stage));
    require(bytes.parameters >= 0 && bytes.gradients >= 0 && bytes.optimizer_states >= 0,
            "estimate: bytes per parameter must not be negative");
    require(optimizer_offload == Tier::device || stage >= 1,
            "estimate: optimizer offload needs ZeRO stage 1, 2 or 3");
    require(parameter_offload == Tier::device || stage == 3,
            "estimate: parameter offload needs ZeRO stage 3");
    require(optimizer_offload_ratio > 0 && optimizer_offload_ratio <= 1,
            "estimate: the offload ratio is a share in (0, 1], got " +
                std::to_string(optimizer_offload_ratio));
    require(optimizer_offload_ratio == 1 || optimizer_offload != Tier::device,
            "estimate: an offload ratio below 1 splits offloaded optimizer states; without "
            "optimizer offload all of them are on the device");
  }
};

struct StateShare {
  double bytes; // on `tier`
  Tier tier;
  double on_device = 0; // beside an offloaded share, what an offload ratio below 1 keeps there
  double all() const noexcept { return bytes + on_device; }
};

struct ModelStateMemory {
  StateShare parameters;
  StateShare gradients;
  StateShare optimizer_states;

  double on(Tier tier) const noexcept {
    double sum = 0;
    for (const StateShare& share : {parameters, gradients, optimizer_states}) {
      if (share.tier == tier) sum += share.bytes;
      if (tier == Tier::device) sum += share.on_device;
    }
    return sum;
  }
  double total() const noexcept {
    return parameters.all() + gradients.all() + optimizer_states.all();
  }
};

// Bytes of model states per rank, by state and by where it lives.
inline ModelStateMemory model_state_memory(const ModelStateQuery& query) {
  query.validate();
  const double psi = query.parameters;
  const double n = static_cast<double>(query.data_parallel);
  const BytesPerParameter& b = query.bytes;
  const Tier gradient_tier = query.stage >= 2 ? query.optimizer_offload : Tier::device;
  // What offload moves, split by the ratio: its share on the tier, the rest on the device.
  const auto moved = [&](double bytes, Tier tier) -> StateShare {
    if (tier == Tier::device) return {bytes, tier};
    const double r = query.optimizer_offload_ratio;
    return {r * bytes, tier, bytes - r * bytes};
  };
  // Gradients offloaded with NVMe optimizer states still land in host memory (ZeRO-Infinity).
  return {{query.stage >= 3 ? b.parameters * psi / n : b.parameters * psi, query.parameter_offload},
          moved(query.stage >= 2 ? b.gradients * psi / n : b.gradients * psi,
                gradient_tier == Tier::nvme ? Tier::cpu : gradient_tier),
          moved(query.stage >= 1 ? b.optimizer_states * psi / n : b.optimizer_states * psi,
                query.optimizer_offload)};
}

// Bytes each rank may fill on each tier; infinity: the tier bounds nothing (not given).
struct Capacity {
  static constexpr double unbounded = std::numeric_limits<double>::infinity();
  double device = unbounded;
  double cpu = unbounded;
  double nvme = unbounded;

  double on(Tier tier) const noexcept {
    return tier == Tier::device ? device : tier == Tier::cpu ? cpu : nvme;
  }
};

struct LargestModel {
  double parameters; // infinity when no tier with a size holds a model state
  std::optional<Tier> bound_by;
};

// The most parameters whose model states fit every tier's capacity (query's parameter count is
// ignored), and the tier that bounds them: the one that fills first. Model states only: the
// device's working memory (gathered layers, activations, buffers) is not counted.
inline LargestModel largest_model(const Capacity& capacity, ModelStateQuery query) {
  require(capacity.device >= 0 && capacity.cpu >= 0 && capacity.nvme >= 0,
          "estimate: a tier's capacity must not be negative");
  query.parameters = 1;
  const ModelStateMemory per_parameter = model_state_memory(query);
  LargestModel largest{std::numeric_limits<double>::infinity(), std::nullopt};
  for (const Tier tier : {Tier::device, Tier::cpu, Tier::nvme}) {
    const double bytes = per_parameter.on(tier);
    if (bytes <= 0 || std::isinf(capacity.on(tier))) continue;
    const double fits = capacity.on(tier) / bytes;
    if (fits < largest.parameters) largest = {fits, tier};
  }
  return largest;
}

// The most parameters whose model states fit in `device_memory` bytes per device (query's
// parameter count is ignored); infinity when offload leaves no model state on the device.
inline double largest_model(double device_memory, ModelStateQuery query) {
  require(device_memory >= 0, "estimate: device memory must not be negative");
  return largest_model(Capacity{.device = device_memory}, query).parameters;
}

// The paper's model-state bytes per rank of Ψ `parameters` at `stage` over `ranks`: parameters and
// gradients of `compute_bytes` each, `master_bytes` per parameter of master weights (4 in fp32; 1
// or 2 split beside a 16-bit compute copy) and `moment_bytes` of optimizer moments (4 per fp32
// state tensor; 2 + 8 / 2048 for Adam's two moments in 8 bits).
inline double paper_model_state_bytes(double parameters, std::int64_t ranks, int stage,
                                      std::size_t compute_bytes, double moment_bytes,
                                      double master_bytes = 4.0) {
  const double p = static_cast<double>(compute_bytes);
  ModelStateQuery query;
  query.parameters = parameters;
  query.data_parallel = ranks;
  query.stage = stage;
  query.bytes = {p, p, master_bytes + moment_bytes};
  return model_state_memory(query).total();
}

} // namespace zero::estimate
