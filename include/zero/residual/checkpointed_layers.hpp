#pragma once
// CheckpointedLayers: activation checkpointing (ZeRO-R) for a loop the caller writes. The caller
// describes one layer's forward and backward over float activations of a fixed size (the residual
// stream of a transformer, say), and what each layer saves for its backward; the driver decides
// what is kept. Forward keeps only each segment's input (and the last segment whole, as backward
// starts there); backward runs each earlier segment's forward again from its kept input, then its
// backward, last segment first. Without checkpointing (number_checkpoints 0) the loop is one
// segment, kept whole from forward to backward.
//
//   struct Blocks {                  // satisfies CheckpointableLayers
//     std::size_t layers() const;
//     std::size_t activation_elements() const;      // one layer's input, and its output
//     std::size_t saved_elements(std::size_t l) const;
//     void forward(std::size_t l, View<const float> in, View<float> out, View<float> saved);
//     void backward(std::size_t l, View<const float> in, View<const float> saved,
//                   View<const float> grad_out, View<float> grad_in);
//   };
//   zero::CheckpointedLayers loop(blocks, {.number_checkpoints = 4});
//   View<const float> y = loop.forward(x);  // valid until backward() returns
//   loop.backward(dy, dx);                  // dx may be empty
//
// The callbacks may acquire the layer's parameters from the engine and hand its gradients over:
// under stage 3 the recomputation acquires its layers again, and the gather follows the order it
// observed in the first step (gather/acquisition_order.hpp). A recomputed forward must produce what
// the first one did: forward must be deterministic, and randomness (dropout) must come from the
// RandomStateHook, whose state the driver saves at each segment's start and restores to recompute.
// Then checkpointing changes no number.
//
// Where the kept inputs live: whole in memory (the default); on a tier below it (kept_inputs, e.g.
// the NVMe tier); or, with partitioned activations (partition: ZeRO-R's Pa under tensor
// parallelism), as this rank's slice of each, in memory or on the tier, all-gathered whole and
// checked before backward recomputes from it (residual/partitioned_inputs.hpp).
//
// On a device: with a stream space as Exec (CudaStreamSpace, or the host stream space that stands
// in for it), every activation is in Exec's memory, the layers queue their work on its stream, and
// the driver's copies are queued there too, so that a step never waits for the device but where a
// buffer is freed (ActivationMemory; with the contiguous arena, only in a step that needs more
// than the steps before it: the first). The kept inputs stay in the device's memory, or with
// kept_inputs_in_host_memory go to pinned host memory and come back on the stream; a tier and a
// partition move host memory and are refused there. `profile`'s times are then the host's time
// to queue the work, not the device's to run it.

#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/residual/activation_memory.hpp"
#include "zero/residual/checkpoint_plan.hpp"
#include "zero/residual/partitioned_inputs.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

// Layers whose activations are in Memory (host memory, or a device's for a loop on its stream).
template <class L, class Memory>
concept CheckpointableLayersIn = requires(L& layers, const L& constant, std::size_t l,
                                          View<const float, Memory> in, View<float, Memory> out,
                                          View<const float, Memory> saved) {
  { constant.layers() } -> std::convertible_to<std::size_t>;
  { constant.activation_elements() } -> std::convertible_to<std::size_t>;
  { constant.saved_elements(l) } -> std::convertible_to<std::size_t>;
  layers.forward(l, in, out, out);
  layers.backward(l, in, saved, in, out);
};
template <class L>
concept CheckpointableLayers = CheckpointableLayersIn<L, host>;

// Where a loop's random numbers come from, so that a recomputed segment draws what its first
// forward drew: save() captures the generator's state, restore() puts it back.
template <class R>
concept RandomStateHook = requires(R& random, const typename R::state_type& state) {
  { random.save() } -> std::same_as<typename R::state_type>;
  random.restore(state);
};

// A loop without randomness.
struct NoRandomState {
  struct state_type {};
  state_type save() const noexcept { return {}; }
  void restore(const state_type&) const noexcept {}
};

// One step of a checkpointed loop, as measured (the times only with `profile`).
struct CheckpointStats {
  std::size_t recomputed_layers = 0;
  std::size_t peak_activation_bytes = 0; // the most live at once in any step so far
  // The kept inputs this rank holds in memory from forward to backward, exact (the arena's
  // cache-line rounding aside): whole inputs, slices with a partition, none with a tier or in host
  // memory (kept_inputs_in_host_memory, whose bytes are the next figure).
  std::size_t kept_input_bytes = 0;
  std::size_t kept_input_host_bytes = 0;
  // With a partition: the elements all-gathered (whole inputs, as nccl-tests counts an all-gather)
  // and the time backward waited for them, not hidden behind the segment before.
  std::size_t gathered_elements = 0;
  double gather_wait_seconds = 0;
  double forward_seconds = 0, recompute_seconds = 0, backward_seconds = 0;
};

// Exec runs the layers: HostThreads (the default; every call completes in place) or a stream
// space, whose memory the activations are in (above).
template <class Layers, RandomStateHook Random = NoRandomState, ExecutionSpace Exec = HostThreads>
requires CheckpointableLayersIn<Layers, typename Exec::memory_space>
class CheckpointedLayers {
  using Memory = typename Exec::memory_space;
  using Floats = View<float, Memory>;
  using ConstFloats = View<const float, Memory>;
  using Lifetime = ActivationLifetime;
  // Queued on a stream, or done in place: a tier and a partition read and write the inputs at once.
  static constexpr bool queued = StreamSpace<Exec>;

 public:
  CheckpointedLayers(const CheckpointedLayers&) = delete;
  CheckpointedLayers& operator=(const CheckpointedLayers&) = delete;
  // Over a stream space, a step's work may still be queued: its buffers go only after it.
  ~CheckpointedLayers() {
    if constexpr (queued) {
      try {
        exec_.fence();
      } catch (...) { // a failed stream was reported by whoever waited on it
      }
    }
  }

  CheckpointedLayers(Layers& layers, ActivationCheckpointing options, Random random = {},
                     Exec exec = {})
      : layers_(layers), options_(options), random_(std::move(random)), exec_(std::move(exec)),
        plan_(layers.layers(), options.number_checkpoints), memory_(options.contiguous_memory),
        segments_(plan_.segment_count()) {
    if (options.partition) partitioned_.emplace(*options.partition);
    if constexpr (queued)
      require(!options.kept_inputs && !options.partition,
              std::string("CheckpointedLayers over ") + Exec::name +
                  ": the kept inputs stay in its memory (or in pinned host memory, "
                  "kept_inputs_in_host_memory); a kept-input tier and partitioned activations "
                  "move host memory and are not built for a stream space",
              ErrorKind::unsupported);
    else
      require(!options.kept_inputs_in_host_memory,
              "CheckpointedLayers: kept_inputs_in_host_memory moves a device's kept inputs to the "
              "host, and this loop's memory is the host's already",
              ErrorKind::unsupported);
  }

  // Runs every layer forward from `input`; returns the last layer's output, valid until
  // backward() returns (over a stream space: queued on its stream, as the layers' work is).
  ConstFloats forward(ConstFloats input) {
    require(!in_step_, "CheckpointedLayers: forward() twice without backward()");
    check_size("forward's input", input.size());
    in_step_ = true;
    StartOverOnError guard{*this};
    stats_ = {};
    const Timer timer(options_.profile, stats_.forward_seconds);
    const std::size_t last = plan_.segment_count() - 1;
    // One segment keeps nothing. Otherwise the inputs are kept whole in memory, or elsewhere (on
    // a tier, or in slices, or both), and then two whole buffers take turns as the current one.
    KeptInputTier* tier = last > 0 ? options_.kept_inputs : nullptr;
    PartitionedInputs* partition = last > 0 ? partitioned() : nullptr;
    const bool in_host_memory = last > 0 && options_.kept_inputs_in_host_memory;
    const bool elsewhere = tier || partition || in_host_memory;
    if constexpr (queued)
      if (in_host_memory && host_kept_.size() < last * activations()) {
        if (host_kept_.size() > 0) exec_.fence(); // no queued copy uses the old buffer
        host_kept_ = Buffer<float, pinned_host>(last * activations(), uninitialized);
      }
    if (tier) tier->reserve(last, kept_elements(partition));
    if constexpr (!queued) // (a stream space has neither: refused when the loop was built)
      if (tier && partition) slice_ = memory_.take(Lifetime::step, kept_elements(partition));
    Floats spare = elsewhere ? memory_.take(Lifetime::step, whole_elements(partition)) : Floats{};
    segments_[0].input = memory_.take(Lifetime::step, whole_elements(partition));
    copy_floats(input, segments_[0].input);
    for (std::size_t s = 0; s < last; ++s) {
      segments_[s].random = random_.save();
      keep(s, tier, partition);
      ConstFloats x = segments_[s].input.first(activations());
      const Range layers = plan_.segment(s);
      for (std::size_t l = layers.begin; l < layers.end; ++l) {
        Floats out = memory_.take(Lifetime::segment, activations());
        layers_.forward(l, x, out, memory_.take(Lifetime::segment, layers_.saved_elements(l)));
        x = out;
      }
      // The segment's output is the next one's input, kept; its layers' activations are not.
      if (elsewhere) {
        segments_[s + 1].input = std::exchange(spare, segments_[s].input);
        segments_[s].input = {};
        if (tier && options_.synchronize_boundary) tier->synchronize();
      } else {
        segments_[s + 1].input = memory_.take(Lifetime::step, activations());
      }
      copy_floats(x, segments_[s + 1].input);
      end_segment();
    }
    restored_ = spare; // backward reads the inputs back into it
    output_ = run_segment(last, segments_[last].input.first(activations()));
    guard.done = true;
    return output_;
  }

  // From the gradient of the last layer's output: every layer's backward, last first; the
  // gradient of forward's input goes to `grad_input` unless it is empty.
  void backward(ConstFloats grad_output, Floats grad_input) {
    require(in_step_, "CheckpointedLayers: backward() without forward()");
    check_size("backward's gradient", grad_output.size());
    if (!grad_input.empty()) check_size("backward's input gradient", grad_input.size());
    StartOverOnError guard{*this};
    Floats grad = memory_.take(Lifetime::step, activations());
    Floats other = memory_.take(Lifetime::step, activations());
    copy_floats(grad_output, grad);
    KeptInputTier* tier = options_.kept_inputs;
    PartitionedInputs* partition = partitioned();
    const std::size_t last = plan_.segment_count() - 1;
    if constexpr (!queued)
      if (last > 0) { // bring back the first input needed while the last segment runs
        if (partition)
          gather(last - 1, tier);
        else if (tier)
          tier->prefetch(last - 1);
      }
    for (std::size_t s = plan_.segment_count(); s-- > 0;) {
      if (s < last) {
        const Timer timer(options_.profile, stats_.recompute_seconds);
        ConstFloats input = segments_[s].input;
        if constexpr (queued) {
          if (options_.kept_inputs_in_host_memory) {
            copy_floats(host_kept(s), restored_.first(activations()));
            input = restored_;
          }
        } else {
          if (partition) {
            input = gathered(s);
            if (s > 0) gather(s - 1, tier); // behind this segment's recomputation and backward
          } else if (tier) {
            tier->restore(s, restored_);
            if (s > 0) tier->prefetch(s - 1);
            input = restored_;
          }
        }
        const auto now = random_.save();
        random_.restore(segments_[s].random);
        run_segment(s, input.first(activations()));
        random_.restore(now); // what backward draws is not changed by the recomputation
        stats_.recomputed_layers += plan_.segment(s).size();
      }
      const Timer timer(options_.profile, stats_.backward_seconds);
      const Range layers = plan_.segment(s);
      for (std::size_t l = layers.end; l-- > layers.begin;) {
        const Held& held = held_[l - layers.begin];
        layers_.backward(l, held.input, held.saved, grad, other);
        std::swap(grad, other);
      }
      end_segment();
      if (tier && options_.synchronize_boundary) tier->synchronize();
    }
    if (!grad_input.empty()) copy_floats(grad, grad_input);
    stats_.peak_activation_bytes = memory_.peak_live_bytes();
    if (memory_.frees_at_step_end()) exec_.fence(); // no queued work reads what is freed
    guard.done = true;
    memory_.end_step();
    in_step_ = false;
  }

  const CheckpointPlan& plan() const noexcept { return plan_; }
  const ActivationMemory<Memory>& memory() const noexcept { return memory_; }
  // The last step's figures (complete once its backward returned).
  const CheckpointStats& stats() const noexcept { return stats_; }
  Random& random() noexcept { return random_; }

 private:
  struct Segment {
    Floats input;           // kept through the step (kept elsewhere: while it is the current one)
    View<float> slice;      // with a partition and no tier: this rank's slice of the input
    std::uint64_t hash = 0; // with a partition: of the whole input, to check the gathered one
    typename Random::state_type random{};
  };
  struct Held { // a layer of the segment whose backward comes next
    ConstFloats input;
    ConstFloats saved;
  };
  // A layer that throws leaves the step unfinished: its memory is given back, and the next
  // forward() starts a new step.
  struct StartOverOnError {
    CheckpointedLayers& loop;
    bool done = false;
    ~StartOverOnError() {
      if (done) return;
      if (loop.partitioned_) loop.partitioned_->wait_quietly(); // its buffers go below
      try {
        loop.exec_.fence(); // nor does queued work
      } catch (...) {
      }
      loop.memory_.abandon_step();
      loop.in_step_ = false;
    }
  };
  struct Timer {
    Timer(bool on, double& into) : on_(on), into_(into), start_(std::chrono::steady_clock::now()) {}
    ~Timer() {
      if (on_)
        into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    bool on_;
    double& into_;
    std::chrono::steady_clock::time_point start_;
  };

  std::size_t activations() const { return layers_.activation_elements(); }
  void check_size(const char* what, std::size_t size) const {
    require(size == activations(), std::string("CheckpointedLayers: ") + what + " has " +
                                       std::to_string(size) + " elements, the layers take " +
                                       std::to_string(activations()));
  }
  void copy_floats(ConstFloats from, Floats to) const {
    if constexpr (queued)
      copy(exec_, from, to); // the space's own, found by its type
    else
      std::copy(from.begin(), from.end(), to.begin());
  }
  // Over a stream space: to and from pinned host memory, queued.
  void copy_floats(ConstFloats from, View<float, pinned_host> to) const requires queued {
    copy(exec_, from, to);
  }
  void copy_floats(View<const float, pinned_host> from, Floats to) const requires queued {
    copy(exec_, from, to);
  }
  // Over a stream space with kept_inputs_in_host_memory: segment s's kept input.
  View<float, pinned_host> host_kept(std::size_t s) {
    return host_kept_.view().subview(s * activations(), activations());
  }
  // Ends the segment, first waiting for the stream where a buffer is freed.
  void end_segment() {
    if (memory_.frees_at_segment_end()) exec_.fence();
    memory_.end_segment();
  }

  PartitionedInputs* partitioned() { return partitioned_ ? &*partitioned_ : nullptr; }
  // A kept input as it is stored: this rank's slice with a partition, else whole.
  std::size_t kept_elements(const PartitionedInputs* partition) const {
    return partition ? partition->slice_elements(activations()) : activations();
  }
  // A buffer that holds a whole input: with a partition, every rank's slice, padding included.
  std::size_t whole_elements(const PartitionedInputs* partition) const {
    return partition ? partition->whole_elements(activations()) : activations();
  }

  // Keeps segment s's input (its current buffer) until backward: whole in memory, or its slice
  // with a partition, and on the tier when there is one.
  void keep(std::size_t s, KeptInputTier* tier, PartitionedInputs* partition) {
    if constexpr (queued) {
      if (options_.kept_inputs_in_host_memory) {
        copy_floats(segments_[s].input.first(activations()), host_kept(s));
        stats_.kept_input_host_bytes += activations() * sizeof(float);
      } else {
        stats_.kept_input_bytes += activations() * sizeof(float); // whole, in the device's memory
      }
    } else {
      keep_elsewhere(s, tier, partition);
    }
  }
  void keep_elsewhere(std::size_t s, KeptInputTier* tier,
                      PartitionedInputs* partition) requires(!queued) {
    View<const float> kept = segments_[s].input.first(activations());
    if (partition) {
      View<float> slice = tier ? slice_ : memory_.take(Lifetime::step, kept_elements(partition));
      segments_[s].hash = partition->cut(kept, slice);
      if (!tier) segments_[s].slice = slice;
      kept = slice;
    }
    if (tier)
      tier->keep(s, kept);
    else
      stats_.kept_input_bytes += kept.size() * sizeof(float);
  }

  // With a partition: the whole buffer segment s is recomputed from. Two take turns, so that the
  // next input can be gathered while a segment runs from the other: the spare of forward
  // (restored_), and the buffer the last segment ran from, free once its backward is done.
  Floats whole_buffer(std::size_t s) {
    const std::size_t last = plan_.segment_count() - 1;
    return (last - 1 - s) % 2 == 0 ? restored_ : segments_[last].input;
  }
  // Starts gathering segment s's input whole from every rank's slice (read back from the tier
  // first, when there is one).
  void gather(std::size_t s, KeptInputTier* tier) requires(!queued) {
    View<const float> slice = segments_[s].slice;
    if (tier) {
      tier->restore(s, slice_);
      if (s > 0) tier->prefetch(s - 1);
      slice = slice_;
    }
    const View<float> whole = whole_buffer(s);
    partitioned_->start_gather(slice, whole, segments_[s].hash);
    stats_.gathered_elements += whole.size();
  }
  // Segment s's input, once its gather is done and checked against every rank's forward input.
  View<const float> gathered(std::size_t s) requires(!queued) {
    const View<float> whole = whole_buffer(s).first(activations());
    stats_.gather_wait_seconds += partitioned_->finish_gather(s, whole);
    return whole;
  }

  // Runs segment s forward from `input`, keeping every layer's input and saved state for its
  // backward; returns the segment's output.
  ConstFloats run_segment(std::size_t s, ConstFloats input) {
    const Range layers = plan_.segment(s);
    held_.resize(layers.size());
    ConstFloats x = input;
    for (std::size_t l = layers.begin; l < layers.end; ++l) {
      Floats out = memory_.take(Lifetime::segment, activations());
      Floats saved = memory_.take(Lifetime::segment, layers_.saved_elements(l));
      layers_.forward(l, x, out, saved);
      held_[l - layers.begin] = {x, saved};
      x = out;
    }
    return x;
  }

  Layers& layers_;
  ActivationCheckpointing options_;
  Random random_;
  Exec exec_;
  CheckpointPlan plan_;
  ActivationMemory<Memory> memory_;
  std::vector<Segment> segments_;
  std::vector<Held> held_;
  ConstFloats output_;
  Floats restored_;                      // kept elsewhere: the input being recomputed from
  Buffer<float, pinned_host> host_kept_; // kept_inputs_in_host_memory: every kept input
  View<float> slice_; // with a partition and a tier: a slice on its way to or from the tier
  std::optional<PartitionedInputs> partitioned_; // with a partition
  CheckpointStats stats_;
  bool in_step_ = false;
};

} // namespace zero
