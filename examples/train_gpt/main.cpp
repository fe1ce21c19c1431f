// train_gpt: trains a GPT-2 style transformer on the bytes of a file with zero's engine on N MPI
// ranks, any ZeRO stage, with or without activation checkpointing (ZeRO-R):
//
//   mpirun -np 2 train_gpt --stage 3 --checkpoint-activations 2 --steps 100
//
// N ranks compute what one process computes on the global batch: rank r takes the r-th share of
// each step's sequences, and gradients are averaged over ranks. With --tp T, groups of T
// consecutive ranks share each layer (tensor parallelism) and N / T replicas share the batch:
//
//   mpirun -np 4 train_gpt --tp 2 --stage 3     # 2 x 2: slices over ranks {0,1} and {2,3}

#include "../common/run_on_world.hpp"
#include "../common/share_cores.hpp"
#include "../common/write_file.hpp"
#include "flags.hpp"
#include "run.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using examples::share_cores;

#if ZERO_TRAIN_GPT_CUDA
// --device cuda: run_device.hpp's engines.
train_gpt::History run_stage_on_gpu(zero::MpiCommunicator& world, const train_gpt::Flags& f,
                                    const train_gpt::Tokens& data) {
  switch (f.stage) {
  case 0:
    return train_gpt::run_stage0_cuda(world, f, data);
  case 1:
    return train_gpt::run_stage1_cuda(world, f, data);
  case 2:
    return train_gpt::run_stage2_cuda(world, f, data);
  default:
    return train_gpt::run_stage3_cuda(world, f, data);
  }
}
#endif

train_gpt::History run_stage(train_gpt::Ranks& ranks, const train_gpt::Flags& f,
                             const train_gpt::Tokens& data) {
#if ZERO_TRAIN_GPT_CUDA
  if (f.device == "cuda") return run_stage_on_gpu(ranks.world, f, data);
#endif
  switch (f.stage) {
  case 0:
    return train_gpt::run_stage0(ranks, f, data);
  case 1:
    return train_gpt::run_stage1(ranks, f, data);
  case 2:
    return train_gpt::run_stage2(ranks, f, data);
  default:
    return train_gpt::run_stage3(ranks, f, data);
  }
}

// The model's all-reduces over the tensor-parallel group in one step, from the model's shapes:
// per block 2 in forward (the row-parallel outputs) and 2 in backward (the column-parallel
// inputs' gradients) of rows x embd, 2 more per recomputed block; the embedding's lookup and the
// head's input gradient, rows x embd each; the cross-entropy's maximum, sum and target logit,
// rows each. rows: the tokens of a micro-step on this rank.
struct TensorTraffic {
  double calls = 0, elements = 0;
};
TensorTraffic tensor_traffic_formula(const train_gpt::Flags& f, std::size_t rows,
                                     std::size_t micro_steps, std::size_t recomputed) {
  if (f.model.tensor_parallel == 1) return {};
  const double wide = double(rows * f.model.embd);
  const double blocks = double(4 * f.model.layers + 2 * recomputed);
  return {double(micro_steps) * (blocks + 2 + 3),
          double(micro_steps) * ((blocks + 2) * wide + 3 * double(rows))};
}

double mb(double bytes) {
  return bytes / 1e6;
}

void write_json(const std::string& path, const train_gpt::Flags& f, const train_gpt::History& h,
                double tokens_per_second) {
  nlohmann::json j;
  j["first_step"] = h.first_step;
  j["loss"] = h.loss;
  j["step_seconds"] = h.step_seconds;
  j["loss_scale"] = h.loss_scale;
  j["applied"] = h.applied;
  j["tokens_per_second"] = tokens_per_second;
  j["stage"] = f.stage;
  j["device"] = f.device;
  if (f.device == "cuda") {
    j["device_name"] = h.device_name;
    j["products"] = gpt::to_string(f.products);
    j["device_bytes_built"] = h.device_built;
    j["device_bytes_first_step"] = h.device_first_step;
    j["device_bytes_last_step"] = h.device_last_step;
  }
  j["checkpoints"] = train_gpt::checkpointing(f).number_checkpoints;
  j["peak_activation_bytes"] = h.activations.peak_activation_bytes;
  j["arena_bytes"] = h.arena_bytes;
  j["block_bytes"] = h.block_bytes;
  j["nvme_bytes_written"] = h.nvme_bytes_written;
  j["recomputed_layers"] = h.activations.recomputed_layers;
  j["gathers_on_demand"] = h.gathers_on_demand;
  j["gathers_prefetched"] = h.gathers_prefetched;
  j["model_state_bytes"] = h.memory.in_memory();
  j["moments"] = zero::to_string(train_gpt::moment_storage(f));
  j["master"] = zero::to_string(train_gpt::master_storage(f));
  j["master_weight_bytes"] = h.memory.master_weights.total();
  j["optimizer_state_bytes"] = h.memory.optimizer_states.total();
  j["optimizer_bytes_per_parameter"] = train_gpt::optimizer_bytes_per_parameter(f, h);
  j["tensor_parallel"] = f.model.tensor_parallel;
  j["tensor_allreduce_calls_per_step"] = h.tensor_calls_per_step;
  j["tensor_allreduce_elements_per_step"] = h.tensor_elements_per_step;
  j["tensor_bytes_per_step"] = h.tensor_bytes_per_step;
  j["data_volume_elements_per_step"] = h.data_elements_per_step;
  j["data_bytes_per_step"] = h.data_bytes_per_step;
  j["replicated_identical"] = h.replicated_identical;
  j["partition_activations"] = f.partition_activations;
  j["kept_input_bytes"] = h.activations.kept_input_bytes;
  j["kept_inputs_cpu"] = f.kept_inputs_cpu;
  j["kept_input_host_bytes"] = h.activations.kept_input_host_bytes;
  j["activation_gathers_per_step"] = h.activation_gathers_per_step;
  j["activation_gathered_elements_per_step"] = h.activation_gathered_elements_per_step;
  j["activation_gather_bytes_per_step"] = h.activation_gather_bytes_per_step;
  j["activation_gather_wait_seconds_per_step"] = h.activation_gather_wait_per_step;
  const std::string text = j.dump(1) + "\n";
  examples::write_file_atomically(path, {std::span<const char>(text)}); // never a part under path
}

int train_on(zero::MpiCommunicator& world, int argc, char** argv) {
  const int rank = world.rank(), ranks = world.size();
  const train_gpt::Flags f = train_gpt::parse(argc, argv);
  if (f.steps < 0) {
    if (rank == 0) std::printf("%s", train_gpt::help_text().c_str());
    return 0;
  }
#if !ZERO_TRAIN_GPT_CUDA
  zero::require(f.device != "cuda",
                "--device cuda: this train_gpt was built without it (no CUDA toolkit was found, "
                "or its GPU code was only checked by the compiler: ZERO_GPU_TESTS=syntax)",
                zero::ErrorKind::unsupported);
#endif
  const int threads = share_cores(world);
  const int tp = int(f.model.tensor_parallel);
  zero::require(ranks % tp == 0, std::to_string(ranks) +
                                     " ranks do not split into groups of --tp " +
                                     std::to_string(tp) + " (the rank count must be a multiple)");
  const int replicas = ranks / tp;
  const int micro_steps =
      f.ds && f.ds->gradient_accumulation_steps ? int(*f.ds->gradient_accumulation_steps) : 1;
  const std::size_t share = std::size_t(micro_steps) * std::size_t(replicas);
  zero::require(f.batch % share == 0, "--batch " + std::to_string(f.batch) +
                                          " does not split into " + std::to_string(micro_steps) +
                                          " micro-steps x " + std::to_string(replicas) +
                                          (tp > 1 ? " data-parallel replicas" : " ranks") + " (" +
                                          std::to_string(share) + " equal parts)");
  const std::string data_path = f.data.empty() ? std::string(ZERO_TRAIN_GPT_DEFAULT_DATA) : f.data;
  const train_gpt::Tokens data = train_gpt::Tokens::from_file(data_path, f.model.seq);
  const zero::ActivationCheckpointing checkpointing = train_gpt::checkpointing(f);
  if (rank == 0)
    std::printf(
        "train_gpt: ZeRO stage %d%s, %d ranks x %d thread%s%s, %zu layers, %zu heads, embd "
        "%zu, seq %zu, %s, %s%s, batch %zu (%d micro-step%s), %zu tokens of data, %s moments, %s "
        "master\n"
        "activation checkpointing: %s\n\n",
        f.stage, f.device == "cuda" ? " on the GPU" : "", ranks, threads, threads > 1 ? "s" : "",
        tp > 1 ? (" (tensor parallel " + std::to_string(tp) + " x data parallel " +
                  std::to_string(replicas) + ")")
                     .c_str()
               : "",
        f.model.layers, f.model.heads, f.model.embd, f.model.seq, zero::to_string(f.dtype),
        f.optimizer.c_str(),
        f.ds && f.ds->scheduler
            ? (std::string(" (lr schedule ") + zero::schedule_name(f.ds->scheduler->schedule) + ")")
                  .c_str()
            : "",
        f.batch, micro_steps, micro_steps > 1 ? "s" : "", data.bytes.size(),
        zero::to_string(train_gpt::moment_storage(f)),
        zero::to_string(train_gpt::master_storage(f)),
        checkpointing.number_checkpoints == 0
            ? "off"
            : (std::to_string(checkpointing.number_checkpoints) + " kept inputs of " +
               std::to_string(f.model.layers) + " blocks" +
               (checkpointing.contiguous_memory || f.device == "cuda" ? ", contiguous arena" : "") +
               (f.partition_activations ? ", partitioned over the tensor-parallel group" : "") +
               (f.kept_inputs_cpu ? ", kept in pinned host memory" : ""))
                  .c_str());

  train_gpt::Ranks grid(world, tp);
  const train_gpt::History h = run_stage(grid, f, data);
  const int every = f.print_every > 0 ? f.print_every : std::max(1, f.steps / 10);
  // Tokens per second over the steps after the first (which sizes buffers and records orders).
  double seconds = 0;
  for (std::size_t s = 1; s < h.step_seconds.size(); ++s)
    seconds += h.step_seconds[s];
  const double tokens_per_second =
      h.step_seconds.size() > 1
          ? double(f.batch * f.model.seq) * double(h.step_seconds.size() - 1) / seconds
          : 0.0;
  const bool scheduled = f.ds && f.ds->scheduler; // the config's learning-rate schedule
  const auto lr_text = [](double lr) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3e", lr);
    return std::string(text);
  };
  if (rank == 0) {
    for (int s = h.first_step; s < f.steps; ++s) {
      const std::size_t i = std::size_t(s - h.first_step); // after a resume, from its step
      if (s % every == 0 || s + 1 == f.steps || !h.applied[i])
        std::printf("step %4d  loss %.6f%s%s%s\n", s, h.loss[i],
                    f.dtype == zero::DType::float16
                        ? ("  scale " + std::to_string(int(h.loss_scale[i]))).c_str()
                        : "",
                    scheduled ? ("  lr " + lr_text(h.lr[i])).c_str() : "",
                    h.applied[i] ? "" : "  (skipped: overflow)");
    }
    if (!h.loss.empty()) {
      std::printf("\n%.0f tokens/s after the first step (%.1f ms per step)\n", tokens_per_second,
                  seconds / double(std::max<std::size_t>(1, h.step_seconds.size() - 1)) * 1e3);
      if (f.device == "cuda")
        std::printf("device: %s, ranks talking through %s, %s products; memory in use %.1f MB "
                    "before the engine, %.1f MB built, %.1f MB after the first step, %.1f MB "
                    "after the last\n",
                    h.device_name.c_str(), h.device_communicator.c_str(),
                    gpt::to_string(f.products), mb(double(h.device_before)),
                    mb(double(h.device_built)), mb(double(h.device_first_step)),
                    mb(double(h.device_last_step)));
      std::printf("activations%s: peak %.3f MB live%s, %zu block forwards recomputed per step\n",
                  f.device == "cuda" ? " in device memory" : "",
                  mb(double(h.activations.peak_activation_bytes)),
                  h.arena_bytes
                      ? (", arena " + std::to_string(mb(double(h.arena_bytes))) + " MB").c_str()
                      : "",
                  h.activations.recomputed_layers);
      const std::size_t kept =
          zero::CheckpointPlan(f.model.layers, checkpointing.number_checkpoints).segment_count() -
          1;
      if (kept > 0) {
        const std::size_t input = f.batch / share * f.model.seq * f.model.embd;
        std::printf("kept block inputs: %zu of %zu floats each; in memory on rank 0: %zu bytes%s\n",
                    kept, input, h.activations.kept_input_bytes,
                    !f.kept_inputs_nvme.empty() ? " (on the NVMe tier)"
                    : f.kept_inputs_cpu
                        ? (" (in pinned host memory: " +
                           std::to_string(h.activations.kept_input_host_bytes) + " bytes)")
                              .c_str()
                    : f.partition_activations
                        ? (" (1/" + std::to_string(tp) + " slices of " +
                           std::to_string((input + std::size_t(tp) - 1) / std::size_t(tp)) +
                           " floats, partitioned activations)")
                              .c_str()
                        : " (whole)");
      }
      if (checkpointing.profile) // DeepSpeed's activation_checkpointing.profile
        std::printf("activation checkpointing, last step on rank 0: forward %.3f ms, "
                    "recomputation %.3f ms, backward %.3f ms\n",
                    h.activations.forward_seconds * 1e3, h.activations.recompute_seconds * 1e3,
                    h.activations.backward_seconds * 1e3);
      if (!f.kept_inputs_nvme.empty())
        std::printf("kept block inputs on NVMe in %s: %.3f MB written by rank 0\n",
                    f.kept_inputs_nvme.c_str(), mb(double(h.nvme_bytes_written)));
      std::printf("model states on rank 0: %.3f MB\n", mb(double(h.memory.in_memory())));
      std::printf("%s master weights and %s moments on rank 0: %.3f + %.3f MB, K = %.3f bytes "
                  "per parameter of its share\n",
                  zero::to_string(train_gpt::master_storage(f)),
                  zero::to_string(train_gpt::moment_storage(f)),
                  mb(double(h.memory.master_weights.total())),
                  mb(double(h.memory.optimizer_states.total())),
                  train_gpt::optimizer_bytes_per_parameter(f, h));
      if (f.stage == 3)
        std::printf("stage 3 gathers after the first step: %zu prefetched, %zu on demand\n",
                    h.gathers_prefetched, h.gathers_on_demand);
      if (h.loss.size() > 1) {
        std::printf("data-parallel collectives per step: %.0f elements (the ZeRO paper's "
                    "accounting), %.3f MB\n",
                    h.data_elements_per_step, mb(h.data_bytes_per_step));
        if (tp > 1) {
          const std::size_t rows = f.batch / share * f.model.seq;
          const TensorTraffic expected = tensor_traffic_formula(f, rows, std::size_t(micro_steps),
                                                                h.activations.recomputed_layers);
          std::printf("tensor-parallel all-reduces per step: %.0f calls, %.0f elements, %.3f MB "
                      "(from the model's shapes: %.0f calls, %.0f elements)\n",
                      h.tensor_calls_per_step, h.tensor_elements_per_step,
                      mb(h.tensor_bytes_per_step), expected.calls, expected.elements);
          if (f.partition_activations) {
            const double mean_step =
                seconds / double(std::max<std::size_t>(1, h.step_seconds.size() - 1));
            // On a rank's wire: an all-gather of b bytes puts (T - 1) / T b there, an all-reduce
            // 2 (T - 1) / T b (nccl-tests' bus bandwidth), so the ratio is of b / 2 to b.
            std::printf("partitioned activations: %.0f all-gathers per step (the kept inputs and "
                        "their hashes), %.0f elements, %.3f MB; on the wire %.2f%% of the "
                        "tensor-parallel all-reduces'; backward "
                        "waited %.3f ms per step for them (%.2f%% of the step)\n",
                        h.activation_gathers_per_step, h.activation_gathered_elements_per_step,
                        mb(h.activation_gather_bytes_per_step),
                        100.0 * h.activation_gathered_elements_per_step /
                            (2.0 * h.tensor_elements_per_step),
                        h.activation_gather_wait_per_step * 1e3,
                        100.0 * h.activation_gather_wait_per_step / mean_step);
          }
          std::printf("replicated parameters bitwise identical across each tensor-parallel "
                      "group: %s\n",
                      h.replicated_identical ? "yes" : "NO");
        }
      }
    }
    if (!f.json.empty()) write_json(f.json, f, h, tokens_per_second);
    if (!f.save_npy.empty()) train_gpt::save_npy(f.model, f.save_npy, h.final_weights);
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return examples::run_on_world("train_gpt", argc, argv, train_on);
}
