#pragma once
// The training loop of train_mlp, written the way a user of zero writes one: register the layers,
// then per step acquire each layer for forward, acquire it again for backward, hand its gradient
// over, and step. It works unchanged for every stage; only the plan type differs.

#include "data.hpp"
#include "mlp.hpp"
#include "scaler.hpp"
#include "settings.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/engines.hpp> // the engine: its code is zero::engines' where that is linked
#include <zero/optim/fused_step.hpp>
#include <zero/schedule/lr_scheduler.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace train {

struct History {
  int first_step = 0;               // steps before it came from a checkpoint; vectors start here
  std::vector<double> loss;         // global mean over the step's rows
  std::vector<double> step_seconds; // slowest rank
  double forward_seconds = 0, backward_seconds = 0, update_seconds = 0; // this rank, all steps
  std::vector<double> forward_step, backward_step; // this rank, each step (wall_clock_breakdown)
  zero::StepTimes step_times;      // this rank's step() broken down, summed over the steps
  double fused_kernel_seconds = 0; // the optimizer pass alone on this rank's share (see below);
                                   // 0: not timed (--no-reference-pass, or states on NVMe)
  std::vector<bool> applied;
  std::vector<double> loss_scale, grad_norm, lr;
  std::vector<zero::StepResult> steps;
  zero::MemoryReport memory;
  double paper_bytes = 0;
  std::size_t psi = 0, padded = 0;
  int shard_ranks = 1;
  Weights final_weights; // gathered for --save-npy only: they cost 4 bytes per parameter
  // --device cuda: the device's memory in use (cudaMemGetInfo, total less free: every process's)
  // before the engine was built, once built (with the model's buffers), after the first step and
  // after the last; all 0 on the host.
  std::size_t device_before = 0, device_built = 0, device_first_step = 0, device_last_step = 0;
  std::string device_name, device_communicator; // --device cuda: which GPU, and which collectives
};

// The engine's options from the flags (and the config they were merged with).
inline zero::EngineOptions engine_options(const Flags& f) {
  zero::EngineOptions options =
      f.ds ? zero::EngineOptions::from_config(*f.ds) : zero::EngineOptions{};
  options.compute_dtype = f.dtype;
  options.gradient_accumulation_steps = f.grad_accum;
  options.gradient_clipping = f.clip;
  options.deterministic = f.deterministic;
  options.reduce_bucket_elements = f.bucket;
  if (!f.ds) options.persistence_threshold = 0; // every layer sharded: the demo shows 3Ψ
  if (!f.nvme_path.empty()) {
    options.nvme.optimizer.nvme_path = options.nvme.parameters.nvme_path = f.nvme_path;
    // Flags put every parameter block on NVMe; a config says how many stay in memory.
    if (!f.ds || f.ds->zero_optimization.offload_param.device != zero::config::OffloadDevice::nvme)
      options.nvme.parameters.max_in_cpu = 0;
    // Without a config the flags ask for the overlapped step (DeepSpeed's defaults leave it off).
    if (!f.ds) options.nvme.optimizer.pipeline_read = options.nvme.optimizer.pipeline_write = true;
  }
  if (f.sub_group_size) options.nvme.optimizer.sub_group_size = *f.sub_group_size;
  options.quantized_weights = f.quantized_weights;
  options.hpz_partition_size = f.hpz;
  options.quantized_gradients = f.quantized_gradients;
  options.gradient_quantization_bits = f.gradient_bits;
  if (f.quantization_block) options.quantization_block = *f.quantization_block;
  options.nvme.remove_stale = f.remove_stale_swap;
  options.delayed_parameter_update_after = f.delayed_update_after;
  options.speculative_update = f.speculative_update;
  options.offload_ratio = f.offload_ratio;
  // The engine refuses 8-bit moments where it cannot keep them (SGD, LAMB, the NVMe tier), by name.
  options.moments = moment_storage(f);
  options.master = master_storage(f); // refused where it cannot be kept, by name
  return options;
}

template <class Engine>
Engine make_engine(zero::MpiCommunicator& world, const Flags& f,
                   typename Engine::optimizer_type optimizer) {
  return Engine(world, f.shape.specs(), std::move(optimizer), make_scaler(f), engine_options(f));
}

// One micro-step's forward and backward on `rows` rows starting at data row `first`.
template <class T, class Engine>
double forward_backward(Engine& engine, const Flags& f, const Dataset& data, std::size_t first,
                        std::size_t rows, History& h) {
  const auto start = std::chrono::steady_clock::now();
  const mlp::Shape& shape = f.shape;
  const std::size_t layers = shape.layers();
  std::vector<std::vector<float>> pre(layers), act(layers + 1);
  act[0].resize(rows * shape.widths.front());
  std::vector<float> target(rows * shape.widths.back());
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy_n(data.x_row(first + r), data.inputs, act[0].data() + r * data.inputs);
    std::copy_n(data.y_row(first + r), data.outputs, target.data() + r * data.outputs);
  }
  // The layer's weights in float for BLAS: the engine's own memory in fp32, a converted copy in
  // fp16/bf16.
  std::vector<float> widened;
  auto float_weights = [&](const zero::LayerParameters& p) -> const float* {
    const auto values = p.values<T>();
    if constexpr (std::is_same_v<T, float>) {
      return values.data();
    } else {
      widened.resize(values.size());
      zero::convert_n(values.data(), widened.data(), values.size());
      return widened.data();
    }
  };
  for (std::size_t l = 0; l < layers; ++l) {
    const zero::LayerParameters p = engine.acquire(l); // stage 3 gathers it, and prefetches l + 1
    const float* weights = float_weights(p);
    const std::size_t in = shape.in(l), out = shape.out(l);
    pre[l].resize(rows * out);
    mlp::linear_forward(act[l].data(), weights, weights + out * in, pre[l].data(), rows, in, out);
    act[l + 1] = pre[l];
    if (l + 1 < layers)
      for (float& v : act[l + 1])
        v = mlp::activate(shape.activation, v);
  }
  const auto forward_done = std::chrono::steady_clock::now();
  h.forward_seconds += std::chrono::duration<double>(forward_done - start).count();
  std::vector<float> delta(rows * shape.widths.back()), previous, grad;
  const float scale = static_cast<float>(engine.loss_scale());
  const double loss = mlp::loss_and_gradient(shape.loss, act[layers].data(), target.data(),
                                             delta.data(), rows, shape.widths.back(), scale);
  for (std::size_t l = layers; l-- > 0;) {
    const zero::LayerParameters p = engine.acquire(l);
    const float* weights = float_weights(p);
    const std::size_t in = shape.in(l), out = shape.out(l);
    previous.resize(l > 0 ? rows * in : 0);
    // fp32 gradients go straight into the engine's buffer; fp16/bf16 ones are rounded into it.
    zero::View<T> out_grad = engine.template gradients<T>(l);
    float* g = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      g = out_grad.data();
    } else {
      grad.resize(out * in + out);
      g = grad.data();
    }
    mlp::linear_backward(act[l].data(), weights, delta.data(), g, g + out * in,
                         l > 0 ? previous.data() : nullptr, rows, in, out);
    if constexpr (!std::is_same_v<T, float>)
      zero::convert_n(grad.data(), out_grad.data(), grad.size());
    engine.grads_ready(l); // its reduction overlaps with the layers below
    if (l > 0) {
      for (std::size_t i = 0; i < previous.size(); ++i)
        previous[i] *= mlp::activation_slope(shape.activation, pre[l - 1][i], act[l][i]);
      delta.swap(previous);
    }
  }
  h.backward_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - forward_done).count();
  return loss;
}

// The model's side of a step, as train() calls it: a micro-step's forward and backward on the
// host (forward_backward above), and nothing to do after the step. The device's is in
// device_training.hpp.
template <class Engine>
struct HostModel {
  Engine& engine;
  const Flags& f;
  const Dataset& data;

  template <class T>
  double micro_step(std::size_t first, std::size_t rows, History& h) {
    return forward_backward<T>(engine, f, data, first, rows, h);
  }
  void after_step(int /*step*/) {}
};

// The fused optimizer pass alone, on fresh buffers the size of what this rank updates in every
// step (its shard, or everything under stage 0), in the run's types: the yardstick for step().
// Median of five passes.
template <class Engine>
double fused_kernel_seconds(Engine& engine, int stage, int rank) {
  const zero::ShardLayout& layout = engine.layout();
  std::size_t n = 0;
  for (std::size_t l = 0; l < layout.layer_count(); ++l)
    n += stage == 0 ? layout.layer(l).flat_numel : layout.block(l, rank).size();
  return engine.visit_compute_type([&](auto tag) {
    using T = decltype(tag);
    constexpr std::size_t states = Engine::optimizer_type::state_tensors;
    zero::Buffer<float> master(n, 0.5f);
    std::array<zero::Buffer<float>, states> moments;
    std::array<zero::View<float>, states> views;
    for (std::size_t k = 0; k < states; ++k) {
      moments[k] = zero::Buffer<float>(n);
      views[k] = moments[k].view();
    }
    zero::Buffer<T> grads(n, zero::convert<T>(0.01f)), out(n);
    const auto update = engine.optimizer().update_for_step(1);
    std::vector<double> seconds;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      zero::fused_step(zero::HostThreads{}, update, master.view(), views,
                       zero::View<const T>(grads.view()), 1.0f, out.view());
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  });
}

// Checkpoints of train_mlp carry the number of steps done as their user state.
template <class Engine>
void save(Engine& engine, const Flags& f, int steps_done,
          const std::optional<zero::LrScheduler>& scheduler, int rank) {
  const auto start = std::chrono::steady_clock::now();
  // example-begin checkpoint-save
  const std::string done = "train_mlp steps " + std::to_string(steps_done);
  zero::CheckpointOptions options;
  options.user_state.resize(done.size());
  std::memcpy(options.user_state.data(), done.data(), done.size());
  options.lr_scheduler = scheduler ? &*scheduler : nullptr;
  options.async = f.async_checkpoint;
  engine.save_checkpoint(f.save_checkpoint, "step" + std::to_string(steps_done), options);
  // example-end checkpoint-save
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0)
    std::printf("checkpoint step%d %s %s in %.3f s\n", steps_done,
                f.async_checkpoint ? "snapshot taken for" : "saved to", f.save_checkpoint.c_str(),
                seconds);
}

// Loads --load-checkpoint; returns the number of steps it had done.
template <class Engine>
int resume(Engine& engine, const Flags& f, std::optional<zero::LrScheduler>& scheduler, int rank) {
  const auto start = std::chrono::steady_clock::now();
  // example-begin checkpoint-load
  const zero::LoadedCheckpoint c =
      engine.load_checkpoint(f.load_checkpoint, std::nullopt, scheduler ? &*scheduler : nullptr);
  // example-end checkpoint-load
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The user state is read from the checkpoint: "train_mlp steps N", nothing else.
  const std::string text(reinterpret_cast<const char*>(c.user_state.data()), c.user_state.size());
  const std::string prefix = "train_mlp steps ";
  int done = -1;
  const char* const end = text.data() + text.size();
  const bool ours = text.starts_with(prefix) &&
                    std::from_chars(text.data() + prefix.size(), end, done).ptr == end && done >= 0;
  zero::require(ours, "--load-checkpoint: " + c.path.string() + " was not saved by train_mlp",
                zero::ErrorKind::mismatch);
  zero::require(done <= f.steps, "--load-checkpoint: " + c.path.string() + " has done " +
                                     std::to_string(done) + " steps, more than --steps " +
                                     std::to_string(f.steps));
  if (rank == 0)
    std::printf("resumed from %s in %.3f s (rank 0 read %.1f MB in %.3f s, rebuilt the weights in "
                "%.3f s): %d step(s) done, saved by %d rank(s) at stage %d\n\n",
                c.path.c_str(), seconds, double(c.bytes_read) / 1e6, c.read_seconds,
                c.rebuild_seconds, done, c.saved_world_size, c.saved_stage);
  return done;
}

template <class Engine, class Model>
History train(zero::MpiCommunicator& world, const Flags& f, Engine& engine, const Dataset& data,
              Model& model) {
  History h;
  const int ranks = world.size(), rank = world.rank();
  const std::size_t micro_rows = f.batch / std::size_t(f.grad_accum) / std::size_t(ranks);
  std::optional<zero::LrScheduler> scheduler;
  if (f.ds && f.ds->scheduler) scheduler.emplace(f.ds->scheduler->schedule, f.lr);
  if (!f.load_checkpoint.empty()) h.first_step = resume(engine, f, scheduler, rank);
  if (f.async_checkpoint) engine.reserve_checkpoint_snapshot(); // not while training waits
  // The data position follows from the step.
  std::size_t cursor = std::size_t(h.first_step) * f.batch % data.rows;
  for (int step = h.first_step; step < f.steps; ++step) {
    if (scheduler) engine.optimizer().set_lr(scheduler->lr());
    const auto start = std::chrono::steady_clock::now();
    const double forward_before = h.forward_seconds, backward_before = h.backward_seconds;
    double loss = 0;
    for (int micro = 0; micro < f.grad_accum; ++micro) {
      // The step's global batch is the next `batch` rows; micro-step k takes its k-th part, and
      // rank r the r-th contiguous share of that.
      const std::size_t first = cursor + std::size_t(micro) * micro_rows * std::size_t(ranks) +
                                std::size_t(rank) * micro_rows;
      loss += engine.visit_compute_type(
          [&](auto tag) { return model.template micro_step<decltype(tag)>(first, micro_rows, h); });
    }
    cursor = (cursor + f.batch) % data.rows;
    const auto update_start = std::chrono::steady_clock::now();
    zero::StepResult r = engine.step();
    h.update_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - update_start).count();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model.after_step(step); // outside the step's time (the device's asks cudaMemGetInfo)
    std::array<double, 2> both{loss / f.grad_accum / ranks, seconds};
    world.all_reduce(std::span<double>(both.data(), 1), zero::ReduceOp::sum).wait();
    world.all_reduce(std::span<double>(both.data() + 1, 1), zero::ReduceOp::max).wait();
    if (scheduler)
      scheduler->step(r.applied ? zero::StepOutcome::applied
                                : zero::StepOutcome::skipped_for_overflow);
    h.loss.push_back(both[0]);
    h.step_seconds.push_back(both[1]);
    h.forward_step.push_back(h.forward_seconds - forward_before);
    h.backward_step.push_back(h.backward_seconds - backward_before);
    h.applied.push_back(r.applied);
    h.loss_scale.push_back(r.loss_scale);
    h.grad_norm.push_back(r.grad_norm);
    h.lr.push_back(engine.optimizer().lr());
    h.steps.push_back(r);
    h.step_times.reduction_wait += r.seconds.reduction_wait;
    h.step_times.norm += r.seconds.norm;
    h.step_times.update += r.seconds.update;
    h.step_times.total += r.seconds.total;
    const bool last = step + 1 == f.steps;
    if (!f.save_checkpoint.empty() &&
        (last || (f.save_every > 0 && (step + 1) % f.save_every == 0)))
      save(engine, f, step + 1, scheduler, rank);
  }
  if (f.async_checkpoint) {
    const auto start = std::chrono::steady_clock::now();
    engine.wait_for_checkpoint(); // an asynchronous save completes (or fails) here
    if (rank == 0)
      std::printf("checkpoint completed %.3f s after the run's end\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (f.reference_pass) h.fused_kernel_seconds = fused_kernel_seconds(engine, f.stage, rank);
  h.memory = engine.memory();
  h.paper_bytes = engine.paper_model_state_bytes();
  h.psi = engine.layout().numel();
  for (std::size_t l = 0; l < engine.layers(); ++l)
    h.padded += engine.layout().layer(l).flat_numel;
  h.shard_ranks = engine.shard_ranks();
  if (!f.save_npy.empty()) // collective; every rank has the same flags
    for (std::size_t l = 0; l < engine.layers(); ++l)
      h.final_weights.push_back(engine.get_layer(l));
  return h;
}

template <class Engine>
History train(zero::MpiCommunicator& world, const Flags& f, Engine& engine, const Dataset& data) {
  HostModel<Engine> model{engine, f, data};
  return train(world, f, engine, data, model);
}

} // namespace train
