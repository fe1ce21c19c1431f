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
// Rules (docs/libtorch.md): every layer is called once per micro-step (the engine takes each
// layer's gradient once); the function's only differentiable input is `input` (a captured tensor
// that requires a gradient is refused: its gradient would be lost); call() is the only way a
// layer's parameters are used (at stage 3 they are empty outside it); a parameter a call does not
// use gets a zero gradient (torch.optim would skip it; zero's Adam decays its moments, as ZeRO
// does). Under torch::NoGradGuard, call() only runs the forward. Stage 3 replays the CPU random
// generator's state for the second forward (dropout draws the same mask); a module's buffers
// (BatchNorm's running statistics) are updated by both forwards.

#include "zero/checkpoint/run_state.hpp"
#include "zero/checkpoint/safetensors.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/report.hpp"
#include "zero/torch/module_layers.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/SequenceNumber.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
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
  fail(ErrorKind::unsupported, std::string("torch: no compute type ") + to_string(t));
}

template <class Engine>
class ShardedModule {
  static_assert(Engine::placement_type::gradients::host_accessible,
                "zero::torch: the engine must keep its compute copy and gradients in host memory "
                "(a host engine); the adapter does not support a device engine yet");

 public:
  using Function = std::function<::torch::Tensor(const ::torch::Tensor&)>;

  // Sets the engine's weights from the module's (rank 0's: collective) and points the module's
  // parameters at the engine's compute copy. The engine must have been built from layers.specs(),
  // and must outlive this object.
  ShardedModule(Engine& engine, ::torch::nn::Module& module, ModuleLayers layers)
      : engine_(engine), layers_(std::move(layers)), called_(layers_.size(), false),
        handed_(layers_.size(), false) {
    std::set<const void*> own;
    for (const ::torch::Tensor& t : module.parameters())
      own.insert(t.unsafeGetTensorImpl());
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (const ModuleParameter& p : layers_.layer(l))
        require(own.contains(p.tensor.unsafeGetTensorImpl()),
                "torch: '" + p.name +
                    "' of the layers is not a parameter of this module "
                    "(make the ModuleLayers from the module given here)");
    // A half-precision compute copy would need every call's floating inputs cast to it; not built
    // yet (docs/libtorch.md).
    require(engine_.options().compute_dtype == DType::float32,
            std::string("torch: the compute type is ") +
                to_string(engine_.options().compute_dtype) +
                "; zero::torch trains float32 modules for now (EngineOptions::compute_dtype)",
            ErrorKind::unsupported);
    require(engine_.layers() == layers_.size(),
            "torch: the engine has " + std::to_string(engine_.layers()) +
                " layers and the module's grouping " + std::to_string(layers_.size()) +
                " (build the engine from the same ModuleLayers' specs())");
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      check_engine_layer(l);
      std::vector<float> values;
      values.reserve(layers_.numel(l));
      for (const ModuleParameter& p : layers_.layer(l)) {
        const ::torch::Tensor flat = p.tensor.detach().contiguous().view(-1);
        values.insert(values.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
      }
      engine_.set_layer(l, View<const float>(values));
      if constexpr (!keeps_weights) release_views(l);
      if (layers_.numel(l) > 0) ++layers_with_gradients_;
      // A .grad() left from training the module before: from now on a defined one means autograd
      // reached the parameter outside call() (check_no_gradient_outside_calls).
      for (const ModuleParameter& p : layers_.layer(l))
        p.tensor.mutable_grad().reset();
    }
    point_at_compute_copy();
  }
  ShardedModule(const ShardedModule&) = delete;
  ShardedModule& operator=(const ShardedModule&) = delete;
  // Stages 0-2: the parameters keep the weights they last saw, as tensors of their own. Stage 3:
  // they become NaN (gathering the weights is a collective): call copy_to_module() first to keep
  // them.
  ~ShardedModule() {
    try {
      const ::torch::NoGradGuard no_grad;
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        std::optional<LayerParameters> held;
        if constexpr (keeps_weights) held.emplace(engine_.acquire(l)); // a gather in flight ends
        for (const ModuleParameter& p : layers_.layer(l))
          p.tensor.set_data(p.tensor.numel() > 0 ? p.tensor.detach().clone()
                                                 : ::torch::full(p.sizes(), NAN, options()));
      }
    } catch (const std::exception& e) { // out of memory: the views are left as they are
      std::fprintf(stderr, "zero: torch: ~ShardedModule: %s (the parameters keep their views)\n",
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
  // (token ids, say); other tensors forward reads are captured by value and must not require one.
  ::torch::Tensor call(std::size_t l, const Function& forward, const ::torch::Tensor& input) {
    if (l >= layers_.size()) // (checked before any message is built: call() is on the hot path)
      fail(ErrorKind::invalid_argument, "torch: call: no layer " + std::to_string(l) +
                                            " (layers 0-" + std::to_string(layers_.size() - 1) +
                                            ")");
    if (!input.defined())
      fail(ErrorKind::invalid_argument,
           "torch: call: " + layers_.name(l) + "'s input is an undefined tensor");
    if (!::torch::GradMode::is_enabled()) { // evaluation: the forward only
      const LayerParameters held = engine_.acquire(l);
      point_at(l, held);
      const ReleaseViews release{*this, l};
      return unaliased(l, run_function(l, forward, input));
    }
    if (called_[l])
      fail(ErrorKind::invalid_argument,
           "torch: " + layers_.name(l) +
               " is called a second time before its first call's backward; each layer runs once "
               "per micro-step (its gradient goes to the engine once)");
    auto record = c10::make_intrusive<Record>();
    record->owner = alive_;
    record->layer = l;
    record->forward = forward;
    ::torch::Tensor out = LayerCall::apply(input, anchor_, record)[0];
    called_[l] = true;
    return out;
  }
  ::torch::Tensor call(const ::torch::nn::Module& submodule, const Function& forward,
                       const ::torch::Tensor& input) {
    return call(layer_of(submodule), forward, input);
  }

  // loss * the loss scale, backward: what replaces loss.backward(). Refuses, naming the layer, a
  // parameter autograd reached outside call().
  void backward(const ::torch::Tensor& loss) {
    (loss * engine_.loss_scale()).backward();
    check_no_gradient_outside_calls();
  }
  // Uneven shares of a batch (the engine built with EngineOptions::weigh_by_samples): `loss` is the
  // mean over this rank's `samples` samples. Its gradients reach the engine as sums over them, so
  // that every sample weighs the same in the step whatever rank it was on.
  void backward(const ::torch::Tensor& loss, std::size_t samples) {
    engine_.add_samples(samples); // refused unless the engine weighs ranks by their samples
    (loss * (engine_.loss_scale() * static_cast<double>(samples))).backward();
    check_no_gradient_outside_calls();
  }
  // Replaces optimizer.step(): the engine's step (overflow check, clipping, the update of this
  // rank's shard, the new weights shared). At stages 1-2 the new weights are gathered in the
  // background: read them through call() or engine().acquire(l), which wait for them. Refuses,
  // naming them, layers whose gradient did not reach the engine in this micro-step.
  StepResult step() {
    check_no_gradient_outside_calls();
    check_micro_step_complete();
    return engine_.step();
  }

  // The fp32 master weights into tensors the module owns (a collective: the shards are gathered),
  // for a module that lives on after this object; the next call() points the layer back at the
  // engine's copy.
  void copy_to_module() {
    const ::torch::NoGradGuard no_grad;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const std::vector<float> weights = engine_.get_layer(l);
      std::size_t offset = 0;
      for (const ModuleParameter& p : layers_.layer(l)) {
        p.tensor.set_data(::torch::tensor(std::vector<float>(
                                              weights.begin() + std::ptrdiff_t(offset),
                                              weights.begin() + std::ptrdiff_t(offset + p.numel())))
                              .view(p.sizes()));
        offset += p.numel();
      }
    }
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
  // Python's model.load_state_dict(safetensors.torch.load_file(file)) takes it (strict=True for a
  // module without buffers: the engine does not hold them). Collective; rank 0 writes.
  void save_state_dict(const std::filesystem::path& file) {
    std::vector<std::vector<float>> weights;
    for (std::size_t l = 0; l < layers_.size(); ++l)
      weights.push_back(engine_.get_layer(l));
    if (engine_.rank() != 0) return;
    std::vector<NamedTensor> tensors;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      std::size_t offset = 0;
      for (const ModuleParameter& p : layers_.layer(l)) {
        tensors.push_back(
            {p.name, p.shape, View<const float>(weights[l].data() + offset, p.numel())});
        offset += p.numel();
      }
    }
    write_safetensors(file, tensors, {{"zero.source", "zero::torch::ShardedModule"}});
  }

 private:
  static constexpr bool keeps_weights = !Engine::plan_type::parameters; // stages 0-2

  // What one call's backward needs: kept in its autograd node, so it lives as long as the graph.
  struct Record : ::torch::CustomClassHolder {
    std::weak_ptr<ShardedModule*> owner; // gone: the ShardedModule was destroyed
    std::size_t layer = 0;
    Function forward;              // stage 3: run again in backward
    ::torch::Tensor start, output; // the recorded forward, from `start`
    ::torch::Tensor input;         // stage 3: to run the forward again (detached)
    std::int64_t input_version = 0;
    bool input_requires_grad = false;
    ::torch::Tensor random_state; // stage 3: the CPU generator's, before the forward
    bool handed_over = false;

    ~Record() override {
      if (const auto self = owner.lock(); self && !handed_over) (*self)->called_[layer] = false;
    }
  };

  struct LayerCall : ::torch::autograd::Function<LayerCall> {
    // `anchor` requires a gradient, so that autograd calls backward even when `input` does not.
    static ::torch::autograd::variable_list forward(::torch::autograd::AutogradContext* ctx,
                                                    const ::torch::Tensor& input,
                                                    const ::torch::Tensor& anchor,
                                                    const c10::intrusive_ptr<Record>& record) {
      (void)anchor;
      ShardedModule& self = **record->owner.lock();
      const std::size_t l = record->layer;
      const LayerParameters held = self.engine_.acquire(l);
      self.point_at(l, held);
      ::torch::Tensor out;
      if constexpr (keeps_weights) {
        const ::torch::AutoGradMode record_graph(true);
        record->start = start_of(input, input.requires_grad());
        const std::uint64_t first_node = at::sequence_number::peek();
        record->output = record->forward(record->start);
        self.check_inputs(l, *record, first_node);
        record->forward = nullptr; // its captures are not needed any more
        out = record->output.detach();
      } else {
        const ReleaseViews release{self, l};
        record->input = input.detach();
        record->input_version = input._version();
        record->input_requires_grad = input.requires_grad();
        record->random_state = random_state();
        out = self.unaliased(l, self.run_function(l, record->forward, input));
      }
      ctx->saved_data["record"] = c10::IValue::make_capsule(record);
      return {out};
    }

    static ::torch::autograd::variable_list backward(::torch::autograd::AutogradContext* ctx,
                                                     ::torch::autograd::variable_list grads) {
      const auto record =
          c10::static_intrusive_pointer_cast<Record>(ctx->saved_data["record"].toCapsule());
      const std::size_t l = record->layer;
      const auto owner = record->owner.lock();
      if (!owner)
        fail(ErrorKind::invalid_argument, "torch: the backward of layer " + std::to_string(l) +
                                              "'s call ran after its ShardedModule was destroyed");
      if (record->handed_over)
        fail(ErrorKind::unsupported, "torch: the backward of " + (**owner).layers_.name(l) +
                                         "'s call ran twice (retain_graph and a second backward "
                                         "over one forward are not supported)");
      if (::torch::GradMode::is_enabled())
        fail(ErrorKind::unsupported, "torch: backward with create_graph=true (gradients of "
                                     "gradients) is not supported");
      ShardedModule& self = **owner;
      std::optional<LayerParameters> held;
      std::optional<ReleaseViews> release;
      if constexpr (!keeps_weights) { // gather again, and record the forward this time
        if (record->input._version() != record->input_version)
          fail(ErrorKind::invalid_argument,
               "torch: the input of " + self.layers_.name(l) +
                   "'s call was modified in place before its backward (stage 3 runs the call "
                   "again from it)");
        held.emplace(self.engine_.acquire(l));
        self.point_at(l, *held);
        release.emplace(self, l);
        const RandomStateReplay replay(record->random_state); // dropout draws the same mask
        const ::torch::AutoGradMode record_graph(true);
        record->start = start_of(record->input, record->input_requires_grad);
        const std::uint64_t first_node = at::sequence_number::peek();
        record->output = self.run_function(l, record->forward, record->start);
        self.check_inputs(l, *record, first_node);
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
      record->handed_over = true;
      self.called_[l] = false;
      self.hand_over(l, found, input_grad ? 1 : 0);
      ::torch::Tensor input_gradient = input_grad ? found[0] : ::torch::Tensor();
      record->output.reset();
      record->start.reset();
      record->input.reset();
      return {input_gradient, ::torch::Tensor(), ::torch::Tensor()}; // input, anchor, record
    }
  };

  // Stage 3: the layer's parameters are emptied when this goes, whatever happened meanwhile (an
  // exception must not leave them viewing a released gather buffer).
  struct ReleaseViews {
    ShardedModule& self;
    std::size_t layer;
    ReleaseViews(ShardedModule& s, std::size_t l) : self(s), layer(l) {}
    ReleaseViews(const ReleaseViews&) = delete;
    ReleaseViews& operator=(const ReleaseViews&) = delete;
    ~ReleaseViews() {
      if constexpr (!keeps_weights) {
        try {
          self.release_views(layer);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "zero: torch: releasing layer %zu: %s\n", layer, e.what());
        }
      }
    }
  };

  // The CPU generator's state, and its replay around stage 3's second forward.
  static ::torch::Tensor random_state() {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    const std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
  struct RandomStateReplay {
    ::torch::Tensor after; // the generator's state now, restored afterwards
    explicit RandomStateReplay(const ::torch::Tensor& before) : after(random_state()) {
      set(before);
    }
    RandomStateReplay(const RandomStateReplay&) = delete;
    RandomStateReplay& operator=(const RandomStateReplay&) = delete;
    ~RandomStateReplay() {
      try {
        set(after);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "zero: torch: restoring the random state: %s\n", e.what());
      }
    }
    static void set(const ::torch::Tensor& state) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      const std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
  };

  ::torch::TensorOptions options() const {
    return ::torch::TensorOptions().dtype(scalar_type_of(engine_.options().compute_dtype));
  }

  // The engine's layer l holds the module's parameters, by name and size, in order.
  void check_engine_layer(std::size_t l) const {
    const auto members = engine_.layout().layer_parameters(l);
    const auto& mine = layers_.layer(l);
    require(members.size() == mine.size(),
            "torch: " + layers_.name(l) + " has " + std::to_string(members.size()) +
                " parameters in the engine, " + std::to_string(mine.size()) + " in the module");
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const ParameterSpec& spec = engine_.layout().parameter(members[i]);
      require(spec.name == mine[i].name && spec.numel == mine[i].numel(),
              "torch: " + layers_.name(l) + "'s parameter " + std::to_string(i) + " is '" +
                  spec.name + "' of " + std::to_string(spec.numel) + " elements in the engine, '" +
                  mine[i].name + "' of " + std::to_string(mine[i].numel()) + " in the module");
    }
  }

  // Runs layer l's function. At stage 3 only layer l's parameters hold weights inside its call, the
  // other layers' are empty, so an operation libtorch refuses there most often reads a child of
  // another layer: the error names the layer and says so. (At stages 0-2 that child's weights are
  // there, and check_inputs names it after the forward.)
  ::torch::Tensor run_function(std::size_t l, const Function& forward,
                               const ::torch::Tensor& input) const {
    if constexpr (keeps_weights) {
      return forward(input);
    } else {
      try {
        return forward(input);
      } catch (const c10::Error& e) {
        fail(ErrorKind::invalid_argument,
             "torch: " + layers_.name(l) +
                 "'s function failed at stage 3: " + e.what_without_backtrace() +
                 " (inside a call at stage 3 only its own layer's parameters hold weights, every "
                 "other layer's are empty: a child of another layer runs through its own call())");
      }
    }
  }

  // A parameter with a .grad(): autograd reached it outside every call (its child ran directly,
  // or the loss read it), so its gradient went there instead of to the engine. (At stage 3 such a
  // child fails first, in libtorch, on its empty parameters.)
  void check_no_gradient_outside_calls() const {
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (const ModuleParameter& p : layers_.layer(l))
        if (p.tensor.grad().defined())
          fail(ErrorKind::invalid_argument,
               "torch: " + layers_.name(l) + " ran outside sharded.call(): autograd gave '" +
                   p.name +
                   "' a .grad() of its own, which the engine never sees; run that child's forward "
                   "through sharded.call(" +
                   std::to_string(l) + ", function, input)");
  }

  // Every layer with elements handed its gradient over in the micro-step under way (or none did:
  // then the engine says whether the step's micro-steps are complete).
  void check_micro_step_complete() const {
    if (handed_in_micro_step_ == 0) return;
    std::string missing;
    for (std::size_t l = 0; l < layers_.size(); ++l)
      if (!handed_[l] && layers_.numel(l) > 0)
        missing += (missing.empty() ? "" : ", ") + layers_.name(l);
    fail(ErrorKind::invalid_argument,
         "torch: step(): " + missing +
             " handed no gradient to the engine in this micro-step (not called through "
             "sharded.call(), or its output did not reach the loss); every layer runs through "
             "call() once per micro-step");
  }
  void note_handed_over(std::size_t l) {
    if (layers_.numel(l) == 0) return;
    handed_[l] = true;
    if (++handed_in_micro_step_ == layers_with_gradients_) {
      std::fill(handed_.begin(), handed_.end(), false);
      handed_in_micro_step_ = 0;
    }
  }

  // Where the recorded forward starts: the input cut from the graph before it (its gradient is
  // returned by this call's backward), requiring a gradient when the input did.
  static ::torch::Tensor start_of(const ::torch::Tensor& input, bool requires_grad) {
    ::torch::Tensor start = input.detach();
    if (requires_grad) start.requires_grad_(true);
    return start;
  }

  // The graph a call recorded may reach only its start and its layer's parameters: a captured
  // tensor that requires a gradient (another layer's output or parameter) would get none.
  // `first_node`: the autograd sequence number when the call began; older nodes are outside it.
  void check_inputs(std::size_t l, const Record& record, std::uint64_t first_node) const {
    if (!record.output.grad_fn()) return;
    std::set<const ::torch::autograd::Node*> seen;
    std::vector<::torch::autograd::Node*> pending = {record.output.grad_fn().get()};
    while (!pending.empty()) {
      ::torch::autograd::Node* node = pending.back();
      pending.pop_back();
      if (!node || !seen.insert(node).second) continue;
      if (const auto* leaf = dynamic_cast<const ::torch::autograd::AccumulateGrad*>(node)) {
        const ::torch::Tensor& v = leaf->variable;
        if (v.unsafeGetTensorImpl() == record.start.unsafeGetTensorImpl() || in_layer(l, v))
          continue;
        if (v.unsafeGetTensorImpl() == anchor_.unsafeGetTensorImpl())
          fail(ErrorKind::invalid_argument, "torch: " + layers_.name(l) +
                                                "'s function calls another layer; calls do not "
                                                "nest (call the layers one after another)");
        fail(ErrorKind::invalid_argument, "torch: " + layers_.name(l) + "'s function reads " +
                                              describe(v) +
                                              ", which requires a gradient zero would not "
                                              "compute; pass it as the call's input, or detach it");
      }
      if (node->sequence_nr() < first_node)
        fail(ErrorKind::invalid_argument,
             "torch: " + layers_.name(l) +
                 "'s function reads a tensor computed before the call that requires a gradient "
                 "(another layer's output?); zero would not compute its gradient: pass it as the "
                 "call's input, or detach it");
      for (const ::torch::autograd::Edge& edge : node->next_edges())
        pending.push_back(edge.function.get());
    }
  }
  bool in_layer(std::size_t l, const ::torch::Tensor& t) const {
    for (const ModuleParameter& p : layers_.layer(l))
      if (p.tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return true;
    return false;
  }
  std::string describe(const ::torch::Tensor& t) const {
    for (std::size_t k = 0; k < layers_.size(); ++k)
      for (const ModuleParameter& p : layers_.layer(k))
        if (p.tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl())
          return "'" + p.name + "' of " + layers_.name(k);
    return "a tensor of its own";
  }

  // Stages 0-2: every layer's parameters view the (replicated) compute copy.
  void point_at_compute_copy() {
    if constexpr (keeps_weights)
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        const LayerParameters held = engine_.acquire(l);
        point_at(l, held);
      }
  }

  // Layer l's parameters become views of the compute copy `held` holds (no copy).
  void point_at(std::size_t l, const LayerParameters& held) {
    float* base = const_cast<float*>(held.values<float>().data()); // the module may write it
    std::size_t offset = 0;
    for (const ModuleParameter& p : layers_.layer(l)) {
      if (p.tensor.data_ptr() != base + offset || p.tensor.numel() == 0) {
        const ::torch::NoGradGuard no_grad;
        p.tensor.set_data(::torch::from_blob(base + offset, p.sizes(), options()));
      }
      offset += p.numel();
    }
  }
  // Stage 3: outside a call the parameters hold nothing (the gathered layer is released).
  void release_views(std::size_t l) {
    const ::torch::NoGradGuard no_grad;
    for (const ModuleParameter& p : layers_.layer(l))
      p.tensor.set_data(::torch::empty({0}, options()));
  }
  // Stage 3: an output that views the layer's weights (a function returning a parameter, or a
  // slice of one) is copied before they are released.
  ::torch::Tensor unaliased(std::size_t l, ::torch::Tensor out) const {
    if constexpr (!keeps_weights)
      for (const ModuleParameter& p : layers_.layer(l))
        if (out.defined() && out.is_alias_of(p.tensor)) return out.clone();
    return out;
  }

  // Copies autograd's gradients of layer l into the engine's gradient store (unused: zeros) and
  // starts its reduction.
  void hand_over(std::size_t l, const ::torch::autograd::variable_list& found, std::size_t first) {
    const auto into = engine_.template gradients<float>(l);
    std::size_t offset = 0;
    std::size_t i = first;
    for (const ModuleParameter& p : layers_.layer(l)) {
      const ::torch::Tensor target = ::torch::from_blob(into.data() + offset, p.sizes(), options());
      const ::torch::Tensor& g = found[i++];
      if (g.defined())
        target.copy_(g);
      else
        target.zero_();
      offset += p.numel();
    }
    engine_.grads_ready(l);
    note_handed_over(l);
  }

  Engine& engine_;
  ModuleLayers layers_;
  std::vector<bool> called_; // a call's backward has not run yet
  std::vector<bool> handed_; // the layer's gradient reached the engine in this micro-step
  std::size_t handed_in_micro_step_ = 0, layers_with_gradients_ = 0;
  ::torch::Tensor anchor_ = ::torch::empty({0}).requires_grad_(true);
  std::shared_ptr<ShardedModule*> alive_ = std::make_shared<ShardedModule*>(this);
};

} // namespace zero::torch
