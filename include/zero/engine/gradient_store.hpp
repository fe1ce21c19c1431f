#pragma once
// GradientStore<T, Reduced, Written, Comm, Exec>: where gradients are written, accumulated and
// reduced. Written says how the gradient backward writes is kept (sharded: stages 2/3 keep none
// of it whole), Reduced how the reduced gradient is (sharded: stages 1-3), engine/kept.hpp.
//   - Backward writes a layer's gradient (its parameters in order, compute type T) into the full
//     gradient (stages 0/1, a replica) or into a scratch buffer (stages 2/3, which keep none).
//   - grads_ready hands it to the reducer at once: reduce-scatter into this rank's shard through
//     buckets (stages 1-3, BucketedReducer; all-reduce and keep the shard with reduce_scatter
//     false), or all-reduce where it lies (stage 0, InPlaceAllReduce), overlapping the rest of
//     backward unless overlap_comm is false.
//   - With gradient accumulation, stages 2/3 reduce every micro-step into float accumulators;
//     stages 0/1 add locally and reduce once per step, unless deterministic results are asked
//     for: then they reduce every micro-step too, summing in the same order as 2/3.
// The reduced gradient is what the optimizer reads: the whole model (stage 0) or this rank's
// shard, in the compute type or float. Each layer's share of the global norm (the sum of squares
// of this rank's block) is taken as soon as the layer's last bucket landed, while it is likely
// in cache, so the step does not make a pass of its own; the sums are added in layer order, which
// keeps the norm bitwise the same for every stage and bucket size.
//
// Over a stream space (Exec) the local accumulation, the reducer's packing and delivery and the
// layers' sums are queued in stream order; the host waits only where it reads or writes itself.
// The gradients may live in the stream space's memory (device memory over CudaStreamSpace,
// device_twin over DeviceTwinSpace): backward writes them with work on the stream, every pass over
// them is queued there, and stage 0's in-place all-reduce starts after that work (its communicator
// pointed at the stream). In host-accessible memory backward may write gradients(l) from the host:
// gradients(l) then returns once the work queued on a gradient by the previous ready() has run, as
// a kernel on the stream would be ordered after it.

#include "zero/core/buffer.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/host_stream_space.hpp" // accumulate over HostStreamSpace
#include "zero/core/run_table.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/engine/detail/layer_scratch.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/micro_steps.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/precision/grad_norm.hpp"
#include "zero/precision/stream_checks.hpp" // the norm over HostStreamSpace
#include "zero/reduce/bucketed_reducer.hpp"
#include "zero/reduce/in_place_all_reduce.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace zero {

template <Element T, KeptState Reduced, KeptState Written, Communicator Comm, ExecutionSpace Exec>
requires std::same_as<typename Reduced::space, typename Written::space> &&
    (HostAccessibleSpace<typename Reduced::space> ||
     (StreamSpace<Exec> &&
      std::same_as<typename Reduced::space, typename Exec::memory_space>)) class GradientStore {
  using Memory = typename Reduced::space;
  using ViewMemory = HandedOutMemory<Memory>; // of the views handed out and passed on
  using Strategy = std::conditional_t<Reduced::sharded, ReduceScatterGradients, AllReduceGradients>;
  using Replica = ReplicatedIn<typename Reduced::space>;
  // What a rank reduces into: its shard, or (stage 0) the whole model.
  using Owned = typename Reduced::policy;
  template <class U>
  using OwnedTensor = ShardedTensor<U, Owned>;

 public:
  GradientStore(Comm& shard, const ModelLayout& model, const EngineOptions& options, Exec exec)
      : comm_(shard), model_(model), exec_(exec), scratch_(model.layers(), largest_layer(model)),
        layer_sums_(model.layers(), 0.0), summed_(model.layers(), false),
        queued_sums_(model.layers()) {
    // The options were agreed before the stores are built: every rank refuses alike.
    require_on_every_rank(
        !options.quantized_gradients || Reduced::sharded,
        "engine: quantized_gradients (zero_quantized_gradients, ZeRO++'s qgZ) quantizes the "
        "gradients' reduce-scatter, and stage 0 all-reduces them; use stage 1, 2 or 3");
    // In device memory the norm's tables are built here, not while backward runs (their upload
    // waits for the device).
    if constexpr (!Memory::host_accessible && !Reduced::sharded)
      for (std::size_t l = 0; l < model.layers(); ++l)
        if (!model.images.in_order(l)) my_block_runs(l);
    const bool accumulating = options.gradient_accumulation_steps > 1;
    accumulate_locally_ = accumulating && !Written::sharded && !options.deterministic;
    if constexpr (!Written::sharded) written_.emplace(shard, model.replica, layout_agreed);
    DType bucket_dtype = options.reduction_dtype();
    ReduceTarget target;
    if (accumulate_locally_) {
      accumulator_.emplace(shard, model.replica, layout_agreed);
      bucket_dtype = DType::float32;
      if constexpr (Reduced::sharded)
        target = owned_target(make_owned<float>(), Delivery::assign);
      else
        target = owned_target(&*accumulator_, Delivery::assign); // reduced in place
    } else if (accumulating) {
      target = owned_target(make_owned<float>(), Delivery::accumulate);
    } else if (!Reduced::sharded && bucket_dtype == dtype_of<T>) {
      if constexpr (!Reduced::sharded) {
        // Stage 0 reduces the gradient where backward wrote it: no bucket copies.
        target = owned_target(&*written_, Delivery::assign);
        in_place_ = std::make_unique<InPlaceAllReduce<Comm, T, Exec>>(
            shard, *model.sharded, handed_out(written_->local()), options.reduce_bucket_elements,
            ReduceOp::avg, options.overlap_comm, exec);
        target_ = target;
        return;
      }
    } else if (bucket_dtype == DType::float32) {
      target = owned_target(make_owned<float>(), Delivery::assign);
    } else {
      target = owned_target(make_owned<T>(), Delivery::assign);
    }
    target_ = target;
    reducer_ = std::make_unique<Reducer>(
        shard, *model.sharded, model.images,
        typename Reducer::Options{options.reduce_bucket_elements, bucket_dtype, ReduceOp::avg,
                                  Reduced::sharded ? options.gradient_quantization() : std::nullopt,
                                  options.reduce_scatter, options.overlap_comm},
        exec);
  }

  GradientStore(const GradientStore&) = delete;
  GradientStore& operator=(const GradientStore&) = delete;

  // Where backward writes layer l's gradient (its parameters in order): every element. Over a
  // stream space, in host memory, once the queued work that reads the gradients handed over so far
  // has run; in the space's memory at once (backward's writes are queued after that work).
  View<T, ViewMemory> gradients(std::size_t l) {
    if constexpr (StreamSpace<Exec> && Memory::host_accessible)
      if (!detail::wait_dropped("gradients.handed_over")) handed_over_.last.synchronize();
    return gradient_buffer(l);
  }

  // `f(l)` is called once layer l's reduced block is final (in the last micro-step, when its last
  // bucket landed; over a stream space in stream order, after its delivery and its share of the
  // norm are queued), on the thread that hands the gradients over: ZeRO-Offload sends the block to
  // the host from there, while backward goes on. Layers the reducer has no bucket of are not
  // reported. The reduced gradient may still change afterwards only in average_over_replicas().
  void on_layer_reduced(std::function<void(std::size_t)> f) { layer_reduced_ = std::move(f); }

  // Layer l's gradient of this micro-step is complete: it is reduced (or accumulated) now.
  void ready(std::size_t l, MicroSteps::Arrival arrival) {
    if (arrival.opens_micro_step) begin_micro_step(arrival.in_last_micro_step);
    const View<const T, ViewMemory> grads = gradient_buffer(l);
    if (accumulate_locally_) {
      const View<float, ViewMemory> sum = handed_out(accumulator_->block(l)).first(grads.size());
      accumulate(exec_, grads, sum);
      if (arrival.in_last_micro_step) reducer_->add(l, View<const float, ViewMemory>(sum));
    } else if (in_place_) {
      in_place_->add(l);
    } else {
      reducer_->add(l, grads);
    }
    if constexpr (StreamSpace<Exec> && Memory::host_accessible) record(exec_, handed_over_.last);
    if constexpr (Written::sharded) scratch_.release(l);
  }

  // Waits for the reduction of the last micro-step (over a stream space, its deliveries are queued
  // for the work queued after them).
  void finish() {
    if (!reducing_) return;
    reducing_ = false;
    if (in_place_)
      in_place_->finish();
    else
      reducer_->finish();
  }

  // shard_within plans: every shard group reduced its own ranks' gradients; averaging the shards
  // over the replica group completes the average over all ranks. The norm is taken afterwards.
  void average_over_replicas(Comm& replica) {
    // Deliveries and sums queued as layers landed write and read the reduced gradient this averages
    // in place: they must have run first (the sums are taken again afterwards).
    if constexpr (StreamSpace<Exec>)
      if (!detail::wait_dropped("gradients.replicas")) exec_.fence();
    visit_reduced(
        [&](auto& reduced) { replica.all_reduce(reduced.local(), ReduceOp::avg).wait(); });
    std::fill(summed_.begin(), summed_.end(), false);
  }

  // The sum of squares of this rank's blocks of the reduced gradient, layer by layer in order.
  double local_sum_of_squares() {
    for (std::size_t l = 0; l < layer_sums_.size(); ++l)
      if (!summed_[l]) sum_layer(l);
    if constexpr (StreamSpace<Exec>) read_queued_sums();
    double sum = 0.0;
    for (double layer_sum : layer_sums_)
      sum += layer_sum;
    return sum;
  }

  // f(reduced) with the reduced gradient's tensor (compute type or float): block(l) is what this
  // rank updates of layer l.
  template <class F>
  decltype(auto) visit_reduced(F&& f) {
    return std::visit([&](auto* tensor) -> decltype(auto) { return f(*tensor); }, reduced_);
  }

  // After the step: accumulators start from zero, norms are taken anew.
  void clear() {
    if (accumulator_) zero_fill(handed_out(accumulator_->local()));
    if (target_.mode == Delivery::accumulate)
      zero_fill(View<std::byte, ViewMemory>(static_cast<std::byte*>(target_.data),
                                            target_.size * size_of(target_.dtype)));
    std::fill(summed_.begin(), summed_.end(), false);
  }

  const ReducerStats& stats() const noexcept {
    return in_place_ ? in_place_->stats() : reducer_->stats();
  }
  std::size_t gradient_bytes() const noexcept {
    std::size_t bytes = 0;
    if (written_) bytes += written_->bytes_resident();
    if (accumulator_) bytes += accumulator_->bytes_resident();
    if (owned_float_) bytes += owned_float_->bytes_resident();
    if (owned_compute_) bytes += owned_compute_->bytes_resident();
    return bytes;
  }
  std::size_t buffer_bytes() const noexcept {
    return (reducer_ ? reducer_->buffer_bytes() : 0) + scratch_.bytes();
  }

 private:
  View<T, ViewMemory> gradient_buffer(std::size_t l) {
    const std::size_t numel = model_.sharded->layer(l).numel;
    if (numel == 0) return {}; // nothing to write, nothing to hand over
    if constexpr (!Written::sharded)
      return handed_out(written_->block(l)).first(numel);
    else
      return handed_out(scratch_[l].view()).first(numel);
  }

  static std::size_t largest_layer(const ModelLayout& model) {
    std::size_t largest = 0;
    for (std::size_t l = 0; l < model.layers(); ++l)
      largest = std::max(largest, model.sharded->layer(l).numel);
    return largest;
  }
  // On the host in host memory (nothing queued reads it: the step has waited), else queued.
  template <class U>
  void zero_fill(View<U, ViewMemory> v) {
    if constexpr (Memory::host_accessible) {
      if (!v.empty()) std::memset(static_cast<void*>(v.data()), 0, v.size_bytes());
    } else {
      fill_zero(exec_, v);
    }
  }

  template <class U>
  OwnedTensor<U>* make_owned() {
    auto& slot = [&]() -> auto& {
      if constexpr (std::is_same_v<U, float>)
        return owned_float_;
      else
        return owned_compute_;
    }
    ();
    slot.emplace(comm_, std::is_same_v<Owned, Replica> ? model_.replica : model_.sharded,
                 layout_agreed);
    return &*slot;
  }
  template <class U>
  ReduceTarget owned_target(OwnedTensor<U>* tensor, Delivery mode) {
    if constexpr (std::is_same_v<U, T>)
      reduced_.template emplace<0>(tensor);
    else
      reduced_.template emplace<1>(tensor);
    const View<U, Memory> all = tensor->local();
    return {all.data(), dtype_of<U>, all.size(), mode};
  }

  void begin_micro_step(bool boundary) {
    finish(); // the previous micro-step's buckets, if still in flight
    if (accumulate_locally_ && !boundary) return;
    std::function<void(std::size_t)> on_layer;
    if (boundary)
      on_layer = [this](std::size_t l) {
        sum_layer(l);
        if (layer_reduced_) layer_reduced_(l);
      };
    if (in_place_)
      in_place_->begin(std::move(on_layer));
    else
      reducer_->begin(target_, std::move(on_layer));
    reducing_ = true;
  }

  // Layer l's share of the norm: the sum of squares of this rank's block, the same elements in the
  // same order under every stage.
  void sum_layer(std::size_t l) {
    visit_reduced([&](auto& reduced) {
      using G = typename std::remove_reference_t<decltype(reduced)>::value_type;
      if constexpr (GradientElement<G>) {
        const View<const G, ViewMemory> owned = handed_out(std::as_const(reduced).block(l));
        if constexpr (Reduced::sharded) {
          sum_block(l, owned);
        } else if (model_.images.in_order(l)) {
          const Range mine = model_.my_flat_range(l);
          sum_block(l, owned.subview(mine.begin, mine.size()));
        } else {
          // This rank's block of an out-of-order image, packed along the layer's run table into
          // a scratch block (in stream order, after the deliveries; the next layer's packing
          // into it is queued after this sum) and summed there.
          const RunTable<ViewMemory>& runs = my_block_runs(l); // first: it allocates the scratch
          const View<G, ViewMemory> block(reinterpret_cast<G*>(block_scratch_.data()),
                                          model_.my_block_size(l));
          convert_runs(exec_, owned, block, runs);
          sum_block(l, View<const G, ViewMemory>(block));
        }
      }
    });
    summed_[l] = true;
  }

  // Stages 0/1, out-of-order images: the copies that pack this rank's block of layer l from the
  // layer's parameters in order, listed at the first use (with the scratch they pack into).
  const RunTable<ViewMemory>& my_block_runs(std::size_t l) {
    if (my_block_runs_.empty()) {
      std::size_t largest = 0;
      for (std::size_t k = 0; k < model_.layers(); ++k)
        largest = std::max(largest, model_.my_block_size(k));
      block_scratch_ = Buffer<std::byte, ViewMemory>(largest * std::max(sizeof(float), sizeof(T)));
      my_block_runs_.resize(model_.layers()); // after the scratch: it marks both as made
    }
    if (my_block_runs_[l].empty() && model_.my_block_size(l) > 0) {
      std::vector<CopyRun> runs;
      model_.images.append_pack_runs(l, model_.my_flat_range(l), 0, runs);
      my_block_runs_[l] = RunTable<ViewMemory>(runs);
    }
    return my_block_runs_[l];
  }

  // Layer l's share of the norm from a contiguous block: on the host, or, over a stream space,
  // queued into the layer's slot (the host's bits: the slot starts at zero and gets one sum), read
  // back with every other queued slot by read_queued_sums(). Under tensor parallelism a tensor rank
  // other than 0 sums only the block's pieces outside the replicated parameters
  // (ModelLayout::norm_pieces), one after the other into the same sum.
  template <class G>
  void sum_block(std::size_t l, View<const G, ViewMemory> block) {
    const std::vector<Range>* pieces = model_.norm_pieces(l);
    if constexpr (StreamSpace<Exec>) {
      auto& q = queued_sums_;
      const auto slot = q.slots.view().subview(l, 1);
      fill_zero(exec_, slot);
      if (pieces == nullptr)
        accumulate_sum_of_squares(exec_, block, slot);
      else
        for (const Range& piece : *pieces)
          accumulate_sum_of_squares(exec_, block.subview(piece.begin, piece.size()), slot);
      q.queued[l] = true;
    } else if (pieces == nullptr) {
      layer_sums_[l] = sum_of_squares(block);
    } else {
      double sum = 0.0;
      for (const Range& piece : *pieces)
        sum += sum_of_squares(block.subview(piece.begin, piece.size()));
      layer_sums_[l] = sum;
    }
  }

  // Over a stream space: the queued slots copied to pinned host memory after one event, and their
  // sums taken where the host did not sum the layer itself.
  void read_queued_sums() {
    auto& q = queued_sums_;
    copy(exec_, std::as_const(q.slots).view(), q.host.view());
    typename Exec::event_type read_back;
    record(exec_, read_back);
    if (!detail::wait_dropped("gradients.sums_read_back")) read_back.synchronize();
    for (std::size_t l = 0; l < layer_sums_.size(); ++l)
      if (q.queued[l]) {
        layer_sums_[l] = q.host.view()[l];
        q.queued[l] = false;
      }
  }

  // One sum-of-squares slot per layer in the space's memory, their copy in pinned host memory, and
  // which slots hold a sum not yet read (over a stream space; nothing otherwise).
  // Over a stream space: the point after the work queued on the gradients handed over so far.
  template <class E>
  struct HandedOver {};
  template <StreamSpace E>
  struct HandedOver<E> {
    typename E::event_type last;
  };

  template <class E>
  struct QueuedSums {
    explicit QueuedSums(std::size_t) {}
  };
  template <StreamSpace E>
  struct QueuedSums<E> {
    explicit QueuedSums(std::size_t layers) : slots(layers), host(layers), queued(layers, false) {}
    Buffer<double, typename E::memory_space> slots;
    Buffer<double, pinned_host> host;
    std::vector<bool> queued;
  };

  Comm& comm_;
  const ModelLayout& model_;
  Exec exec_;
  std::optional<ShardedTensor<T, Replica>> written_;         // stages 0/1: the full gradient
  detail::LayerScratch<T, ViewMemory> scratch_;              // stages 2/3
  std::optional<ShardedTensor<float, Replica>> accumulator_; // stages 0/1, accumulating locally
  std::optional<OwnedTensor<float>> owned_float_;
  std::optional<OwnedTensor<T>> owned_compute_;
  std::variant<OwnedTensor<T>*, OwnedTensor<float>*> reduced_{};
  bool accumulate_locally_ = false;
  ReduceTarget target_;
  using Reducer = BucketedReducer<Comm, Strategy, Exec>;
  std::unique_ptr<Reducer> reducer_; // or, for stage 0:
  std::unique_ptr<InPlaceAllReduce<Comm, T, Exec>> in_place_;
  bool reducing_ = false;
  std::function<void(std::size_t)> layer_reduced_; // on_layer_reduced()
  std::vector<double> layer_sums_;
  std::vector<RunTable<ViewMemory>> my_block_runs_; // stages 0/1, out-of-order: my_block_runs()
  Buffer<std::byte, ViewMemory> block_scratch_;
  std::vector<bool> summed_;
  [[no_unique_address]] QueuedSums<Exec> queued_sums_;
  [[no_unique_address]] HandedOver<Exec> handed_over_;
  DrainOnDestruction<Exec> drain_{exec_}; // last: queued sums finish before the gradients go
};

} // namespace zero
