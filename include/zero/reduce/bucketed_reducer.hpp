#pragma once
// BucketedReducer<Comm, Strategy, Exec>: averages gradients over the ranks while backward is still
// running. Each layer's gradient is copied into constant-size buckets (see bucket_plan.hpp) as soon
// as backward produced it; a full bucket is reduced at once, non-blocking, and the next layer's
// backward overlaps with it. Strategy AllReduceGradients leaves the full average on every rank
// (stage 0); ReduceScatterGradients leaves each rank only the part of its shard (stages 1-3).
// Layouts whose ranks own blocks of different sizes reduce each bucket with per-rank counts.
// With `wire` (ZeRO++'s qgZ), every bucket's reduce-scatter quantizes what crosses the network.
//
// Gradients are handed over as the layer's parameters in order (what backward writes); packing
// them into a bucket puts each element at its place in the layer's image (LayerImages). Results go
// to a ReduceTarget: this rank's shard (reduce-scatter) or the whole model as the replica layout
// holds it, each layer's parameters in order at its flat_base (all-reduce); written or added in
// float (gradient accumulation). A callback tells when all of a layer's buckets have landed, while
// they are likely still in cache: the gradient store computes the layer's share of the norm then.
//
// Collectives are launched in the order buckets fill, which is the same on every rank as long as
// every rank hands the layers over in the same order (backward does). A layer's gradient arrives
// all at once, so the buffer pool holds the buckets of the largest layer plus one: a whole layer
// goes out at once and reduces while the next layer's backward computes, and the memory depends on
// the widest layer, never on the depth.
//
// The packing and the delivery are run tables (zero/core/run_table.hpp), listed once per layout
// in the memory of the execution space Exec, whose kernels follow them: HostThreads runs them
// inline. Over a stream space (HostStreamSpace, CudaStreamSpace) they are queued in stream order
// instead: a layer's packing after the work that produced its gradient, a bucket's delivery to the
// target once its collective completed, and the callback's work after that. A collective starts
// once its bucket's packing ran: a communicator that orders itself after a caller stream
// (set_caller: StagedCommunicator) is pointed at this one, and any other waits on the host for an
// event after the packing. So: grads handed to add() must stay untouched until the work queued on
// the stream by then has run, and the target holds the results for work queued after finish()
// (the host reads it after an event or fence). The buckets live in Exec's memory, which the
// communicator must take (device memory for CudaStreamSpace: NcclCommunicator, or a
// StagedCommunicator over it), and so must the gradients and the target.

#include "zero/comm/communicator.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/run_table.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/reduce/bucket_plan.hpp"
#include "zero/reduce/strategy.hpp"
#include "zero/shard/layer_images.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

enum class Delivery { assign, accumulate };

// Where reduced gradients land. `accumulate` adds them to float values already there.
struct ReduceTarget {
  void* data = nullptr;
  DType dtype = DType::float32;
  std::size_t size = 0; // elements
  Delivery mode = Delivery::assign;
};

struct ReducerStats {
  std::size_t buckets = 0;          // reduced this step
  std::size_t elements = 0;         // reduced this step (all ranks' sections)
  double exposed_seconds = 0;       // the caller waited for communication
  double communication_seconds = 0; // the collectives ran (estimated from completion times)
  // The most buckets still in flight when the caller got control back: 0 means no reduction
  // overlapped the caller's work (overlap_comm false).
  std::size_t most_in_flight = 0;
  // The fraction of communication that overlapped with the caller's work (backward).
  double hidden_fraction() const noexcept {
    return communication_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / communication_seconds)
                                     : 0.0;
  }
};

template <Communicator Comm, ReduceStrategy Strategy, ExecutionSpace Exec = HostThreads>
requires accepts_space<typename Comm::memory_space, typename Exec::memory_space>
class BucketedReducer {
  using Memory = typename Exec::memory_space;

 public:
  struct Options {
    std::size_t bucket_elements = 500'000'000; // DeepSpeed's reduce_bucket_size default
    DType bucket_dtype = DType::float32;       // the reduction's element type
    ReduceOp op = ReduceOp::avg;
    // Reduce-scatter: contributions cross the network quantized to these blocks (ZeRO++'s qgZ).
    std::optional<BlockQuantization> wire = std::nullopt;
    // Reduce-scatter: false all-reduces each bucket instead and keeps this rank's part (twice the
    // bytes, the same values; DeepSpeed's reduce_scatter: false).
    bool reduce_scatter = true;
    // false waits for each bucket's collective as soon as it is launched: nothing overlaps the
    // caller's work (DeepSpeed's overlap_comm: false).
    bool overlap = true;
  };
  using LayerReduced = std::function<void(std::size_t layer)>;

  BucketedReducer(Comm& comm, const ShardLayout& layout, const LayerImages& images, Options options,
                  Exec exec = {})
      : comm_(comm), layout_(layout), images_(images), options_(options), exec_(exec),
        plan_(layout,
              std::min(options.bucket_elements, std::max<std::size_t>(1, total_flat(layout)))),
        state_(plan_.size()), arrived_(layout.layer_count(), false),
        buckets_left_(layout.layer_count(), 0) {
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      buffer_limit_ = std::max(buffer_limit_, plan_.buckets_of(l).size() + 1);
    require(layout.world_size() == comm.size(),
            "BucketedReducer: the layout is for " + std::to_string(layout.world_size()) +
                " ranks but the communicator has " + std::to_string(comm.size()));
    if (options.wire) {
      require(Strategy::collective == Collective::reduce_scatter,
              "BucketedReducer: quantized gradients (qgZ) quantize a reduce-scatter, not an "
              "all-reduce");
      require(QuantizingCommunicator<Comm>,
              "BucketedReducer: quantized gradients (qgZ) need a communicator that quantizes "
              "reduce-scatters (zero::QuantizingCommunicator)");
      require(options.op == ReduceOp::sum || options.op == ReduceOp::avg,
              "BucketedReducer: quantized gradients are summed or averaged");
      require(
          options.reduce_scatter,
          "BucketedReducer: quantized gradients (qgZ) quantize a reduce-scatter; they cannot be "
          "all-reduced instead (reduce_scatter = false)");
      options.wire->validate();
    }
    if constexpr (!VariableCountCommunicator<Comm>)
      for (std::size_t b = 0; b < plan_.size(); ++b)
        require(plan_[b].equal_counts,
                "BucketedReducer: the layout gives ranks blocks of different sizes, which needs a "
                "communicator with per-rank counts (zero::VariableCountCommunicator)");
    require_kernel<float>("bucket", options.bucket_dtype);
    list_copies(); // after the checks: it reads the plan for every rank of the communicator
  }

  BucketedReducer(const BucketedReducer&) = delete;
  BucketedReducer& operator=(const BucketedReducer&) = delete;
  ~BucketedReducer() {
    for (std::size_t b : in_flight_)
      detail::wait_quietly(state_[b].work); // never leave collectives on freed buffers
  }

  const BucketPlan& plan() const noexcept { return plan_; }
  // Memory held for buckets (constant in the model's size).
  std::size_t buffer_bytes() const noexcept {
    std::size_t total = 0;
    for (const auto& buffer : pool_)
      total += buffer.size_bytes();
    return total;
  }
  const ReducerStats& stats() const noexcept { return stats_; }

  // Starts a reduction (one micro-step): reduced gradients go to `target`, and `layer_reduced(l)`
  // is called on this thread once layer l's last bucket landed there.
  void begin(ReduceTarget target, LayerReduced layer_reduced = {}) {
    require(in_flight_.empty() && !active_,
            "BucketedReducer::begin: the previous reduction was not finished");
    const std::size_t expected = Strategy::collective == Collective::all_reduce
                                     ? total_flat(layout_)
                                     : layout_.shard_numel(comm_.rank());
    require(target.size >= expected, "BucketedReducer: the target holds " +
                                         std::to_string(target.size) + " elements but " +
                                         std::to_string(expected) + " are needed");
    require(target.mode == Delivery::assign || target.dtype == DType::float32,
            "BucketedReducer: accumulating targets must be float");
    require_kernel<float>("target", target.dtype);
    target_ = target;
    layer_reduced_ = std::move(layer_reduced);
    active_ = true;
    stats_ = {};
    std::fill(arrived_.begin(), arrived_.end(), false);
    for (std::size_t b = 0; b < plan_.size(); ++b)
      state_[b].pending_layers = plan_[b].layers.size();
    for (std::size_t l = 0; l < buckets_left_.size(); ++l)
      buckets_left_[l] = plan_.buckets_of(l).size();
  }

  // Layer `layer`'s gradient is ready: its parameters' gradients in order (the layer's numel). The
  // caller may reuse `grads` once this returns (over a stream space: in work queued after it).
  template <Element G>
  void add(std::size_t layer, View<const G, Memory> grads) {
    require(active_, "BucketedReducer::add before begin()");
    require(layer < layout_.layer_count(), "BucketedReducer: no layer " + std::to_string(layer));
    require(!arrived_[layer], "BucketedReducer: the gradient of layer " + std::to_string(layer) +
                                  " was handed over twice in one step");
    const std::size_t numel = layout_.layer(layer).numel;
    require(grads.size() == numel, "BucketedReducer: layer " + std::to_string(layer) + " has " +
                                       std::to_string(numel) + " gradient elements, got " +
                                       std::to_string(grads.size()));
    require_kernel<G>("bucket", options_.bucket_dtype);
    arrived_[layer] = true;
    poll();
    for (std::size_t b : plan_.buckets_of(layer)) {
      BucketState& s = state_[b];
      if (!s.buffer) s.buffer = acquire_buffer();
      pack(b, layer, grads);
      if (--s.pending_layers == 0) launch(b);
    }
  }

  // Waits for every bucket and delivers the results. Throws, naming them, if layers are missing.
  void finish() {
    require(active_, "BucketedReducer::finish before begin()");
    std::string missing;
    for (std::size_t l = 0; l < arrived_.size(); ++l)
      if (!arrived_[l] && layout_.layer(l).block_numel > 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(l);
    drain();
    active_ = false;
    if (!missing.empty())
      fail(ErrorKind::invalid_argument,
           "BucketedReducer::finish: no gradient was handed over for layer(s) " + missing);
  }

 private:
  // Layer `layer`'s part of a bucket: from its parameters in order to the bucket's buffer.
  struct LayerPacking {
    std::size_t layer;
    RunTable<Memory> runs;
  };
  struct BucketState {
    std::size_t pending_layers = 0;
    std::optional<std::size_t> buffer; // index into pool_
    Work work;
    std::chrono::steady_clock::time_point launched;
  };
  using Clock = std::chrono::steady_clock;

  static std::size_t total_flat(const ShardLayout& layout) {
    std::size_t total = 0;
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      total += layout.layer(l).flat_numel;
    return total;
  }

  std::size_t acquire_buffer() {
    if (free_.empty() && pool_.size() >= buffer_limit_ && !in_flight_.empty())
      complete_oldest(); // wait for a bucket to come back
    if (free_.empty()) {
      pool_.emplace_back(plan_.largest_bucket_elements() * size_of(options_.bucket_dtype),
                         uninitialized);
      free_.push_back(pool_.size() - 1);
    }
    const std::size_t index = free_.back();
    free_.pop_back();
    return index;
  }

  template <class T>
  T* buffer_of(std::size_t b) {
    return reinterpret_cast<T*>(pool_[*state_[b].buffer].data());
  }

  // f(slice, rank, position in the layer's image, position in the bucket buffer, count) for every
  // rank's part of every slice of bucket b, in buffer order within each rank's section.
  template <class F>
  void for_each_part(std::size_t b, F&& f) const {
    const Bucket& bucket = plan_[b];
    for (int r = 0; r < comm_.size(); ++r) {
      std::size_t at = bucket.section[std::size_t(r)];
      for (const BucketSlice& s : bucket.slices) {
        const std::size_t count = plan_.part(s, r);
        f(s, r, layout_.flat_range(s.layer, r).begin + s.lo, at, count);
        at += count;
      }
    }
  }

  // The run tables, once: each layer's packing into each bucket (padding zero-filled), and each
  // bucket's delivery to the target (this rank's section to its shard, or every rank's part of
  // every slice to its parameters' places in the whole model).
  void list_copies() {
    packing_.resize(plan_.size());
    delivery_.reserve(plan_.size());
    const auto rank = static_cast<std::size_t>(comm_.rank());
    for (std::size_t b = 0; b < plan_.size(); ++b) {
      const Bucket& bucket = plan_[b];
      for (std::size_t l : bucket.layers) {
        std::vector<CopyRun> runs;
        for_each_part(
            b, [&](const BucketSlice& s, int, std::size_t flat, std::size_t at, std::size_t count) {
              if (s.layer == l) images_.append_pack_runs(l, Range{flat, flat + count}, at, runs);
            });
        packing_[b].push_back({l, RunTable<Memory>(runs)});
      }
      std::vector<CopyRun> runs;
      if constexpr (Strategy::collective == Collective::reduce_scatter) {
        runs.push_back({bucket.section[rank], bucket.shard_offset[rank], bucket.counts[rank]});
      } else {
        for_each_part(
            b, [&](const BucketSlice& s, int, std::size_t flat, std::size_t at, std::size_t count) {
              images_.append_unpack_runs(s.layer, Range{flat, flat + count}, at,
                                         layout_.layer(s.layer).flat_base, runs);
            });
      }
      delivery_.emplace_back(runs);
    }
  }

  // Copies layer l's parts of bucket b in, zero-filling the layout's padding (queued over a stream
  // space).
  template <Element G>
  void pack(std::size_t b, std::size_t l, View<const G, Memory> grads) {
    const auto& packing = packing_[b];
    const auto it = std::find_if(packing.begin(), packing.end(),
                                 [l](const LayerPacking& p) { return p.layer == l; });
    visit_dtype(options_.bucket_dtype, [&](auto tag) {
      using T = decltype(tag);
      convert_along(it->runs, grads, View<T, Memory>(buffer_of<T>(b), plan_[b].elements));
    });
  }

  // Refuses, before anything changes, a conversion between From and `other` (a bucket or target
  // type) that this space has no kernel for, both ways (a device space converts float, half and
  // bfloat16 only).
  template <class From>
  void require_kernel(const char* what, DType other) const {
    visit_dtype(other, [&](auto tag) {
      using To = decltype(tag);
      constexpr bool both_ways =
          requires(const Exec& e, View<const From, Memory> f, View<To, Memory> t,
                   View<const To, Memory> tf, View<From, Memory> ft, const RunTable<Memory>& r) {
        convert_runs(e, f, t, r);
        convert_runs(e, tf, ft, r);
      };
      if constexpr (!both_ways)
        fail(ErrorKind::unsupported, std::string("BucketedReducer: ") + Exec::name +
                                         " has no kernel converting between " +
                                         to_string(dtype_of<From>) + " and the " + what + " type " +
                                         to_string(dtype_of<To>));
    });
  }

  // convert_runs on this space, or a clear error for element types it has no kernel for (a
  // device space converts float, half and bfloat16).
  template <class From, class To>
  void convert_along(const RunTable<Memory>& runs, View<const From, Memory> from,
                     View<To, Memory> to) {
    if constexpr (requires { convert_runs(exec_, from, to, runs); })
      convert_runs(exec_, from, to, runs);
    else
      fail(ErrorKind::unsupported, std::string("BucketedReducer: ") + Exec::name +
                                       " has no kernel converting " + to_string(dtype_of<From>) +
                                       " to " + to_string(dtype_of<To>));
  }

  // Over a stream space, with a communicator not ordered after the stream: the host waits until
  // the packing queued so far has run (the others are pointed at the stream: CallerScope).
  void wait_for_packing_on_the_host() {
    if constexpr (StreamSpace<Exec> && !OrderedAfterCaller<Comm, Exec>) {
      if (detail::wait_dropped("reducer.packed")) return;
      typename Exec::event_type packed;
      record(exec_, packed);
      packed.synchronize();
    }
  }

  bool direct_delivery() const noexcept {
    return Strategy::collective == Collective::reduce_scatter && options_.reduce_scatter &&
           target_.mode == Delivery::assign && target_.dtype == options_.bucket_dtype;
  }

  void launch(std::size_t b) {
    BucketState& s = state_[b];
    s.launched = Clock::now();
    wait_for_packing_on_the_host();
    const CallerScope<Comm, Exec> caller(detail::wait_dropped("reducer.caller") ? nullptr : &comm_,
                                         exec_);
    const Bucket& bucket = plan_[b];
    const auto rank = static_cast<std::size_t>(comm_.rank());
    visit_dtype(options_.bucket_dtype, [&](auto tag) {
      using T = decltype(tag);
      using Space = typename Comm::memory_space;
      View<T, Space> all(buffer_of<T>(b), bucket.elements);
      T* out = direct_delivery() ? static_cast<T*>(target_.data) + bucket.shard_offset[rank]
                                 : all.data() + bucket.section[rank];
      View<T, Space> mine(out, bucket.counts[rank]);
      if (Strategy::collective == Collective::all_reduce || !options_.reduce_scatter) {
        s.work = comm_.all_reduce(all, options_.op); // every section, this rank's among them
      } else if (options_.wire) {
        if constexpr (QuantizingCommunicator<Comm> && FloatingElement<T>)
          s.work = comm_.reduce_scatter(all, mine, bucket.counts, options_.op, *options_.wire);
      } else if (bucket.equal_counts) {
        s.work = direct_delivery() ? comm_.reduce_scatter(all, mine, options_.op)
                                   : comm_.reduce_scatter(all, options_.op);
      } else if constexpr (VariableCountCommunicator<Comm>) {
        s.work = comm_.reduce_scatter(all, mine, bucket.counts, options_.op);
      }
    });
    // A small bucket may have been reduced on this thread (MpiCommunicator's inline calls): the
    // caller waited for that much.
    stats_.exposed_seconds += std::chrono::duration<double>(Clock::now() - s.launched).count();
    in_flight_.push_back(b);
    ++stats_.buckets;
    stats_.elements += bucket.elements;
    if (!options_.overlap) drain(); // delivered before the caller goes on
    stats_.most_in_flight = std::max(stats_.most_in_flight, in_flight_.size());
  }

  // Delivers buckets that completed meanwhile, without blocking.
  void poll() {
    while (!in_flight_.empty() && state_[in_flight_.front()].work.test())
      finished(in_flight_.front(), Clock::now());
  }

  void complete_oldest() {
    const std::size_t b = in_flight_.front();
    const auto start = Clock::now();
    state_[b].work.wait();
    const auto end = Clock::now();
    stats_.exposed_seconds += std::chrono::duration<double>(end - start).count();
    finished(b, end);
  }

  void drain() {
    while (!in_flight_.empty())
      complete_oldest();
  }

  void finished(std::size_t b, Clock::time_point done) {
    in_flight_.pop_front();
    // Collectives run one after another: this one started when it was launched or when the
    // previous one ended, whichever was later.
    const auto start = std::max(state_[b].launched, last_done_);
    stats_.communication_seconds +=
        std::max(0.0, std::chrono::duration<double>(done - start).count());
    last_done_ = done;
    deliver(b);
    free_.push_back(*state_[b].buffer);
    state_[b].buffer.reset();
    for (std::size_t l : plan_[b].layers)
      if (--buckets_left_[l] == 0 && layer_reduced_) layer_reduced_(l);
  }

  // Copies bucket b's results to the target, converted or added (queued over a stream space,
  // before anything queued after it reuses the bucket's buffer).
  void deliver(std::size_t b) {
    if (direct_delivery()) return;
    visit_dtype(options_.bucket_dtype, [&](auto tag) {
      using T = decltype(tag);
      const View<const T, Memory> bucket(buffer_of<T>(b), plan_[b].elements);
      if (target_.mode == Delivery::accumulate) {
        const View<float, Memory> sums(static_cast<float*>(target_.data), target_.size);
        if constexpr (requires { accumulate_runs(exec_, bucket, sums, delivery_[b]); })
          accumulate_runs(exec_, bucket, sums, delivery_[b]);
        else
          fail(ErrorKind::unsupported, std::string("BucketedReducer: ") + Exec::name +
                                           " has no kernel adding " + to_string(dtype_of<T>) +
                                           " to float");
        return;
      }
      visit_dtype(target_.dtype, [&](auto out_tag) {
        using Out = decltype(out_tag);
        convert_along(delivery_[b], bucket,
                      View<Out, Memory>(static_cast<Out*>(target_.data), target_.size));
      });
    });
  }

  Comm& comm_;
  const ShardLayout& layout_;
  const LayerImages& images_;
  Options options_;
  Exec exec_;
  BucketPlan plan_;
  std::vector<BucketState> state_;
  std::vector<bool> arrived_;
  std::vector<std::size_t> buckets_left_;          // per layer, this micro-step
  std::vector<std::vector<LayerPacking>> packing_; // per bucket
  std::vector<RunTable<Memory>> delivery_;         // per bucket
  std::vector<Buffer<std::byte, Memory>> pool_;
  std::size_t buffer_limit_ = 2; // buffers before waiting for one to come back
  std::vector<std::size_t> free_;
  std::deque<std::size_t> in_flight_;
  ReduceTarget target_;
  LayerReduced layer_reduced_;
  bool active_ = false;
  ReducerStats stats_;
  Clock::time_point last_done_{};
  DrainOnDestruction<Exec> drain_{exec_}; // last: queued packing and deliveries run before the pool
};

} // namespace zero
