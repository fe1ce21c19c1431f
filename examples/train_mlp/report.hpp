#pragma once
// What train_mlp prints and writes: the loss curve, per-rank memory by kind next to the ZeRO
// paper's formula, communication per step next to 2Ψ / 3Ψ, and step times; --json for scripts.

#include "../common/write_file.hpp"
#include "settings.hpp"
#include "training.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/estimate/memory.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace train {

inline double mb(double bytes) {
  return bytes / 1e6;
}

inline void print_step(int step, const History& h) {
  const auto i = std::size_t(step - h.first_step);
  std::printf("step %5d  loss %.6f  %s  scale %-8g grad-norm %-10.4g lr %-9.3g %7.2f ms\n",
              step + 1, h.loss[i], h.applied[i] ? "      " : "SKIPPED", h.loss_scale[i],
              h.grad_norm[i], h.lr[i], h.step_seconds[i] * 1e3);
}

// One rank's memory: each kind of model state (wherever it lives), the bytes on NVMe, the bytes
// in memory (model states there and buffers) and the process's peak resident set (getrusage).
struct RankMemory {
  std::int64_t parameters, gradients, master, optimizer, buffers, on_nvme, in_memory, peak_rss;
};

inline std::int64_t peak_rss_bytes() {
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  return std::int64_t(self.ru_maxrss) * 1024; // Linux reports kilobytes
}

// Every rank's memory, gathered to all.
inline std::vector<RankMemory> gather_memory(zero::MpiCommunicator& world, const History& h) {
  const auto& m = h.memory;
  const RankMemory mine{std::int64_t(m.parameters.total()),
                        std::int64_t(m.gradients.total()),
                        std::int64_t(m.master_weights.total()),
                        std::int64_t(m.optimizer_states.total()),
                        std::int64_t(m.buffers),
                        std::int64_t(m.on_nvme()),
                        std::int64_t(m.in_memory()),
                        peak_rss_bytes()};
  constexpr std::size_t fields = sizeof(RankMemory) / sizeof(std::int64_t);
  std::vector<std::int64_t> all(fields * std::size_t(world.size()));
  world.all_gather(std::span<const std::int64_t>(&mine.parameters, fields), all).wait();
  std::vector<RankMemory> rows(std::size_t(world.size()));
  std::memcpy(rows.data(), all.data(), all.size() * sizeof(std::int64_t));
  return rows;
}

// K measured: the bytes of fp32 master weights and optimizer state a rank keeps per parameter of
// its share, Psi / N at stages 1-3 (N: the shard group) and Psi at stage 0, as in the paper's
// formula: 12 for Adam with fp32 moments, about 6 with 8-bit ones (padding included).
inline double optimizer_bytes_per_parameter(const Flags& f, const History& h, const RankMemory& m) {
  const double share = double(h.psi) / double(f.stage == 0 ? 1 : h.shard_ranks);
  return double(m.master + m.optimizer) / share;
}

// The elements a rank moves in a step, in units of Psi, as DeepSpeed's ZeRO does it with
// `grad_accum` micro-steps: stages 0 and 1 reduce the accumulated gradients once (2 Psi: a
// reduce-scatter and an all-gather, or an all-reduce); stage 2 keeps only its shard of the
// gradients, so it reduce-scatters at every micro-step and gathers the weights once
// ((micro-steps + 1) Psi); stage 3 gathers the weights for forward and backward and
// reduce-scatters the gradients at every micro-step (3 Psi each).
// A config's reduce_scatter: false all-reduces each reduction instead, which counts 2 Psi.
inline bool all_reduces_instead(const Flags& f) {
  return f.stage >= 1 && f.ds && !f.ds->zero_optimization.reduce_scatter;
}
inline int expected_psi(const Flags& f) {
  const int reduction = all_reduces_instead(f) ? 2 : 1;
  switch (f.stage) {
  case 2:
    return reduction * f.grad_accum + 1;
  case 3:
    return (2 + reduction) * f.grad_accum;
  case 1:
    return reduction + 1;
  default:
    return 2;
  }
}

// ZeRO-Offload's CPU/GPU split (rank 0): the CPU's share, both sides' median times over the
// applied steps after the first (which warms up), and the ratio at which they would end together.
inline void print_split(const Flags& f, const History& h) {
  if (f.offload_ratio == 1) return;
  std::vector<double> host, device, suggested;
  double share = 0;
  for (std::size_t s = 1; s < h.steps.size(); ++s) {
    const zero::SplitReport& r = h.steps[s].offload.split;
    if (r.host_share == 0) continue; // skipped
    share = r.host_share;
    host.push_back(r.host_seconds);
    device.push_back(r.device_seconds);
    suggested.push_back(r.suggested_ratio);
  }
  if (host.empty()) {
    std::printf("CPU/GPU split: no applied step after the first to measure\n");
    return;
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "CPU/GPU split (rank 0): the CPU updates %.1f%% of the elements (--offload-ratio %g), "
      "the GPU keeps %.3f MB of master weights and moments; median per step: CPU %.3f "
      "ms, GPU %.3f ms; suggested ratio %.3f\n",
      100 * share, f.offload_ratio, mb(double(h.memory.optimizer_on_device)), 1e3 * median(host),
      1e3 * median(device), median(suggested));
}

// ZeRO-Offload (rank 0): how many layers' gradients left for the host during backward, and what the
// speculative update did: steps that kept it, rollbacks, and whether it turned itself off.
inline void print_offload_steps(const Flags& f, const History& h) {
  if (!f.optimizer_on_cpu || f.device != "cuda") return;
  std::size_t early = 0, layers = 0, kept = 0, rolled_back = 0;
  for (const zero::StepResult& s : h.steps) {
    early += s.offload.gradients_in_backward;
    layers += s.offload.speculation.layers;
    kept += s.offload.speculation.layers > 0 && !s.offload.speculation.rolled_back ? 1 : 0;
    rolled_back += s.offload.speculation.rolled_back ? 1 : 0;
  }
  const double n = double(h.steps.size());
  std::printf("ZeRO-Offload (rank 0): %.1f layers' gradients left for the host during backward per "
              "step\n",
              double(early) / n);
  print_split(f, h);
  if (!f.speculative_update) return;
  const zero::SpeculationReport& last = h.steps.back().offload.speculation;
  std::printf("speculative update: %zu of %zu steps kept it, %zu rolled back (skipped or clipped), "
              "%.1f layers updated speculatively per step%s%s\n",
              kept, h.steps.size(), rolled_back, double(layers) / n, last.off ? "; off: " : "",
              last.why_off.c_str());
}

// `quantizes_on_wire`: whether quantized gradients were quantized (across nodes only).
inline void print_summary(const Flags& f, const History& h, const std::vector<RankMemory>& memory,
                          int ranks, bool quantizes_on_wire) {
  const double psi = double(h.psi);
  std::printf("\nmodel: %zu parameters (Psi), %zu with padding; ZeRO stage %d over %d ranks (shard "
              "group of %d); "
              "compute %s\n",
              h.psi, h.padded, f.stage, ranks, h.shard_ranks, zero::to_string(f.dtype));
  const zero::MemoryReport& tiers = h.memory;
  std::printf("\nmodel-state memory per rank (MB)\n");
  std::printf("  %-6s %11s %11s %11s %11s %13s %15s %11s\n", "rank", "parameters", "gradients",
              "fp32 master", "optim state", "model states", "paper formula", "buffers");
  std::printf("  %-6s %11s %11s %11s %11s %13s %15s %11s\n", "tier", tiers.parameters_tier,
              tiers.gradients_tier, tiers.optimizer_tier, tiers.optimizer_tier, "", "", "memory");
  for (std::size_t r = 0; r < memory.size(); ++r) {
    const RankMemory& m = memory[r];
    std::printf("  %-6zu %11.3f %11.3f %11.3f %11.3f %13.3f %15.3f %11.3f\n", r,
                mb(double(m.parameters)), mb(double(m.gradients)), mb(double(m.master)),
                mb(double(m.optimizer)),
                mb(double(m.parameters + m.gradients + m.master + m.optimizer)), mb(h.paper_bytes),
                mb(double(m.buffers)));
  }
  const char* formula[] = {"(2P+K)Psi", "2P Psi + K Psi/N", "P Psi + (P+K) Psi/N", "(2P+K) Psi/N"};
  // K as the engine's formula takes it: the master's bytes (4, or the split's residual) and the
  // moments' (8-bit ones with their block scales).
  const double moment_bytes = f.optimizer == "sgd" ? 4.0
                              : moment_storage(f) == zero::MomentStorage::blockwise_8bit
                                  ? zero::estimate::eight_bit_adam_moment_bytes
                                  : 8.0;
  std::printf("  paper formula: %s with P = %zu bytes, K = %.4g bytes (%s master + %s optimizer "
              "state), N = %d\n",
              formula[f.stage], zero::size_of(f.dtype),
              zero::master_bytes_per_parameter(master_storage(f)) + moment_bytes,
              zero::to_string(master_storage(f)), zero::to_string(moment_storage(f)),
              h.shard_ranks);
  std::printf("  K measured (master + optim state per parameter of the rank's share, %s master, "
              "%s moments):",
              zero::to_string(master_storage(f)), zero::to_string(moment_storage(f)));
  for (std::size_t r = 0; r < memory.size(); ++r)
    std::printf("%s rank %zu %.3f", r ? "," : "", r,
                optimizer_bytes_per_parameter(f, h, memory[r]));
  std::printf(" bytes\n");
  std::printf("\nwhere it is, per rank (MB): in memory = model states kept there + buffers\n");
  std::printf("  %-6s %11s %11s %15s\n", "rank", "in memory", "on NVMe", "peak RSS");
  for (std::size_t r = 0; r < memory.size(); ++r)
    std::printf("  %-6zu %11.3f %11.3f %15.3f\n", r, mb(double(memory[r].in_memory)),
                mb(double(memory[r].on_nvme)), mb(double(memory[r].peak_rss)));
  if (!h.steps.empty()) {
    const zero::CommStats& c = h.steps.back().communication;
    std::printf("\ncommunication per step, per rank (elements; last step)\n");
    for (zero::Collective op : zero::all_collectives) {
      if (c[op].calls == 0) continue;
      std::printf("  %-15s %6llu calls %14llu elements %10.3f MB\n", zero::to_string(op),
                  (unsigned long long)c[op].calls, (unsigned long long)c[op].elements,
                  mb(double(c[op].bytes)));
    }
    if (f.hpz > 1)
      std::printf("  of which within hpZ groups of %d ranks (backward's gathers): %.3f MB\n", f.hpz,
                  mb(double(h.steps.back().within_hpz_groups.total_bytes())));
    if (f.quantized_weights)
      std::printf("  weights gathered across the shard group as int8 blocks of %zu values with a "
                  "float scale each (qwZ): those all-gathers' elements are bytes, one a value plus "
                  "the scales\n",
                  f.quantization_block.value_or(zero::BlockQuantization{}.block));
    if (f.quantized_gradients)
      std::printf("  gradients reduce-scattered as %d-bit blocks of %zu values with a float scale "
                  "each where they cross between nodes (qgZ)%s\n",
                  f.gradient_bits, f.quantization_block.value_or(zero::BlockQuantization{}.block),
                  quantizes_on_wire ? "" : "; on one node they are reduced exactly");
    std::printf(
        "  volume (all-reduce counted twice): %llu elements = %.4f Psi; expected %d Psi = %.0f "
        "elements%s%s\n",
        (unsigned long long)c.volume_elements(), double(c.volume_elements()) / psi, expected_psi(f),
        expected_psi(f) * psi,
        f.grad_accum > 1 && f.stage >= 2 ? " (this stage reduces at every micro-step)" : "",
        all_reduces_instead(f) ? " (reduce_scatter false: gradients all-reduced)" : "");
    double total = 0, hidden = 0, reduce = 0;
    for (const auto& s : h.steps) {
      reduce += s.reduction.communication_seconds;
      hidden += s.reduction.communication_seconds -
                std::min(s.reduction.exposed_seconds, s.reduction.communication_seconds);
    }
    for (double t : h.step_seconds)
      total += t;
    const double n = double(h.steps.size());
    std::printf("\nstep time: %.3f ms on average over %zu steps (rank 0: forward %.3f, backward "
                "%.3f, step() %.3f); "
                "gradient reduction %.3f ms per step, %.0f%% of it hidden behind backward\n",
                total / n * 1e3, h.steps.size(), h.forward_seconds / n * 1e3,
                h.backward_seconds / n * 1e3, h.update_seconds / n * 1e3, reduce / n * 1e3,
                reduce > 0 ? 100.0 * hidden / reduce : 0.0);
    std::uint64_t read = 0, written = 0;
    for (const auto& s : h.steps) {
      read += s.nvme.bytes_read;
      written += s.nvme.bytes_written;
    }
    if (read + written > 0)
      std::printf("NVMe tier (rank 0): %.3f MB read and %.3f MB written per step\n",
                  mb(double(read) / n), mb(double(written) / n));
    print_offload_steps(f, h);
    const double after = h.step_times.after_reduction() / n;
    std::printf("step() once the gradients were reduced: %.3f ms (norm %.3f, update %.3f)",
                after * 1e3, h.step_times.norm / n * 1e3, h.step_times.update / n * 1e3);
    if (h.fused_kernel_seconds > 0)
      std::printf("; the fused optimizer pass alone on the same share%s: %.3f ms (%.2fx)\n",
                  f.moment_bits == 8 ? " (with fp32 moments)" : "", h.fused_kernel_seconds * 1e3,
                  after / h.fused_kernel_seconds);
    else
      std::printf("; the fused optimizer pass alone: not timed (%s)\n",
                  f.optimizer_on_nvme  ? "it would hold the states on NVMe in memory"
                  : f.device == "cuda" ? "the host's pass is no yardstick for the GPU's step"
                                       : "--no-reference-pass");
  }
}

// `transport` and `nodes`: how the ranks talked (MpiCommunicator::transport(), nodes()).
inline void write_json(const std::string& path, const Flags& f, const History& h,
                       const std::vector<RankMemory>& memory, int ranks,
                       const std::string& transport, int nodes) {
  std::ostringstream out; // written whole, then to the disk under path (never a part there)
  // Every digit a double has (std::to_string's six decimals made a loss of 1e-7 zero and equal
  // losses unequal to compare), and null where it is not finite (a skipped step's gradient
  // norm): JSON has no inf or nan.
  auto list = [&](const auto& values) {
    std::string s = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double v = double(values[i]);
      std::array<char, 32> digits{};
      std::snprintf(digits.data(), digits.size(), "%.17g", v);
      s += (i ? ", " : "") + (std::isfinite(v) ? std::string(digits.data()) : "null");
    }
    return s + "]";
  };
  out << "{\n  \"stage\": " << f.stage << ",\n  \"ranks\": " << ranks << ",\n  \"transport\": \""
      << transport << "\",\n  \"nodes\": " << nodes << ",\n  \"dtype\": \""
      << zero::to_string(f.dtype) << "\",\n  \"moments\": \"" << zero::to_string(moment_storage(f))
      << "\",\n  \"master\": \"" << zero::to_string(master_storage(f))
      << "\",\n  \"psi\": " << h.psi << ",\n  \"psi_padded\": " << h.padded
      << ",\n  \"shard_ranks\": " << h.shard_ranks << ",\n  \"first_step\": " << h.first_step
      << ",\n  \"loss\": " << list(h.loss) << ",\n  \"step_seconds\": " << list(h.step_seconds)
      << ",\n  \"applied\": " << list(h.applied) << ",\n  \"loss_scale\": " << list(h.loss_scale)
      << ",\n  \"grad_norm\": " << list(h.grad_norm)
      << ",\n  \"rank0_seconds\": {\"forward\": " << h.forward_seconds
      << ", \"backward\": " << h.backward_seconds << ", \"step\": " << h.update_seconds
      << ", \"step_reduction_wait\": " << h.step_times.reduction_wait
      << ", \"step_norm\": " << h.step_times.norm << ", \"step_update\": " << h.step_times.update
      << ", \"step_after_reduction\": " << h.step_times.after_reduction()
      << ", \"fused_kernel_per_step\": " << h.fused_kernel_seconds << "}"
      << ",\n  \"paper_model_state_bytes\": " << h.paper_bytes << ",\n  \"memory\": [";
  for (std::size_t r = 0; r < memory.size(); ++r) {
    const RankMemory& m = memory[r];
    out << (r ? ", " : "") << "{\"rank\": " << r << ", \"parameters\": " << m.parameters
        << ", \"gradients\": " << m.gradients << ", \"master_weights\": " << m.master
        << ", \"optimizer_states\": " << m.optimizer
        << ", \"optimizer_bytes_per_parameter\": " << optimizer_bytes_per_parameter(f, h, m)
        << ", \"buffers\": " << m.buffers << ", \"on_nvme\": " << m.on_nvme
        << ", \"in_memory\": " << m.in_memory << ", \"peak_rss\": " << m.peak_rss << "}";
  }
  out << "],\n  \"communication_per_step\": [";
  for (std::size_t s = 0; s < h.steps.size(); ++s) {
    const zero::CommStats& c = h.steps[s].communication;
    out << (s ? ", " : "") << "{\"volume_elements\": " << c.volume_elements()
        << ", \"bytes\": " << c.total_bytes()
        << ", \"within_hpz_bytes\": " << h.steps[s].within_hpz_groups.total_bytes();
    for (zero::Collective op : zero::all_collectives)
      out << ", \"" << zero::to_string(op) << "\": " << c[op].elements;
    const zero::ReducerStats& r = h.steps[s].reduction;
    out << ", \"reduction_seconds\": " << r.communication_seconds
        << ", \"reduction_exposed_seconds\": " << r.exposed_seconds
        << ", \"hidden_fraction\": " << r.hidden_fraction()
        << ", \"gather_exposed_seconds\": " << h.steps[s].gather_exposed_seconds
        << ", \"nvme_bytes_read\": " << h.steps[s].nvme.bytes_read
        << ", \"nvme_bytes_written\": " << h.steps[s].nvme.bytes_written
        << ", \"step_update_seconds\": " << h.steps[s].seconds.update
        << ", \"step_after_reduction_seconds\": " << h.steps[s].seconds.after_reduction()
        << ", \"gradients_offloaded_in_backward\": " << h.steps[s].offload.gradients_in_backward
        << ", \"speculated_layers\": " << h.steps[s].offload.speculation.layers
        << ", \"rolled_back\": " << (h.steps[s].offload.speculation.rolled_back ? "true" : "false")
        << ", \"cpu_share\": " << h.steps[s].offload.split.host_share
        << ", \"cpu_update_seconds\": " << h.steps[s].offload.split.host_seconds
        << ", \"gpu_update_seconds\": " << h.steps[s].offload.split.device_seconds
        << ", \"suggested_ratio\": " << h.steps[s].offload.split.suggested_ratio << "}";
  }
  out << "]";
  if (!h.device_name.empty()) // --device cuda: cudaMemGetInfo's bytes in use (print_device_memory)
    out << ",\n  \"device\": {\"name\": \"" << h.device_name << "\", \"communicator\": \""
        << h.device_communicator << "\", \"memory_before_engine\": " << h.device_before
        << ", \"memory_built\": " << h.device_built
        << ", \"memory_after_first_step\": " << h.device_first_step
        << ", \"memory_after_last_step\": " << h.device_last_step << "}";
  out << "\n}\n";
  const std::string text = out.str();
  examples::write_file_atomically(path, {std::span<const char>(text)});
}

// --device cuda: the GPU, its collectives, and its memory in use (cudaMemGetInfo, rank 0's view:
// every process on the GPU counts) before the engine, once built, and after the run's first and
// last steps, which must be equal: nothing the loop allocates may stay.
inline void print_device_memory(const Flags& f, const History& h) {
  auto mb = [](std::size_t bytes) { return double(bytes) / 1e6; };
  const long grew = long(h.device_last_step) - long(h.device_first_step);
  const std::string verdict = grew == 0  ? "flat"
                              : grew > 0 ? "grew by " + std::to_string(grew) + " bytes"
                                         : "shrank by " + std::to_string(-grew) + " bytes";
  std::printf("\nGPU: %s, collectives: %s\n", h.device_name.c_str(), h.device_communicator.c_str());
  std::printf("device memory in use (MB, cudaMemGetInfo): %.1f before the engine, %.1f with the "
              "engine and the model's buffers, %.1f after step %d, %.1f after step %d: %s\n",
              mb(h.device_before), mb(h.device_built), mb(h.device_first_step), h.first_step + 1,
              mb(h.device_last_step), f.steps, verdict.c_str());
}

} // namespace train
