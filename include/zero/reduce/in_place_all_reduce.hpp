#pragma once
// InPlaceAllReduce<Comm>: ZeRO stage 0's gradient reduction without copies. When every rank keeps
// the whole gradient (the replica: each layer's parameters in order at its flat_base) in the type
// it is reduced in, an all-reduce can work on it where it is: element-wise sums do not care how
// the buffer is cut. The gradient is cut into contiguous buckets of at most `bucket_elements`,
// from the end (the order backward produces layers), and a bucket is all-reduced in place as soon
// as every layer it touches was handed over, overlapping the rest of backward, as DDP's bucket
// views do. Every element is summed in rank order by the communicator, so the bits are those of
// the BucketedReducer, which packs the same elements into buckets first.

#include "zero/comm/communicator.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/reduce/bucketed_reducer.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

// Over a stream space (Exec) the gradient may be in the space's memory, written by work on its
// stream: a communicator ordered after a caller stream (StagedCommunicator, NCCL) is pointed at
// Exec's while a bucket launches, so its all-reduce starts after that work.
template <ReducingCommunicator Comm, Element T, ExecutionSpace Exec = HostThreads>
requires accepts_space<typename Comm::memory_space, typename Exec::memory_space>
class InPlaceAllReduce {
  // Nothing here waits on the host for work queued on the gradient: in device memory only a
  // communicator ordered after the stream may reduce it.
  static_assert(!StreamSpace<Exec> || Exec::memory_space::host_accessible ||
                    OrderedAfterCaller<Comm, Exec>,
                "zero::InPlaceAllReduce: a gradient in device memory needs a communicator that "
                "starts after the caller's stream (NcclCommunicator, StagedCommunicator)");

 public:
  using LayerReduced = std::function<void(std::size_t layer)>;

  // `gradient`: the whole model's gradient as the replica layout holds it. Without `overlap`, each
  // bucket's all-reduce is waited for as soon as it is launched (DeepSpeed's overlap_comm: false).
  InPlaceAllReduce(Comm& comm, const ShardLayout& layout,
                   View<T, typename Exec::memory_space> gradient, std::size_t bucket_elements,
                   ReduceOp op, bool overlap = true, Exec exec = {})
      : comm_(comm), layout_(layout), exec_(exec), gradient_(gradient), op_(op), overlap_(overlap),
        buckets_of_(layout.layer_count()), layers_left_(layout.layer_count()),
        arrived_(layout.layer_count(), false) {
    require(bucket_elements > 0, "reduce bucket size must be at least one element");
    std::size_t end = 0;
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      end += layout.layer(l).flat_numel;
    require(gradient.size() >= end, "InPlaceAllReduce: the gradient holds " +
                                        std::to_string(gradient.size()) + " elements, the model " +
                                        std::to_string(end));
    std::size_t top = layout.layer_count(); // layers from `top` up lie beyond the bucket
    while (end > 0) {
      const std::size_t begin = end - std::min(end, bucket_elements);
      Bucket b{begin, end, {}};
      while (top > 0 && layout.layer(top - 1).flat_base >= end)
        --top;
      for (std::size_t l = top; l-- > 0;) {
        const LayerInfo& info = layout.layer(l);
        if (info.flat_base + info.flat_numel <= begin) break;
        if (info.flat_numel > 0) b.layers.push_back(l);
      }
      buckets_.push_back(std::move(b));
      end = begin;
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (std::size_t l : buckets_[b].layers)
        buckets_of_[l].push_back(b);
    works_.resize(buckets_.size());
    launched_.resize(buckets_.size());
  }

  InPlaceAllReduce(const InPlaceAllReduce&) = delete;
  InPlaceAllReduce& operator=(const InPlaceAllReduce&) = delete;
  ~InPlaceAllReduce() {
    for (std::size_t b : in_flight_)
      detail::wait_quietly(works_[b]); // never leave collectives on freed buffers
  }

  std::size_t buffer_bytes() const noexcept { return 0; } // no buffers: that is the point
  const ReducerStats& stats() const noexcept { return stats_; }

  void begin(LayerReduced layer_reduced = {}) {
    require(in_flight_.empty() && !active_,
            "InPlaceAllReduce::begin: the previous reduction was not finished");
    layer_reduced_ = std::move(layer_reduced);
    active_ = true;
    stats_ = {};
    std::fill(arrived_.begin(), arrived_.end(), false);
    pending_.assign(buckets_.size(), 0);
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      pending_[b] = buckets_[b].layers.size();
    for (std::size_t l = 0; l < layers_left_.size(); ++l)
      layers_left_[l] = buckets_of_[l].size();
  }

  // Layer l's gradient is in place: the buckets it completes are reduced now.
  void add(std::size_t l) {
    require(active_, "InPlaceAllReduce::add before begin()");
    require(!arrived_.at(l), "InPlaceAllReduce: the gradient of layer " + std::to_string(l) +
                                 " was handed over twice in one step");
    arrived_[l] = true;
    poll();
    for (std::size_t b : buckets_of_[l])
      if (--pending_[b] == 0) launch(b);
  }

  void finish() {
    require(active_, "InPlaceAllReduce::finish before begin()");
    std::string missing;
    for (std::size_t l = 0; l < arrived_.size(); ++l)
      if (!arrived_[l] && layout_.layer(l).flat_numel > 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(l);
    while (!in_flight_.empty())
      complete_oldest();
    active_ = false;
    if (!missing.empty())
      fail(ErrorKind::invalid_argument,
           "InPlaceAllReduce::finish: no gradient was handed over for layer(s) " + missing);
  }

 private:
  struct Bucket {
    std::size_t begin, end;          // of the flat gradient
    std::vector<std::size_t> layers; // touched, descending
  };
  using Clock = std::chrono::steady_clock;

  void launch(std::size_t b) {
    const Bucket& bucket = buckets_[b];
    {
      const CallerScope<Comm, Exec> caller(
          detail::wait_dropped("in_place_reducer.caller") ? nullptr : &comm_, exec_);
      works_[b] = comm_.all_reduce(gradient_.subview(bucket.begin, bucket.end - bucket.begin), op_);
    }
    launched_[b] = Clock::now();
    in_flight_.push_back(b);
    ++stats_.buckets;
    stats_.elements += bucket.end - bucket.begin;
    if (!overlap_)
      while (!in_flight_.empty())
        complete_oldest();
    stats_.most_in_flight = std::max(stats_.most_in_flight, in_flight_.size());
  }

  void poll() {
    while (!in_flight_.empty() && works_[in_flight_.front()].test())
      finished(in_flight_.front(), Clock::now());
  }
  void complete_oldest() {
    const std::size_t b = in_flight_.front();
    const auto start = Clock::now();
    works_[b].wait();
    const auto end = Clock::now();
    stats_.exposed_seconds += std::chrono::duration<double>(end - start).count();
    finished(b, end);
  }
  void finished(std::size_t b, Clock::time_point done) {
    in_flight_.pop_front();
    const auto start = std::max(launched_[b], last_done_);
    stats_.communication_seconds +=
        std::max(0.0, std::chrono::duration<double>(done - start).count());
    last_done_ = done;
    for (std::size_t l : buckets_[b].layers)
      if (--layers_left_[l] == 0 && layer_reduced_) layer_reduced_(l);
  }

  Comm& comm_;
  const ShardLayout& layout_;
  Exec exec_;
  View<T, typename Exec::memory_space> gradient_;
  ReduceOp op_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::size_t>> buckets_of_; // per layer, ascending
  std::vector<std::size_t> pending_, layers_left_;
  std::vector<bool> arrived_;
  std::vector<Work> works_;
  std::vector<Clock::time_point> launched_;
  std::deque<std::size_t> in_flight_;
  LayerReduced layer_reduced_;
  bool active_ = false;
  ReducerStats stats_;
  Clock::time_point last_done_{};
};

} // namespace zero
