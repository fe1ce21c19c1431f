#pragma once
// BucketedReducer<Comm, Strategy>: averages gradients over the ranks while backward is still
// running. Each layer's gradient is copied into constant-size buckets (see bucket_plan.hpp) as soon
// as backward produced it; a full bucket is reduced at once, non-blocking, and the next layer's
// backward overlaps with it. Strategy AllReduceGradients leaves the full average on every rank
// (stage 0); ReduceScatterGradients leaves each rank only the part of its shard (stages 1-3).
//
// Results go to a ReduceTarget: the model's flat gradient (all-reduce: every layer's flat buffer
// end to end, LayerInfo::flat_base) or this rank's shard (reduce-scatter), written or added in
// float (for gradient accumulation).
//
// Collectives are launched in the order buckets fill, which is the same on every rank as long as
// every rank hands the layers over in the same order (backward does). A layer's gradient arrives
// all at once, so the buffer pool holds the buckets of the largest layer plus one: a whole layer
// goes out at once and reduces while the next layer's backward computes, and the memory depends on
// the widest layer, never on the depth. Orders other than backward's may need more buffers
// (they are allocated then).

#include "zero/comm/communicator.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/reduce/bucket_plan.hpp"
#include "zero/reduce/strategy.hpp"
#include "zero/shard/shard_layout.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
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
  std::size_t elements = 0;         // reduced this step (all ranks' blocks)
  double exposed_seconds = 0;       // the caller waited for communication
  double communication_seconds = 0; // the collectives ran (estimated from completion times)
  // The fraction of communication that overlapped with the caller's work (backward).
  double hidden_fraction() const noexcept {
    return communication_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / communication_seconds)
                                     : 0.0;
  }
};

template <Communicator Comm, ReduceStrategy Strategy>
class BucketedReducer {
 public:
  struct Options {
    std::size_t bucket_elements = 500'000'000; // DeepSpeed's reduce_bucket_size default
    DType bucket_dtype = DType::float32;       // the reduction's element type
    ReduceOp op = ReduceOp::avg;
  };

  BucketedReducer(Comm& comm, const ShardLayout& layout, Options options)
      : comm_(comm), layout_(layout), options_(options),
        plan_(layout,
              std::min(options.bucket_elements, std::max<std::size_t>(1, total_flat(layout)))),
        state_(plan_.size()), arrived_(layout.layer_count(), false) {
    for (std::size_t g = 0; g < layout.layer_count(); ++g)
      buffer_limit_ = std::max(buffer_limit_, plan_.buckets_of(g).size() + 1);
    require(layout.world_size() == comm.size(),
            "BucketedReducer: the layout is for " + std::to_string(layout.world_size()) +
                " ranks but the communicator has " + std::to_string(comm.size()));
    reset_counts();
  }

  BucketedReducer(const BucketedReducer&) = delete;
  BucketedReducer& operator=(const BucketedReducer&) = delete;
  ~BucketedReducer() {
    for (std::size_t b : in_flight_)
      state_[b].work.wait(); // never leave collectives on freed buffers
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

  // Starts a reduction (one micro-step): reduced gradients go to `target`.
  void begin(ReduceTarget target) {
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
    target_ = target;
    active_ = true;
    stats_ = {};
    std::fill(arrived_.begin(), arrived_.end(), false);
    reset_counts();
  }

  // Layer `layer`'s gradient is ready: its parameters' gradients end to end (the layer's numel).
  // The caller may reuse `grads` once this returns.
  template <Element G>
  void add(std::size_t layer, View<const G> grads) {
    require(active_, "BucketedReducer::add before begin()");
    require(layer < layout_.layer_count(), "BucketedReducer: no layer " + std::to_string(layer));
    require(!arrived_[layer], "BucketedReducer: the gradient of layer " + std::to_string(layer) +
                                  " was handed over twice in one step");
    const std::size_t numel = layout_.layer(layer).numel;
    require(grads.size() == numel, "BucketedReducer: layer " + std::to_string(layer) + " has " +
                                       std::to_string(numel) + " gradient elements, got " +
                                       std::to_string(grads.size()));
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
    for (std::size_t g = 0; g < arrived_.size(); ++g)
      if (!arrived_[g] && layout_.layer(g).block_numel > 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(g);
    if (!missing.empty()) {
      drain();
      active_ = false;
      fail(ErrorKind::invalid_argument,
           "BucketedReducer::finish: no gradient was handed over for layer(s) " + missing);
    }
    drain();
    active_ = false;
  }

 private:
  struct BucketState {
    std::size_t pending_layers = 0;
    std::optional<std::size_t> buffer; // index into pool_
    Work work;
    std::chrono::steady_clock::time_point launched;
  };
  using Clock = std::chrono::steady_clock;

  static std::size_t total_flat(const ShardLayout& layout) {
    std::size_t total = 0;
    for (std::size_t g = 0; g < layout.layer_count(); ++g)
      total += layout.layer(g).flat_numel;
    return total;
  }

  void reset_counts() {
    for (std::size_t b = 0; b < plan_.size(); ++b)
      state_[b].pending_layers = plan_[b].layers.size();
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

  // Copies layer g's slices of bucket b in, rank-major, zero-filling the layout's padding.
  template <Element G>
  void pack(std::size_t b, std::size_t layer, View<const G> grads) {
    const Bucket& bucket = plan_[b];
    const std::size_t block = layout_.layer(layer).block_numel;
    visit_dtype(options_.bucket_dtype, [&](auto tag) {
      using T = decltype(tag);
      T* base = buffer_of<T>(b);
      std::size_t offset = 0;
      for (const BucketSlice& s : bucket.slices) {
        if (s.layer == layer)
          for (int r = 0; r < comm_.size(); ++r) {
            T* dst = base + std::size_t(r) * bucket.block_elements + offset;
            const std::size_t first = std::size_t(r) * block + s.lo;
            const std::size_t real =
                first < grads.size() ? std::min(s.size(), grads.size() - first) : 0;
            if (real > 0) convert_n(grads.data() + first, dst, real);
            if (real < s.size())
              std::memset(static_cast<void*>(dst + real), 0, (s.size() - real) * sizeof(T));
          }
        offset += s.size();
      }
    });
  }

  bool direct_delivery() const noexcept {
    return Strategy::collective == Collective::reduce_scatter && target_.mode == Delivery::assign &&
           target_.dtype == options_.bucket_dtype;
  }

  void launch(std::size_t b) {
    BucketState& s = state_[b];
    const Bucket& bucket = plan_[b];
    visit_dtype(options_.bucket_dtype, [&](auto tag) {
      using T = decltype(tag);
      View<T, typename Comm::memory_space> all(buffer_of<T>(b), bucket.elements(comm_.size()));
      if constexpr (Strategy::collective == Collective::all_reduce) {
        s.work = comm_.all_reduce(all, options_.op);
      } else if (direct_delivery()) {
        View<T, typename Comm::memory_space> out(
            static_cast<T*>(target_.data) + bucket.shard_offset, bucket.block_elements);
        s.work = comm_.reduce_scatter(all, out, options_.op);
      } else {
        s.work = comm_.reduce_scatter(all, options_.op);
      }
    });
    s.launched = Clock::now();
    in_flight_.push_back(b);
    ++stats_.buckets;
    stats_.elements += bucket.elements(comm_.size());
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
  }

  void deliver(std::size_t b) {
    if (direct_delivery()) return;
    const Bucket& bucket = plan_[b];
    visit_dtype(options_.bucket_dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* base = buffer_of<T>(b);
      if constexpr (Strategy::collective == Collective::reduce_scatter) {
        const T* mine = base + std::size_t(comm_.rank()) * bucket.block_elements;
        put(mine, bucket.shard_offset, bucket.block_elements);
      } else {
        for (int r = 0; r < comm_.size(); ++r) {
          std::size_t offset = 0;
          for (const BucketSlice& s : bucket.slices) {
            const LayerInfo& g = layout_.layer(s.layer);
            const std::size_t flat = g.flat_base + std::size_t(r) * g.block_numel + s.lo;
            put(base + std::size_t(r) * bucket.block_elements + offset, flat, s.size());
            offset += s.size();
          }
        }
      }
    });
  }

  // target[at, at + n) = (or +=) values, converted to the target's type.
  template <class T>
  void put(const T* values, std::size_t at, std::size_t n) {
    if (target_.mode == Delivery::accumulate) {
      float* dst = static_cast<float*>(target_.data) + at;
      constexpr std::size_t tile = 1024;
      alignas(64) float widened[tile];
      for (std::size_t i = 0; i < n; i += tile) {
        const std::size_t m = std::min(tile, n - i);
        convert_n(values + i, widened, m);
        for (std::size_t j = 0; j < m; ++j)
          dst[i + j] += widened[j];
      }
      return;
    }
    visit_dtype(target_.dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      convert_n(values, static_cast<Out*>(target_.data) + at, n);
    });
  }

  Comm& comm_;
  const ShardLayout& layout_;
  Options options_;
  BucketPlan plan_;
  std::vector<BucketState> state_;
  std::vector<bool> arrived_;
  std::vector<Buffer<std::byte>> pool_;
  std::size_t buffer_limit_ = 2; // buffers before waiting for one to come back
  std::vector<std::size_t> free_;
  std::deque<std::size_t> in_flight_;
  ReduceTarget target_;
  bool active_ = false;
  ReducerStats stats_;
  Clock::time_point last_done_{};
};

} // namespace zero
