#pragma once
// train_gpt's training loop with every model state and activation in a device's memory: the
// engine over a stream space (its placement's execution space, Exec), the model on the engine's
// stream (DeviceModel), the same layers, batches, loss and order of gradients as the host loop
// (training.hpp), so that over DeviceTwinSpace a run gives the host run's bits.
//
// The blocks run through CheckpointedLayers over Exec, as the host loop's run over the host:
// activation checkpointing in the device's memory, the kept inputs there too, every activation
// from the loop's arena (on a device always: a step after the first allocates nothing). Kept
// simple where the host loop is not: the model is unsplit (no tensor parallelism, so no
// partitioned activations), the kept inputs stay in device memory (no tier below it), and the
// learning rate is the flag's (no schedule).

#include "device_model.hpp"
#include "training.hpp"

#include <zero/core/buffer.hpp>
#include <zero/core/convert.hpp>
#include <zero/core/view.hpp>
#include <zero/residual/checkpointed_layers.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace train_gpt {

// The GPT on the engine's stream, as the training loop calls it: the blocks run through
// CheckpointedLayers over Exec (activation checkpointing in the device's memory, as the host loop
// runs them on the host), its buffers allocated once, for a micro-step of `batch` sequences, and
// the activations from the loop's arena, so that device memory stays flat from step to step.
template <class Engine, class Exec, class T>
class DeviceGpt {
  using Memory = typename Exec::memory_space;
  using Floats = zero::Buffer<float, Memory>;

  // The transformer blocks as the checkpointed loop calls them: block l is engine layer l + 1,
  // acquired (stage 3: gathered) in forward, in a recomputation, and in backward.
  struct Blocks {
    DeviceGpt& gpt;

    std::size_t layers() const { return gpt.model_.layers; }
    std::size_t activation_elements() const { return gpt.activation(); }
    std::size_t saved_elements(std::size_t) const { return gpt.saved_floats_; }

    void forward(std::size_t l, zero::View<const float, Memory> in, zero::View<float, Memory> out,
                 zero::View<float, Memory> saved) {
      const zero::LayerParameters p = gpt.engine_.acquire(l + 1); // stage 3 gathers it
      gpt.device_->block_forward(gpt.widen(p, gpt.weights_), in.data(), out.data(), saved.data(),
                                 gpt.batch_);
    }

    void backward(std::size_t l, zero::View<const float, Memory> in,
                  zero::View<const float, Memory> saved, zero::View<const float, Memory> grad_out,
                  zero::View<float, Memory> grad_in) {
      const zero::LayerParameters p = gpt.engine_.acquire(l + 1);
      float* g = nullptr;
      if constexpr (std::is_same_v<T, float>)
        g = gpt.engine_.template gradients<float>(l + 1).data(); // straight into its buffer
      else
        g = gpt.block_gradients_.data();
      gpt.device_->block_backward(gpt.widen(p, gpt.weights_), in.data(), saved.data(),
                                  grad_out.data(), grad_in.data(), g, gpt.batch_);
      if constexpr (std::is_same_v<T, float>)
        gpt.engine_.grads_ready(l + 1);
      else
        gpt.hand_over(l + 1, gpt.block_gradients_);
    }
  };

 public:
  using Loop = zero::CheckpointedLayers<Blocks, zero::NoRandomState, Exec>;

  DeviceGpt(Engine& engine, const gpt::Config& model, std::size_t batch, const Exec& exec,
            const zero::ActivationCheckpointing& checkpointing, gpt::ProductPrecision products)
      : engine_(engine), model_(model), batch_(batch), exec_(exec),
        device_(gpt::make_device_model(exec, model, batch, products)), rows_(batch * model.seq),
        saved_floats_(gpt::block_saved_floats(model, batch)), tokens_(rows_), targets_(rows_),
        x_(activation()), dy_(activation()), dx_(activation()),
        embedding_weights_(engine.layout().layer(0).numel),
        weights_(std::max(gpt::block_parameters(model), 2 * model.embd)),
        embedding_gradients_(engine.layout().layer(0).numel), final_gradients_(2 * model.embd),
        block_gradients_(gpt::block_parameters(model)), loss_(1),
        loop_(blocks_, checkpointing, {}, exec) {}
  DeviceGpt(const DeviceGpt&) = delete; // the blocks refer to it
  DeviceGpt& operator=(const DeviceGpt&) = delete;

  // One micro-step over this rank's sequences (tokens and targets: [batch, seq] on the host):
  // forward, the head, backward, each layer's gradients handed to the engine as they are ready,
  // in the host loop's order. Returns the micro-step's loss, the mean over its tokens; the stream
  // has run everything queued when it returns, so the host may reuse tokens and targets.
  double micro_step(const std::uint8_t* tokens, const std::uint8_t* targets) {
    const std::size_t last = model_.layers + 1, c = model_.embd;
    upload(tokens, tokens_);
    upload(targets, targets_);
    {
      const zero::LayerParameters p = engine_.acquire(0);
      const float* wte = widen(p, embedding_weights_);
      device_->embed_forward(wte, wte + model_.vocab * c, tokens_.data(), x_.data(), batch_);
    }
    const zero::View<const float, Memory> y = loop_.forward(std::as_const(x_).view());
    {
      const zero::LayerParameters final_layer = engine_.acquire(last);
      const zero::LayerParameters embeddings = engine_.acquire(0); // the tied head
      // As the host model's head computes it: the scale in float, over the tokens in double.
      const float loss_scale = static_cast<float>(engine_.loss_scale());
      const float gradient_scale = float(double(loss_scale) / double(rows_));
      device_->head_forward_backward(widen(final_layer, weights_),
                                     widen(embeddings, embedding_weights_), y.data(),
                                     targets_.data(), dy_.data(), final_gradients_.data(),
                                     embedding_gradients_.data(), batch_, gradient_scale);
    }
    hand_over(last, final_gradients_);
    loop_.backward(std::as_const(dy_).view(), dx_.view());
    device_->embed_backward(tokens_.data(), dx_.data(), embedding_gradients_.data(),
                            embedding_gradients_.data() + model_.vocab * c, batch_);
    hand_over(0, embedding_gradients_);
    zero::copy(exec_, zero::View<const double, Memory>(device_->loss_sum(), 1), loss_.view());
    exec_.fence(); // the loss, for the step's line
    return loss_[0] / double(rows_);
  }

  // The checkpointed loop: its figures (CheckpointStats) and its memory.
  const Loop& loop() const noexcept { return loop_; }
  // One block's activations: its input and what it saves.
  std::size_t block_bytes() const noexcept {
    return (activation() + saved_floats_) * sizeof(float);
  }

 private:
  std::size_t activation() const noexcept { return rows_ * model_.embd; }

  void upload(const std::uint8_t* host, zero::Buffer<std::uint8_t, Memory>& device) {
    zero::copy(exec_, zero::View<const std::uint8_t>(host, rows_), device.view());
  }

  // The layer's weights in float for the model: the engine's own memory in fp32, else a copy
  // widened on the stream into `into`.
  const float* widen(const zero::LayerParameters& p, Floats& into) {
    const zero::View<const T, Memory> values = p.values<T, Memory>();
    if constexpr (std::is_same_v<T, float>) {
      return values.data();
    } else {
      zero::convert(exec_, values, into.view().first(values.size()));
      return into.data();
    }
  }

  // Layer l's float gradients rounded into the engine's buffer on the stream, then handed over.
  void hand_over(std::size_t l, const Floats& gradients) {
    const zero::View<T, Memory> into = engine_.template gradients<T>(l);
    zero::convert(exec_, zero::View<const float, Memory>(gradients.data(), into.size()), into);
    engine_.grads_ready(l);
  }

  Engine& engine_;
  const gpt::Config& model_;
  std::size_t batch_;
  Exec exec_;
  std::unique_ptr<gpt::AnyDeviceModel> device_; // DeviceModel<Exec>, its kernels compiled for Exec
  std::size_t rows_, saved_floats_;
  zero::Buffer<std::uint8_t, Memory> tokens_, targets_;
  Floats x_, dy_, dx_; // the embeddings' output; the gradients at the last block's output, and
                       // at the first block's input
  Floats embedding_weights_, weights_, embedding_gradients_, final_gradients_, block_gradients_;
  zero::Buffer<double, zero::host> loss_;
  Blocks blocks_{*this};
  Loop loop_;
};

// The host loop's steps (training.hpp's train()) with the model on the device: the losses, step
// times, loss scales and the final weights (with --save-npy) in the History the report prints.
// after_step(step, h) runs once the model is built (step -1) and after each step: a GPU run reads
// its memory there.
struct NothingAfterStep {
  void operator()(int, History&) const noexcept {}
};
template <class Engine, class Exec, class AfterStep = NothingAfterStep>
History train_on_device(zero::MpiCommunicator& world, const Flags& f, Engine& engine,
                        const Tokens& data, const Exec& exec, AfterStep after_step = {}) {
  return engine.visit_compute_type([&](auto tag) {
    using T = decltype(tag);
    const gpt::Config& model = f.model;
    const std::size_t micro_steps = std::size_t(engine.options().gradient_accumulation_steps);
    const std::size_t batch = f.batch / (std::size_t(world.size()) * micro_steps);
    const std::size_t rows = batch * model.seq;
    zero::ActivationCheckpointing checkpointing = train_gpt::checkpointing(f);
    checkpointing.contiguous_memory = true; // a step after the first allocates nothing
    DeviceGpt<Engine, Exec, T> gpt(engine, model, batch, exec, checkpointing, f.products);
    std::vector<std::uint8_t> tokens(rows), targets(rows);
    History h;
    exec.fence(); // the model's buffers are in place
    after_step(-1, h);
    zero::CommStats data_traffic;
    for (int step = 0; step < f.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      double loss = 0;
      for (std::size_t micro = 0; micro < micro_steps; ++micro) {
        const std::size_t first = (std::size_t(world.rank()) * micro_steps + micro) * batch;
        data.batch(step, f.batch, model.seq, first, batch, tokens.data(), targets.data());
        loss += gpt.micro_step(tokens.data(), targets.data());
        h.activations.peak_activation_bytes =
            std::max(h.activations.peak_activation_bytes, gpt.loop().stats().peak_activation_bytes);
      }
      const zero::StepResult r = engine.step();
      h.lr.push_back(engine.optimizer().lr());
      h.loss.push_back(mean_over_ranks(world, loss / double(micro_steps)));
      h.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      h.applied.push_back(r.applied);
      h.loss_scale.push_back(r.loss_scale);
      if (step > 0) { // the first step is not counted
        data_traffic += r.communication;
        h.gathers_on_demand += r.gathers.on_demand;
        h.gathers_prefetched += r.gathers.prefetched;
      }
      after_step(step, h);
    }
    if (f.steps > 1) {
      const double counted = double(f.steps - 1);
      h.data_elements_per_step = double(data_traffic.volume_elements()) / counted;
      h.data_bytes_per_step = double(data_traffic.total_bytes()) / counted;
    }
    const std::size_t peak = h.activations.peak_activation_bytes;
    h.activations = gpt.loop().stats();
    h.activations.peak_activation_bytes = peak;
    h.arena_bytes = gpt.loop().memory().reserved_bytes();
    h.block_bytes = gpt.block_bytes();
    h.memory = engine.memory();
    h.psi = engine.layout().numel();
    h.shard_ranks = engine.shard_ranks();
    if (!f.save_npy.empty()) h.final_weights = final_slices(model, engine);
    return h;
  });
}

} // namespace train_gpt
