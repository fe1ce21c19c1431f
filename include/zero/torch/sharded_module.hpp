#pragma once
// zero::torch::ShardedModule: ZeRO for a torch::nn::Module. The engine owns the model states; the
// module's parameter tensors become views of the engine's compute copy (torch::from_blob, no copy)
// and the user keeps their forward and backward:
//
//   auto layers = zero::torch::ModuleLayers::by_child(*model);     // one layer per child
//   Engine engine(comm, layers.specs(), zero::Adam(...), scaler, options);
//   zero::torch::ShardedModule sharded(engine, *model, layers);    // rank 0's weights, everywhere
//   ...
//   x = sharded.call(1, [&](const torch::Tensor& in) { return model->block->forward(in); }, x);
//   ...
//   sharded.backward(loss);                                         // scaled by the loss scale
//   zero::StepResult r = sharded.step();                            // replaces optimizer.step()
//
// Each layer's forward runs through call(): it acquires the layer (stage 3 gathers it), points the
// layer's parameters at the compute copy, runs the function, and records an autograd node whose
// backward hands the layer's gradient to the engine the moment autograd reaches it, so that its
// reduction overlaps the rest of backward. Parameters' .grad() stay empty: gradients go straight
// from autograd to the engine's gradient store.
//
// Why a call and not a guard object: libtorch 1.13's C++ API has no module hooks, and an object
// around the forward cannot see backward. And why stage 3 runs the layer's forward again in
// backward: autograd keeps what the forward saved, views of the weights among them (a Linear saves
// its weight's transpose), and at stage 3 those weights are gone after the call: so the forward
// runs without recording, and backward gathers the layer again and records it then (activation
// checkpointing of the layer, as DeepSpeed users pair with ZeRO-3). Stages 0-2 keep the graph and
// compute nothing twice. Either way the gradients are the same bits (CPU kernels are deterministic
// at a fixed thread count).
//
// Rules: every layer is called once per micro-step (the engine takes each layer's gradient once),
// call() is the only way a layer's parameters are used (at stage 3 they are empty outside it), and
// a parameter a call does not use gets a zero gradient (torch.optim would skip it; zero's Adam
// decays its moments, as ZeRO does). Under torch::NoGradGuard, call() only runs the forward.

#include "zero/checkpoint/run_state.hpp"
#include "zero/checkpoint/safetensors.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/report.hpp"
#include "zero/torch/module_layers.hpp"

#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace zero::torch {

inline ::torch::ScalarType scalar_type_of(DType t) {
  switch (t) {
  case DType::float32:
    return ::torch::kFloat32;
  case DType::float16:
    return ::torch::kFloat16;
  case DType::bfloat16:
    return ::torch::kBFloat16;
  default:
    break;
  }
  fail(ErrorKind::unsupported, std::string("zero::torch: no compute type ") + to_string(t));
}

template <class Engine>
class ShardedModule {
 public:
  using Function = std::function<::torch::Tensor(const ::torch::Tensor&)>;

  // Sets the engine's weights from the module's (rank 0's: collective) and points the module's
  // parameters at the engine's compute copy. The engine must have been built from layers.specs().
  ShardedModule(Engine& engine, ::torch::nn::Module& module, ModuleLayers layers)
      : engine_(engine), layers_(std::move(layers)) {
    std::set<const void*> own;
    for (const ::torch::Tensor& t : module.parameters())
      own.insert(t.unsafeGetTensorImpl());
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (const ModuleParameter& p : layers_.layer(l))
        require(own.contains(p.tensor.unsafeGetTensorImpl()),
                "zero::torch: '" + p.name +
                    "' of the layers is not a parameter of this module "
                    "(make the ModuleLayers from the module given here)");
    // A half-precision compute copy would need every call's floating inputs cast to it; not built
    // yet (docs/libtorch.md).
    require(engine_.options().compute_dtype == DType::float32,
            std::string("zero::torch: the compute type is ") +
                to_string(engine_.options().compute_dtype) +
                "; zero::torch trains float32 modules for now (EngineOptions::compute_dtype)",
            ErrorKind::unsupported);
    require(engine_.layers() == layers_.size(),
            "zero::torch: the engine has " + std::to_string(engine_.layers()) +
                " layers and the module's grouping " + std::to_string(layers_.size()) +
                " (build the engine from the same ModuleLayers' specs())");
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      require(engine_.layout().layer(l).numel == layers_.numel(l),
              "zero::torch: layer " + std::to_string(l) + " has " +
                  std::to_string(engine_.layout().layer(l).numel) + " parameters in the engine, " +
                  std::to_string(layers_.numel(l)) + " in the module");
      std::vector<float> values;
      values.reserve(layers_.numel(l));
      for (const ModuleParameter& p : layers_.layer(l)) {
        const ::torch::Tensor flat = p.tensor.detach().contiguous().view(-1);
        values.insert(values.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
      }
      engine_.set_layer(l, View<const float>(values));
      if constexpr (!keeps_weights) release_views(l);
    }
    point_at_compute_copy();
  }
  ShardedModule(const ShardedModule&) = delete;
  ShardedModule& operator=(const ShardedModule&) = delete;
  // The parameters keep the weights they last saw, as tensors of their own.
  ~ShardedModule() {
    try {
      const ::torch::NoGradGuard no_grad;
      for (std::size_t l = 0; l < layers_.size(); ++l)
        for (const ModuleParameter& p : layers_.layer(l))
          p.tensor.set_data(p.tensor.numel() > 0 ? p.tensor.detach().clone()
                                                 : ::torch::empty(shape_of(p), options()));
    } catch (const std::exception& e) { // out of memory: the views are left as they are
      std::fprintf(stderr, "zero::torch: ~ShardedModule: %s (the parameters keep their views)\n",
                   e.what());
    }
  }

  Engine& engine() noexcept { return engine_; }
  const ModuleLayers& layers() const noexcept { return layers_; }
  std::size_t layer_of(const ::torch::nn::Module& submodule) const {
    return layers_.layer_of(submodule);
  }

  // Layer l's forward: forward(input) with the layer's parameters pointing at its compute copy.
  // Its backward hands the layer's gradient to the engine. `input` need not require a gradient
  // (token ids, say); other tensors forward reads are captured by it.
  ::torch::Tensor call(std::size_t l, const Function& forward, const ::torch::Tensor& input) {
    if (l >= layers_.size()) // (no message built on the way that works: call() runs per layer)
      fail(ErrorKind::invalid_argument, "zero::torch: call: there are " +
                                            std::to_string(layers_.size()) + " layers, not " +
                                            std::to_string(l + 1));
    if (!::torch::GradMode::is_enabled()) {
      const LayerParameters held = engine_.acquire(l);
      point_at(l, held);
      ::torch::Tensor out = forward(input);
      if constexpr (!keeps_weights) release_views(l);
      return out;
    }
    auto record = c10::make_intrusive<Record>();
    record->owner = this;
    record->layer = l;
    record->forward = forward;
    return LayerCall::apply(input, anchor_, record)[0];
  }
  ::torch::Tensor call(const ::torch::nn::Module& submodule, const Function& forward,
                       const ::torch::Tensor& input) {
    return call(layer_of(submodule), forward, input);
  }

  // loss * the loss scale, backward: what replaces loss.backward().
  void backward(const ::torch::Tensor& loss) { (loss * engine_.loss_scale()).backward(); }
  // Replaces optimizer.step(): the engine's step (overflow check, clipping, the update of this
  // rank's shard, the new weights shared).
  StepResult step() {
    StepResult r = engine_.step();
    point_at_compute_copy();
    return r;
  }

  // The engine's checkpoints (docs/checkpoints.md), and the module's views pointed at the loaded
  // weights. Collective, between steps.
  void save_checkpoint(const std::filesystem::path& dir, const std::string& tag,
                       const CheckpointOptions& options = {}) {
    engine_.save_checkpoint(dir, tag, options);
  }
  LoadedCheckpoint load_checkpoint(const std::filesystem::path& dir,
                                   const std::optional<std::string>& tag = std::nullopt) {
    LoadedCheckpoint loaded = engine_.load_checkpoint(dir, tag);
    point_at_compute_copy();
    return loaded;
  }

  // The fp32 master weights as a safetensors file whose keys are the module's named_parameters():
  // Python's model.load_state_dict(safetensors.torch.load_file(file)) takes it. Collective (the
  // shards are gathered); rank 0 writes. Buffers are not in it (the engine does not hold them).
  void save_state_dict(const std::filesystem::path& file) {
    std::vector<std::vector<float>> weights;
    for (std::size_t l = 0; l < layers_.size(); ++l)
      weights.push_back(engine_.get_layer(l));
    if (engine_.rank() != 0) return;
    std::vector<NamedTensor> tensors;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      std::size_t offset = 0;
      for (const ModuleParameter& p : layers_.layer(l)) {
        const std::size_t n = std::size_t(p.tensor.numel() > 0 ? p.tensor.numel() : numel_of(p));
        tensors.push_back({p.name, p.shape, View<const float>(weights[l].data() + offset, n)});
        offset += n;
      }
    }
    write_safetensors(file, tensors, {{"zero.source", "zero::torch::ShardedModule"}});
  }

 private:
  static constexpr bool keeps_weights = !Engine::plan_type::parameters; // stages 0-2

  // What one call's backward needs: kept in its autograd node, so it lives as long as the graph.
  struct Record : ::torch::CustomClassHolder {
    ShardedModule* owner = nullptr;
    std::size_t layer = 0;
    Function forward;
    ::torch::Tensor start, output; // stages 0-2: the recorded forward, from `start`
    ::torch::Tensor input;         // stage 3: to run the forward again, detached
    bool input_requires_grad = false;
  };

  struct LayerCall : ::torch::autograd::Function<LayerCall> {
    // `anchor` requires a gradient, so that autograd calls backward even when `input` does not.
    static ::torch::autograd::variable_list forward(::torch::autograd::AutogradContext* ctx,
                                                    const ::torch::Tensor& input,
                                                    const ::torch::Tensor& anchor,
                                                    c10::intrusive_ptr<Record> record) {
      (void)anchor;
      ShardedModule& self = *record->owner;
      const LayerParameters held = self.engine_.acquire(record->layer);
      self.point_at(record->layer, held);
      ::torch::Tensor out;
      if constexpr (keeps_weights) {
        const ::torch::AutoGradMode record_graph(true);
        record->start = start_of(input, input.requires_grad());
        record->output = record->forward(record->start);
        out = record->output.detach();
      } else {
        record->input = input.detach();
        record->input_requires_grad = input.requires_grad();
        out = record->forward(input);
        self.release_views(record->layer);
      }
      ctx->saved_data["record"] = c10::IValue::make_capsule(record);
      return {out};
    }

    static ::torch::autograd::variable_list backward(::torch::autograd::AutogradContext* ctx,
                                                     ::torch::autograd::variable_list grads) {
      const auto record =
          c10::static_intrusive_pointer_cast<Record>(ctx->saved_data["record"].toCapsule());
      ShardedModule& self = *record->owner;
      const std::size_t l = record->layer;
      std::optional<LayerParameters> held;
      if constexpr (!keeps_weights) { // gather again, and record the forward this time
        held.emplace(self.engine_.acquire(l));
        self.point_at(l, *held);
        const ::torch::AutoGradMode record_graph(true);
        record->start = start_of(record->input, record->input_requires_grad);
        record->output = record->forward(record->start);
      }
      std::vector<::torch::Tensor> wrt;
      const bool input_grad = record->start.requires_grad();
      if (input_grad) wrt.push_back(record->start);
      for (const ModuleParameter& p : self.layers_.layer(l))
        wrt.push_back(p.tensor);
      ::torch::autograd::variable_list found;
      if (record->output.requires_grad())
        found = ::torch::autograd::grad({record->output}, wrt, {grads[0]},
                                        /*retain_graph=*/false, /*create_graph=*/false,
                                        /*allow_unused=*/true);
      else
        found.resize(wrt.size()); // nothing in this call depends on a parameter
      self.hand_over(l, found, input_grad ? 1 : 0);
      if constexpr (!keeps_weights) self.release_views(l);
      ::torch::Tensor input_gradient = input_grad ? found[0] : ::torch::Tensor();
      record->output.reset();
      record->start.reset();
      record->input.reset();
      return {input_gradient, ::torch::Tensor(), ::torch::Tensor()}; // input, anchor, record
    }
  };

  ::torch::TensorOptions options() const {
    return ::torch::TensorOptions().dtype(scalar_type_of(engine_.options().compute_dtype));
  }
  static std::vector<std::int64_t> shape_of(const ModuleParameter& p) {
    return {p.shape.begin(), p.shape.end()};
  }
  static std::size_t numel_of(const ModuleParameter& p) {
    std::size_t n = 1;
    for (const std::size_t d : p.shape)
      n *= d;
    return n;
  }

  // Where the recorded forward starts: the input cut from the graph before it (its gradient is
  // returned by this call's backward), requiring a gradient when the input did.
  static ::torch::Tensor start_of(const ::torch::Tensor& input, bool requires_grad) {
    ::torch::Tensor start = input.detach();
    if (requires_grad) start.requires_grad_(true);
    return start;
  }

  // Stages 0-2: every layer's parameters view the (replicated) compute copy, wherever it is now.
  void point_at_compute_copy() {
    if constexpr (keeps_weights)
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        const LayerParameters held = engine_.acquire(l);
        point_at(l, held);
      }
  }

  // Layer l's parameters become views of the compute copy `held` holds (no copy).
  void point_at(std::size_t l, const LayerParameters& held) {
    engine_.visit_compute_type([&](auto tag) {
      using T = decltype(tag);
      T* base = const_cast<T*>(held.values<T>().data()); // the module may write it, as torch's
      std::size_t offset = 0;
      for (const ModuleParameter& p : layers_.layer(l)) {
        if (p.tensor.data_ptr() != base + offset || p.tensor.numel() == 0) {
          const ::torch::NoGradGuard no_grad;
          p.tensor.set_data(::torch::from_blob(base + offset, shape_of(p), options()));
        }
        offset += numel_of(p);
      }
    });
  }
  // Stage 3: outside a call the parameters hold nothing (the gathered layer is released).
  void release_views(std::size_t l) {
    const ::torch::NoGradGuard no_grad;
    for (const ModuleParameter& p : layers_.layer(l))
      p.tensor.set_data(::torch::empty({0}, options()));
  }

  // Copies autograd's gradients of layer l into the engine's gradient store (unused: zeros) and
  // starts its reduction.
  void hand_over(std::size_t l, const ::torch::autograd::variable_list& found, std::size_t first) {
    engine_.visit_compute_type([&](auto tag) {
      using T = decltype(tag);
      auto into = engine_.template gradients<T>(l);
      std::size_t offset = 0;
      std::size_t i = first;
      for (const ModuleParameter& p : layers_.layer(l)) {
        const ::torch::Tensor target =
            ::torch::from_blob(into.data() + offset, shape_of(p), options());
        const ::torch::Tensor& g = found[i++];
        if (g.defined())
          target.copy_(g);
        else
          target.zero_();
        offset += numel_of(p);
      }
    });
    engine_.grads_ready(l);
  }

  Engine& engine_;
  ModuleLayers layers_;
  ::torch::Tensor anchor_ = ::torch::empty({0}).requires_grad_(true);
};

} // namespace zero::torch
